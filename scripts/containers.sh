#!/usr/bin/env bash
# Rootful podman for the Molecule scenarios, configured for this host without touching /etc, and the base image the
# scenarios start from (Debian 12 with systemd and Python), built with debootstrap because no container registry
# is reachable. The image is cached under ~/.cache/ha-ops/images, keyed by its version; a missing image is rebuilt.
# Prints the environment to use (CONTAINERS_CONF, CONTAINERS_STORAGE_CONF) with `--env`.
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE_VERSION=1
IMAGE=localhost/ha-ops-base:bookworm-v${IMAGE_VERSION}
CACHE=${HA_OPS_CACHE:-$HOME/.cache/ha-ops}
CONF_DIR=$CACHE/podman
TARBALL=$CACHE/images/ha-ops-base-bookworm-v${IMAGE_VERSION}.tar
# Packages a role's scenario needs before Ansible runs (python3 for modules, systemd as PID 1).
INCLUDE=python3,python3-apt,systemd,systemd-sysv,dbus,iproute2,procps,ca-certificates,sudo

# Scenarios run side by side and each runs this script: a file rewritten in place would be read half-written by
# another scenario's podman ("runroot must be set"). Replace it whole, and only when it changes.
write_file() {
  local tmp
  tmp=$(mktemp "$1.XXXXXX")
  cat >"$tmp"
  if cmp -s "$tmp" "$1"; then rm -f "$tmp"; else chmod 644 "$tmp" && mv -f "$tmp" "$1"; fi
}

write_conf() {
  mkdir -p "$CONF_DIR"
  local nofile nproc
  nofile=$(ulimit -Hn)
  nproc=$(ulimit -Hu)
  local pid_max
  pid_max=$(cat /proc/sys/kernel/pid_max)
  if [ "$nproc" = unlimited ] || [ "$nproc" -gt "$pid_max" ]; then nproc=$pid_max; fi
  # podman's default ulimits exceed this host's hard limits (EPERM); crun refuses its hybrid cgroups: use runc.
  write_file "$CONF_DIR/containers.conf" <<CONF
[containers]
default_ulimits = ["nofile=1024:${nofile}", "nproc=${nproc}:${nproc}"]
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
runtime = "runc"
CONF
  write_file "$CONF_DIR/storage.conf" <<CONF
[storage]
driver = "overlay"
runroot = "/run/ha-ops-containers"
graphroot = "$CACHE/podman/storage"
CONF
}

env_lines() {
  echo "export CONTAINERS_CONF=$CONF_DIR/containers.conf"
  echo "export CONTAINERS_STORAGE_CONF=$CONF_DIR/storage.conf"
}

if [ "${1:-}" = "--env" ]; then env_lines; exit 0; fi

write_conf
eval "$(env_lines)"
if podman image exists "$IMAGE"; then
  echo "containers: base image $IMAGE present"
  exit 0
fi
if [ ! -s "$TARBALL" ]; then
  mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  mirror=${mirror:-http://deb.debian.org/debian}
  rootfs=$(mktemp -d /var/tmp/ha-ops-rootfs.XXXXXX)
  trap 'rm -rf "$rootfs"' EXIT
  echo "containers: building the base image with debootstrap from $mirror (about a minute)"
  debootstrap --variant=minbase --include="$INCLUDE" bookworm "$rootfs" "$mirror" >/dev/null
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  mkdir -p "$(dirname "$TARBALL")"
  tar -C "$rootfs" -cf "$TARBALL.tmp" . && mv "$TARBALL.tmp" "$TARBALL"
fi
echo "containers: importing $TARBALL as $IMAGE"
podman import --change 'CMD ["/sbin/init"]' "$TARBALL" "$IMAGE" >/dev/null
