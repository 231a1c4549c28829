#!/usr/bin/env bash
# The test command: `make check` (lint, unit tests, CLI smoke test), then the integration tests: the lab (root;
# real daemons), Molecule's containers and the Go-built tools. Each phase prints its time; the integration run
# also prints the time of each module (and CI collects all of them: scripts/phases.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
. scripts/phases.sh
bash scripts/check.sh
if [ "$(id -u)" -ne 0 ]; then
  echo "test: the lab tests need root; run 'sudo make test'" >&2
  exit 1
fi
phase integration python -m pytest tests/integration -q -m "lab or tools" --durations=20
