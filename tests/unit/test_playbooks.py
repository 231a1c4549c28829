"""The playbooks parse against an inventory rendered from a spec, and the inventory gives them the groups they
target."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from ha_ops.spec import load_spec
from ha_ops.spec.inventory import render_inventory

REPO = Path(__file__).resolve().parents[2]
BIN = REPO / ".venv" / "bin"
PLAYBOOKS = sorted((REPO / "playbooks").glob("*.yml"))


@pytest.fixture(scope="module")
def inventory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("inventory") / "inventory.yml"
    path.write_text(yaml.safe_dump(render_inventory(load_spec(REPO / "examples" / "lab-storage.yaml"))))
    return path


def ansible_env() -> dict[str, str]:
    return dict(os.environ, ANSIBLE_ROLES_PATH=str(REPO / "roles"), ANSIBLE_NOCOLOR="1")


def test_ansible_reads_the_rendered_inventory(inventory: Path) -> None:
    out = subprocess.run([str(BIN / "ansible-inventory"), "-i", str(inventory), "--list"], capture_output=True,
                         text=True, check=True, env=ansible_env(), timeout=60)  # fmt: skip
    parsed = json.loads(out.stdout)
    assert parsed["slurm_controllers"]["hosts"] == ["ctl1", "ctl2"]
    assert parsed["_meta"]["hostvars"]["gpu3"]["slurm_compute_gpus"] == 8
    for group in ("gpu_nodes", "slurm_compute", "monitoring", "moosefs_master", "moosefs_chunkserver"):
        assert parsed[group]["hosts"], group


@pytest.mark.parametrize("playbook", PLAYBOOKS, ids=lambda p: p.name)
def test_playbook_parses(playbook: Path, inventory: Path) -> None:
    result = subprocess.run([str(BIN / "ansible-playbook"), "--syntax-check", "-i", str(inventory), str(playbook)],
                            capture_output=True, text=True, env=ansible_env(), timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
