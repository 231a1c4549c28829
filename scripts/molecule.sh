#!/usr/bin/env bash
# Runs Molecule for one role with the project's environment: rootful podman through the project's configuration,
# the collections taken from the ansible wheel, and apt's downloads cached between runs.
# Usage: scripts/molecule.sh ROLE [molecule command and options]   (default command: test)
set -euo pipefail
cd "$(dirname "$0")/.."
role=${1:?usage: scripts/molecule.sh ROLE [molecule command]}
shift
[ -d "roles/$role/molecule" ] || { echo "molecule: roles/$role has no molecule scenario" >&2; exit 2; }
bash scripts/ansible.sh >/dev/null
bash scripts/containers.sh >/dev/null
eval "$(bash scripts/ansible.sh --env)"
export HA_OPS_APT_ARCHIVES=${HA_OPS_APT_ARCHIVES:-${HA_OPS_CACHE:-$HOME/.cache/ha-ops}/apt-archives}
# One download cache per container: apt locks its cache, and containers of one scenario install at the same time.
names=$(grep -ohE 'hao-[A-Za-z0-9-]+' "roles/$role/molecule/default/molecule.yml" .config/molecule/config.yml | sort -u)
for name in $names; do
  mkdir -p "$HA_OPS_APT_ARCHIVES/$name/partial"
done
if [ "${1:-test}" = test ]; then
  # What a run interrupted before its destroy left: removed by name, instead of a whole `molecule destroy` play at
  # the start of every test (the sequence in .config/molecule/config.yml starts with create).
  # shellcheck disable=SC2086
  podman rm -f --ignore $names >/dev/null
fi
# A host folder the scenario's containers can share (for example Slurm's StateSaveLocation, as shared storage would
# be); removed when molecule exits.
HA_OPS_SCENARIO_SHARED=$(mktemp -d /var/tmp/hao-molecule-shared.XXXXXX)
export HA_OPS_SCENARIO_SHARED
trap 'rm -rf "$HA_OPS_SCENARIO_SHARED"' EXIT
export PATH="$PWD/.venv/bin:$PATH"
cd "roles/$role"
molecule "${@:-test}"
