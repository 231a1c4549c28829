"""The lab's fake driver builds and its Ansible inventory (rendering only; the lab test runs them)."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from ha_ops.lab.context import LabContext
from ha_ops.lab.drivers import build_driver, lab_inventory, node_commands
from ha_ops.lab.paths import LabPaths
from ha_ops.spec import compute_layout, load_spec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def ctx(tmp_path: Path) -> LabContext:
    spec = load_spec(EXAMPLES / "lab.yaml")
    return LabContext(spec, compute_layout(spec), LabPaths.for_lab(spec.name, base=tmp_path))


def test_a_driver_build_carries_its_version_and_a_fake_nvidia_smi(ctx: LabContext) -> None:
    path = build_driver(ctx, "575.51.02", works=False)
    assert path.name == "nvidia-driver-575.51.02.tar.gz"
    with tarfile.open(path) as tar:
        manifest = json.loads(tar.extractfile("driver.json").read())  # type: ignore[union-attr]
        smi = tar.getmember("bin/nvidia-smi")
        script = tar.extractfile(smi).read().decode()  # type: ignore[union-attr]
    assert manifest == {"version": "575.51.02", "works": False}
    assert smi.mode == 0o755
    assert "gpu driver-version --backend fake" in script and "$HA_OPS_FAKE_DIR" in script


def test_the_lab_inventory_reaches_nodes_over_the_lab_ssh_and_keeps_driver_state_private(ctx: LabContext) -> None:
    inventory = lab_inventory(ctx)
    cluster = inventory["all"]["vars"]
    assert cluster["ansible_user"] == "root"
    assert "StrictHostKeyChecking=yes" in cluster["ansible_ssh_common_args"]
    gpu2 = inventory["all"]["hosts"]["gpu2"]
    node_dir = str(ctx.node_dir("gpu2"))
    assert gpu2["gpu_driver_install_method"] == "archive"
    for key in ("gpu_driver_root", "gpu_driver_package_root", "gpu_driver_fact_file", "ha_ops_fake_dir"):
        assert gpu2[key].startswith(node_dir), key
    assert "load-driver" in gpu2["gpu_driver_activate_command"]
    assert "gpu_driver_root" not in inventory["all"]["hosts"]["ctl1"]
    assert list(inventory["all"]["children"]["gpu_nodes"]["hosts"]) == ["gpu1", "gpu2", "gpu3", "gpu4"]


def test_node_commands_read_each_hosts_fake_gpus() -> None:
    rendered = node_commands()
    assert rendered["version_command"].endswith("--fake-dir {{ ha_ops_fake_dir }}")
    assert "health check --backend fake" in rendered["health_command"]
