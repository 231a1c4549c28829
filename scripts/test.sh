#!/usr/bin/env bash
# The test command: lint, unit tests, then the lab integration tests (root; real daemons).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
ruff check ha_ops tests
python -m pytest tests/unit -q
if [ "$(id -u)" -eq 0 ]; then
  python -m pytest tests/integration -q -m lab
else
  echo "test: the lab tests need root; run 'sudo make test'" >&2
  exit 1
fi
