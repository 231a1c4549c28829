#!/usr/bin/env bash
# Writes requirements.lock: every Python package of the development environment (pyproject.toml with the `dev`
# extra, which takes in iac, ansible and plan) pinned to one version with its hashes. `make setup` installs exactly
# these (uv pip install --require-hashes), so every machine and CI get the same versions.
# Usage: scripts/lock.sh            keep the pins already in the lock, add what pyproject.toml newly asks for
#        scripts/lock.sh --upgrade  the newest versions pyproject.toml allows (then run `make setup` and `make test`)
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${HA_OPS_CACHE:-$HOME/.cache/ha-ops}
uv=$cache/uv-${UV_VERSION:-0.13.8}/bin/uv
[ -x "$uv" ] || { echo "lock: no uv at $uv; run 'make setup' first" >&2; exit 2; }
export UV_CACHE_DIR=${UV_CACHE_DIR:-$cache/uv}
# (--python: the interpreter the environment runs on, so markers resolve as they will there)
"$uv" pip compile pyproject.toml --extra dev --generate-hashes --quiet --python .venv/bin/python \
  --custom-compile-command "scripts/lock.sh" -o requirements.lock "$@"
echo "lock: requirements.lock pins $(grep -cE '^[A-Za-z0-9]' requirements.lock) packages"
