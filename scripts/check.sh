#!/usr/bin/env bash
# `make check`, the inner loop while developing: lint, the unit tests and the CLI smoke test (the installed ha-ops
# command run as a user runs it). No root, no lab; about a minute on 2 cores (the budget is 2 minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
. scripts/phases.sh
phase lint bash scripts/lint.sh
# Two workers: the unit tests are independent (each writes only under its own tmp_path).
phase "unit and smoke" python -m pytest tests/unit tests/smoke -q -n 2 -p no:cacheprovider
