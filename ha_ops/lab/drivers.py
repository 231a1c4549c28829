"""GPU drivers in the lab: fake driver builds the gpu_driver role installs (its archive method: lab nodes share the
host's package database, so nothing goes through apt), and the Ansible inventory that reaches the lab's nodes over
their sshd. A build's nvidia-smi reads the node's fake GPUs, and loading it (the role's activation command) sets the
version they report; a build marked broken loses every GPU, as a driver that cannot talk to the hardware does."""

from __future__ import annotations

import io
import json
import shlex
import sys
import tarfile
from pathlib import Path
from typing import Any

from ha_ops.lab.agents import gpu_dir
from ha_ops.lab.context import LabContext
from ha_ops.lab.sshd import client_key, known_hosts
from ha_ops.spec.inventory import render_inventory

PACKAGE_PREFIX = "nvidia-driver-"
NVIDIA_SMI = "/usr/local/sbin/nvidia-smi"  # on a GPU node (its own /usr/local/sbin: ha_ops.lab.systemctl)


def archive_dir(ctx: LabContext) -> Path:
    return ctx.paths.root / "drivers"


def _add(tar: tarfile.TarFile, name: str, data: bytes, mode: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    tar.addfile(info, io.BytesIO(data))


def build_driver(ctx: LabContext, version: str, works: bool = True) -> Path:
    """A fake driver build as `<prefix><version>.tar.gz`: driver.json (version, whether it works) and a bin/nvidia-smi
    that answers `--query-gpu=driver_version` from the node's fake GPUs (HA_OPS_FAKE_DIR)."""
    directory = archive_dir(ctx)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{PACKAGE_PREFIX}{version}.tar.gz"
    python = shlex.quote(sys.executable)
    nvidia_smi = (
        "#!/bin/sh\n"
        "# Fake nvidia-smi of an ha-ops lab driver build: the driver version of every GPU, from the fake backend.\n"
        f'exec {python} -m ha_ops gpu driver-version --backend fake --fake-dir "$HA_OPS_FAKE_DIR"\n'
    )
    with tarfile.open(path.with_suffix(".tmp"), "w:gz") as tar:
        _add(tar, "driver.json", json.dumps({"version": version, "works": works}).encode(), 0o644)
        _add(tar, "bin/nvidia-smi", nvidia_smi.encode(), 0o755)
    path.with_suffix(".tmp").rename(path)
    return path


def driver_root(ctx: LabContext, node: str) -> Path:
    """The node's A/B driver slots (the role's gpu_driver_root): node-private, as lab nodes share /opt."""
    return ctx.node_dir(node) / "gpu-driver"


def install_nvidia_smi(ctx: LabContext, node: str, sbin: Path) -> None:
    """The GPU node's `nvidia-smi`, in the folder it mounts over /usr/local/sbin: its active driver's, reading its
    fake GPUs; without a driver from the role it fails as nvidia-smi does with no driver loaded."""
    active = shlex.quote(str(driver_root(ctx, node) / "active" / "bin" / "nvidia-smi"))
    script = sbin / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        "# ha-ops lab: the nvidia-smi of this node's active driver slot (ha_ops.lab.drivers).\n"
        f"[ -x {active} ] || {{ echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
        'driver." >&2; exit 9; }\n'
        f'HA_OPS_FAKE_DIR={shlex.quote(str(gpu_dir(ctx, node)))} exec {active} "$@"\n'
    )
    script.chmod(0o755)


def ha_ops_command(*args: str) -> str:
    return " ".join(shlex.quote(a) for a in [sys.executable, "-m", "ha_ops", *args])


def lab_inventory(ctx: LabContext) -> dict[str, Any]:
    """The spec's inventory plus what reaching and driving the lab's nodes takes: the lab's ssh key and known_hosts,
    node-private folders for the driver slots and the role's fact (lab nodes share /etc and /usr with the host), the
    archive install method, and activation/validation against each node's fake GPUs."""
    inventory = render_inventory(ctx.spec)
    ssh_args = (
        f"-o UserKnownHostsFile={known_hosts(ctx)} -o StrictHostKeyChecking=yes -o GlobalKnownHostsFile=/dev/null"
    )
    inventory["all"]["vars"] |= {
        "ansible_user": "root",
        "ansible_ssh_private_key_file": str(client_key(ctx)),
        "ansible_ssh_common_args": ssh_args,
        "ansible_python_interpreter": "/usr/bin/python3",
    }
    for node in ctx.layout.nodes_with_role("gpu"):
        private = ctx.node_dir(node.name)
        fake = str(gpu_dir(ctx, node.name))
        inventory["all"]["hosts"][node.name] |= {
            "ha_ops_fake_dir": fake,
            "gpu_driver_install_method": "archive",
            "gpu_driver_archive_dir": str(archive_dir(ctx)),
            "gpu_driver_root": str(driver_root(ctx, node.name)),
            "gpu_driver_package_root": str(private / "nvidia-driver"),
            "gpu_driver_fact_file": str(private / "ansible" / "gpu_driver.fact"),
            # The role runs it with HA_OPS_DRIVER_DIR set to the version's folder: load-driver's --package.
            "gpu_driver_activate_command": ha_ops_command("gpu", "load-driver", "--fake-dir", fake),
            "gpu_driver_validate_command": f"env HA_OPS_FAKE_DIR={fake} "
            + str(driver_root(ctx, node.name) / "active" / "bin" / "nvidia-smi"),
        }
    return inventory


def node_commands() -> dict[str, str]:
    """What a rollout runs on a lab node to validate it, templated per host by Ansible."""
    return {
        "health_command": ha_ops_command("health", "check", "--backend", "fake", "--node", "{{ inventory_hostname }}")
        + " --fake-dir {{ ha_ops_fake_dir }}",
        "version_command": ha_ops_command("gpu", "driver-version", "--backend", "fake")
        + " --fake-dir {{ ha_ops_fake_dir }}",
    }
