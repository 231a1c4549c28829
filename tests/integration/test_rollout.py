"""Driver rollouts in the lab: the gpu_driver role (archive method, fake driver builds) on the lab's GPU nodes over
their sshd, driven by `ha-ops rollout` from a controller node, draining and returning nodes in the real Slurm."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from ha_ops.lab.cluster import Lab
from ha_ops.lab.drivers import build_driver, lab_inventory, node_commands
from ha_ops.schedulers.slurm import Slurm
from tests.labkit import REPO

pytestmark = pytest.mark.lab

GPU_NODES = ("gpu1", "gpu2", "gpu3", "gpu4")
BASE, TARGET, BROKEN = "550.90.07", "570.86.15", "575.51.02"
VENV_BIN = Path(sys.executable).parent


def on_ctl1(lab: Lab, *argv: str, timeout: float = 600):
    env = {"ANSIBLE_ROLES_PATH": str(REPO / "roles"), "ANSIBLE_NOCOLOR": "1", "ANSIBLE_HOST_KEY_CHECKING": "True",
           "HOME": str(lab.paths.root / "ctl1-home")}  # fmt: skip
    return lab.node("ctl1").run(["env", *(f"{k}={v}" for k, v in env.items()), *argv], timeout=timeout, check=False)


def driver_versions(lab: Lab) -> dict[str, set[str]]:
    out = {}
    for node in GPU_NODES:
        fake = lab.ctx.node_dir(node) / "gpus"
        states = [json.loads(p.read_text()) for p in sorted(fake.glob("gpu*.json"))]
        out[node] = {s["driver_version"] for s in states}
    return out


@pytest.fixture(scope="module")
def driver_lab(lab: Lab) -> Iterator[dict[str, Path]]:
    """The lab's GPU nodes on the base driver, installed through the role (slot a), with the agents draining in Slurm
    themselves (no controller acting on the drains a rollout makes)."""
    lab.use_controllers(False)
    (lab.paths.root / "ctl1-home").mkdir(exist_ok=True)
    inventory = lab.paths.root / "inventory.yml"
    inventory.write_text(yaml.safe_dump(lab_inventory(lab.ctx), sort_keys=False))
    spec = lab.paths.root / "spec.yaml"
    spec.write_text(yaml.safe_dump(lab.spec.model_dump(mode="json"), sort_keys=False))
    build_driver(lab.ctx, BASE)
    build_driver(lab.ctx, TARGET)
    build_driver(lab.ctx, BROKEN, works=False)
    base = on_ctl1(lab, str(VENV_BIN / "ansible-playbook"), "-i", str(inventory),
                   str(REPO / "playbooks" / "driver-rollout.yml"), "-e", f"gpu_driver_version={BASE}")  # fmt: skip
    assert base.returncode == 0, base.stdout[-4000:] + base.stderr[-2000:]
    yield {"inventory": inventory, "spec": spec}
    lab.use_controllers(True)


def slurm_view(lab: Lab) -> str:
    """What Slurm and the agents said, for failure messages."""
    nodes = on_ctl1(lab, "sinfo", "-N", "-o", "%N %T %E", timeout=30).stdout
    agents = {n: (lab.ctx.node_dir(n) / "log" / "agent.log").read_text()[-600:] for n in GPU_NODES}
    return f"\nsinfo:\n{nodes}\nagents: {agents}"


def rollout_nodes(lab: Lab) -> dict:
    """Each node's step and why, from the rollout's state (for failure messages)."""
    state = json.loads((lab.paths.root / "rollout" / "state.json").read_text())
    return {name: {k: v for k, v in node.items() if k in ("step", "failure", "skip_reason", "reason")}
            for name, node in state["nodes"].items()}  # fmt: skip


def rollout(lab: Lab, paths: dict[str, Path], *args: str, timeout: float = 900):
    commands = node_commands()
    return on_ctl1(lab, sys.executable, "-m", "ha_ops", "rollout", "driver", "--spec", str(paths["spec"]),
                   "--inventory", str(paths["inventory"]), "--state-dir", str(lab.paths.root / "rollout"),
                   "--health-command", commands["health_command"], "--version-command", commands["version_command"],
                   "--from-version", BASE, "--soak", "0", "--json", *args, timeout=timeout)  # fmt: skip


def test_the_whole_lab_is_rolled_to_a_new_driver(lab: Lab, driver_lab: dict[str, Path]) -> None:
    assert driver_versions(lab) == {n: {BASE} for n in GPU_NODES}
    result = rollout(lab, driver_lab, "--to", TARGET, "--waves", "1,rest", "--max-unavailable", "1")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:] + slurm_view(lab)
    summary = json.loads(result.stdout)
    assert summary["phase"] == "completed", summary
    assert summary["counts"] == {"done": 4}, (summary, rollout_nodes(lab), result.stderr[-3000:])
    assert driver_versions(lab) == {n: {TARGET} for n in GPU_NODES}
    slurm = Slurm(lab.transport("gpu1"))
    assert not any(slurm.node(n).drained for n in GPU_NODES)
    for node in GPU_NODES:
        fact = json.loads((lab.ctx.node_dir(node) / "ansible" / "gpu_driver.fact").read_text())
        assert (fact["active_version"], fact["previous_version"]) == (TARGET, BASE)


def test_a_driver_failing_validation_on_the_canary_halts_and_leaves_the_fleet_as_it_was(
    lab: Lab, driver_lab: dict[str, Path]
) -> None:
    slurm = Slurm(lab.transport("gpu1"))
    before = driver_versions(lab)
    assert before == {n: {TARGET} for n in GPU_NODES}  # after the test above
    job = on_ctl1(lab, "sbatch", "--parsable", "-w", "gpu1", "--wrap", "sleep 300", timeout=30)
    assert job.returncode == 0, job.stderr
    job_id = job.stdout.strip()
    try:
        result = rollout(lab, driver_lab, "--to", BROKEN, "--from-version", TARGET, "--waves", "1,rest")
        assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
        summary = json.loads(result.stdout)
        assert summary["phase"] == "halted", summary
        assert "canary" in summary["reason"], summary
        (canary,) = summary["failed"]
        assert BROKEN in summary["failed"][canary] or "validation" in summary["failed"][canary], summary
        # Every node runs the driver it ran before; the canary's own role switched it back.
        assert driver_versions(lab) == before
        fact = json.loads((lab.ctx.node_dir(canary) / "ansible" / "gpu_driver.fact").read_text())
        assert fact["active_version"] == TARGET and fact["last_failure"]["version"] == BROKEN
        # The job on a node the rollout never reached ran on, undisturbed.
        assert slurm.job_state(job_id) == "RUNNING"
        assert not slurm.node("gpu1").drained
    finally:
        on_ctl1(lab, "scancel", job_id, timeout=30)
