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
mkdir -p "$HA_OPS_APT_ARCHIVES/partial"
export PATH="$PWD/.venv/bin:$PATH"
cd "roles/$role"
exec molecule "${@:-test}"
