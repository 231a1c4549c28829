#!/usr/bin/env bash
# Lint: ruff (rules and format) over the Python, yamllint and ansible-lint over the roles and playbooks (offline:
# the collections come from the ansible wheel, extracted by scripts/ansible.sh into the user's own cache).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
# No cache: a checkout whose .ruff_cache root wrote stays lintable by its owner.
ruff check --no-cache ha_ops tests .config/ansible
ruff format --no-cache --check ha_ops tests .config/ansible
bash scripts/ansible.sh >/dev/null
eval "$(bash scripts/ansible.sh --env)"
yamllint roles playbooks .config
ansible-lint -q roles playbooks
