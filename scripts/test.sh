#!/usr/bin/env bash
# The test command: lint, unit tests, then the integration tests: the lab (root; real daemons) and the Go-built tools.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
ruff check ha_ops tests
# The Ansible side: YAML and Ansible lint over the roles and playbooks (offline; collections from the ansible wheel).
eval "$(bash scripts/ansible.sh --env)"
yamllint roles playbooks .config
ansible-lint roles playbooks
python -m pytest tests/unit -q
if [ "$(id -u)" -eq 0 ]; then
  python -m pytest tests/integration -q -m "lab or tools" --durations=20
else
  echo "test: the lab tests need root; run 'sudo make test'" >&2
  exit 1
fi
