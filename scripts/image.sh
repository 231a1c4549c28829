#!/usr/bin/env bash
# The ha-ops container image (the agent DaemonSet's and the remediation controller's), built here with podman on the
# Debian base image of scripts/containers.sh, from this checkout: its runtime dependencies only (no Ansible, no
# Pulumi), installed by uv from its cache. Written as an OCI archive, which a kubelet node's containerd imports (the
# lab's real Kubernetes nodes; see ha_ops/lab/kubelets.py).
#
#   scripts/image.sh OUT.tar          the ha-ops image, localhost/ha-ops/ha-ops:dev
#   scripts/image.sh --pause OUT.tar  the pod sandbox image, localhost/ha-ops/pause:lab (sleeps; no registry here)
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE=${HA_OPS_CACHE:-$HOME/.cache/ha-ops}
UV=$CACHE/uv-0.13.8/bin/uv
BASE=localhost/ha-ops-base:bookworm-v1
eval "$(bash scripts/containers.sh --env)"
bash scripts/containers.sh >/dev/null  # the base image, imported from its cached tarball when missing

work=$(mktemp -d /var/tmp/ha-ops-image.XXXXXX)
trap 'rm -rf "$work"' EXIT

if [ "${1:-}" = "--pause" ]; then
  out=$2 image=localhost/ha-ops/pause:lab
  # SIGKILL: `sleep` as PID 1 ignores SIGTERM, and a sandbox holds nothing to save.
  printf 'FROM %s\nSTOPSIGNAL SIGKILL\nENTRYPOINT ["/bin/sleep", "infinity"]\n' "$BASE" >"$work/Containerfile"
else
  out=$1 image=localhost/ha-ops/ha-ops:dev
  # The image's Python is Debian 12's 3.11, as here: wheels resolved for this interpreter run there.
  # From a copy of the project's package files: setuptools would leave its build/ folder in the checkout.
  mkdir "$work/src"
  cp -r pyproject.toml README.md ha_ops "$work/src/"
  UV_CACHE_DIR=${UV_CACHE_DIR:-$CACHE/uv} "$UV" pip install -q --python /usr/bin/python3.11 \
    --target "$work/site" --no-compile "$work/src"
  rm -rf "$work/site/bin"
  cat >"$work/Containerfile" <<EOF
FROM $BASE
COPY site /opt/ha-ops/site
ENV PYTHONPATH=/opt/ha-ops/site PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
RUN printf '#!/bin/sh\nexec python3 -m ha_ops.cli.main "\$@"\n' >/usr/local/bin/ha-ops && chmod 755 /usr/local/bin/ha-ops
# Not root: the agent and the controller need no privilege in their containers (the API grants what they do).
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/ha-ops"]
EOF
fi
podman build -q --network=none -t "$image" -f "$work/Containerfile" "$work" >/dev/null
mkdir -p "$(dirname "$out")"
rm -f "$out.tmp"
podman save -q --format oci-archive -o "$out.tmp" "$image"
mv -f "$out.tmp" "$out"
echo "$image"
