"""The container base for the Molecule scenarios: rootful podman configured by scripts/containers.sh starts the
cached Debian 12 image with systemd as PID 1 and Python for Ansible. Containers are named `hao-test-*` and removed."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator

import pytest

from tests.labkit import REPO, script_env

pytestmark = pytest.mark.lab

IMAGE = "localhost/ha-ops-base:bookworm-v1"
NAME = "hao-test-systemd"


def podman(*args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
    env = script_env("containers.sh")
    return subprocess.run(["podman", *args], capture_output=True, text=True, env=env, check=check, timeout=timeout)


@pytest.fixture
def container() -> Iterator[str]:
    subprocess.run([str(REPO / "scripts" / "containers.sh")], check=True, timeout=600)  # builds the image if missing
    podman("rm", "-f", NAME, check=False)
    podman("run", "-d", "--name", NAME, "--systemd=always", IMAGE, "/sbin/init")
    yield NAME
    podman("rm", "-f", "-t", "2", NAME, check=False)
    assert NAME not in podman("ps", "-a", "--format", "{{.Names}}").stdout


def test_the_base_image_boots_systemd_and_has_python(container: str) -> None:
    deadline = time.time() + 60
    state = ""
    while time.time() < deadline:
        state = podman("exec", container, "systemctl", "is-system-running", check=False).stdout.strip()
        if state in ("running", "degraded"):
            break
        time.sleep(0.5)
    assert state in ("running", "degraded"), state
    assert podman("exec", container, "cat", "/proc/1/comm").stdout.strip() == "systemd"
    assert podman("exec", container, "python3", "-c", "import apt; print('ok')").stdout.strip() == "ok"
