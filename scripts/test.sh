#!/usr/bin/env bash
# The test command: lint, unit tests, then the lab integration tests (root; real daemons).
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
  python -m pytest tests/integration -q -m lab
else
  echo "test: the lab tests need root; run 'sudo make test'" >&2
  exit 1
fi
