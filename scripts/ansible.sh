#!/usr/bin/env bash
# The Ansible side of set-up. Galaxy is unreachable, but the `ansible` wheel on PyPI bundles every collection: take
# just the ones the roles and Molecule's podman driver use (containers.podman, ansible.posix) out of the pinned
# wheel into a cache outside the checkout, keyed by the wheel's version, so a fresh clone in CI reuses them.
# `--env` prints the environment the playbooks, Molecule and the tests use (collections, podman configuration).
set -euo pipefail
cd "$(dirname "$0")/.."

ANSIBLE_WHEEL_VERSION=12.3.0  # the last release for ansible-core 2.19, which is the last for Python 3.11
COLLECTIONS=(ansible/posix containers/podman)
CACHE=${HA_OPS_CACHE:-$HOME/.cache/ha-ops}
DEST=$CACHE/collections/ansible-$ANSIBLE_WHEEL_VERSION

env_lines() {
  echo "export ANSIBLE_COLLECTIONS_PATH=$DEST"
  bash scripts/containers.sh --env
}

if [ "${1:-}" = "--env" ]; then env_lines; exit 0; fi

if [ -f "$DEST/.complete" ]; then
  echo "ansible: collections present in $DEST"
  exit 0
fi
python=${PYTHON:-.venv/bin/python}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "ansible: extracting ${COLLECTIONS[*]} from the ansible $ANSIBLE_WHEEL_VERSION wheel"
"$python" -m pip download -q --no-deps "ansible==$ANSIBLE_WHEEL_VERSION" -d "$work"
rm -rf "$DEST.tmp" && mkdir -p "$DEST.tmp"
"$python" - "$work"/ansible-*.whl "$DEST.tmp" "${COLLECTIONS[@]}" <<'PY'
import sys
import zipfile

wheel, dest, *wanted = sys.argv[1:]
prefixes = tuple(f"ansible_collections/{name}/" for name in wanted)
with zipfile.ZipFile(wheel) as archive:
    members = [name for name in archive.namelist() if name.startswith(prefixes)]
    missing = [p for p in prefixes if not any(m.startswith(p) for m in members)]
    if missing:
        sys.exit(f"ansible: the wheel has no {', '.join(missing)}")
    archive.extractall(dest, members)
PY
touch "$DEST.tmp/.complete"
rm -rf "$DEST" && mv "$DEST.tmp" "$DEST"
echo "ansible: collections in $DEST"
