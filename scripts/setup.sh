#!/usr/bin/env bash
# Installs everything ha-ops needs on Debian 12: the daemons the lab runs, and a Python virtual
# environment with the project. Idempotent: a second run only checks. Each phase prints its time as it ends.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/phases.sh

DEB_PACKAGES=(
  iproute2 iptables iputils-ping iputils-arping procps psmisc util-linux
  frr
  slurm-wlm slurm-client munge
  openssh-server openssh-client
  prometheus prometheus-alertmanager
  moosefs-master moosefs-chunkserver moosefs-metalogger moosefs-client moosefs-cli fuse3
  podman runc debootstrap containerd
  rsyslog rsyslog-gnutls nftables
  python3-venv rsync
  chromium  # headless, for the tests that render a report as a person sees it (ha-ops plan simulate --report)
)

debian_packages() {
  local missing=() p
  for p in "${DEB_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]} == 0)); then
    echo "setup: Debian packages present"
    return
  fi
  echo "setup: installing Debian packages: ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then echo "setup: installing Debian packages needs root" >&2; return 1; fi
  # The lab starts its own daemons; the packages' own services must not start (there is no init here anyway).
  local policy_added=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && policy_added=1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
  if ((policy_added)); then rm -f /usr/sbin/policy-rc.d; fi
}

# uv installs the environment: with its cache, about 5 s where pip took 91 s on every fresh clone (CI's case).
UV_VERSION=0.13.8

python_env() {
  local python=${PYTHON:-python3} stamp=.venv/.ha-ops-installed cache=${HA_OPS_CACHE:-$HOME/.cache/ha-ops}
  local uv=$cache/uv-$UV_VERSION/bin/uv
  export PIP_CACHE_DIR=${PIP_CACHE_DIR:-$cache/pip} UV_CACHE_DIR=${UV_CACHE_DIR:-$cache/uv}
  if [ ! -x "$uv" ]; then
    echo "setup: installing uv $UV_VERSION into $cache"
    rm -rf "$cache/uv-$UV_VERSION"
    "$python" -m venv "$cache/uv-$UV_VERSION"
    "$cache/uv-$UV_VERSION/bin/python" -m pip install -q "uv==$UV_VERSION"
  fi
  if [ ! -x .venv/bin/python ]; then
    echo "setup: creating .venv"
    "$uv" venv -q --seed --python "$python" .venv  # (--seed: pip in it, for the Molecule scenario's wheelhouse)
  fi
  if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ requirements.lock -nt "$stamp" ]; then
    echo "setup: installing the Python packages (requirements.lock)"
    # Exactly the locked versions, each checked against its hash; then ha-ops itself, whose dependencies they are.
    "$uv" pip install -q --python .venv/bin/python --require-hashes -r requirements.lock
    "$uv" pip install -q --python .venv/bin/python --no-deps -e .
    touch "$stamp"
  else
    echo "setup: Python environment up to date"
  fi
}

# Rootful podman for the Molecule scenarios and their base image (cached under ~/.cache/ha-ops/images).
container_image() {
  if [ "$(id -u)" -eq 0 ]; then
    bash scripts/containers.sh
    # The pod sandbox image of the lab's kubelet nodes (ha_ops/lab/kubelets.py): no registry serves pause here.
    if [ ! -s tools/images/pause-lab.tar ]; then bash scripts/image.sh --pause tools/images/pause-lab.tar >/dev/null; fi
  else
    echo "setup: the container base image needs root; run 'sudo make setup' to build it"
  fi
}

phase "setup: Debian packages" debian_packages
phase "setup: Python environment" python_env
phase "setup: container base image" container_image
# Ansible collections for the roles and Molecule (from the ansible wheel; Galaxy is unreachable).
phase "setup: Ansible collections" bash scripts/ansible.sh
# The Pulumi CLI and plugins and the Kubernetes control plane, built from Go modules at pinned versions and cached
# under ~/.cache/ha-ops/tools (about 40 minutes on a cold 2-core machine, a second once built).
phase "setup: Go-built tools" bash scripts/tools.sh
echo "setup: done. Run 'make test' (or 'make check' while developing)."
