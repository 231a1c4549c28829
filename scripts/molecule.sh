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
for name in $(grep -ohE 'hao-[A-Za-z0-9-]+' "roles/$role/molecule/default/molecule.yml" .config/molecule/config.yml | sort -u); do
  mkdir -p "$HA_OPS_APT_ARCHIVES/$name/partial"
done
# A host folder the scenario's containers can share (for example Slurm's StateSaveLocation, as shared storage would
# be); removed when molecule exits.
HA_OPS_SCENARIO_SHARED=$(mktemp -d /var/tmp/hao-molecule-shared.XXXXXX)
export HA_OPS_SCENARIO_SHARED
trap 'rm -rf "$HA_OPS_SCENARIO_SHARED"' EXIT
export PATH="$PWD/.venv/bin:$PATH"
cd "roles/$role"
molecule "${@:-test}"
