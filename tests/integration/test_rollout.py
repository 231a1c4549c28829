"""Driver rollouts in the lab: the gpu_driver role (archive method, fake driver builds) on the lab's GPU nodes over
their sshd, driven by `ha-ops rollout` from a controller node, draining and returning nodes in the real Slurm."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ha_ops.lab import rollouts
from ha_ops.lab.cluster import Lab
from ha_ops.schedulers.slurm import Slurm

pytestmark = pytest.mark.lab

GPU_NODES = ("gpu1", "gpu2", "gpu3", "gpu4")
BASE, BROKEN, NEXT = "550.90.07", "575.51.02", "580.65.06"


def versions(lab: Lab) -> dict[str, set[str]]:
    return {node: set(v) for node, v in rollouts.reported_versions(lab).items()}


def loads(lab: Lab, node: str, version: str) -> int:
    """How often `version` was loaded on the node's GPU 0 (the fake backend's event log)."""
    events = (lab.ctx.node_dir(node) / "gpus" / "events.jsonl").read_text().splitlines()
    wanted = {"gpu": 0, "kind": "reset", "detail": f"driver {version} loaded"}
    return sum(1 for line in events if wanted.items() <= json.loads(line).items())


@pytest.fixture(scope="module")
def driver_lab(lab: Lab) -> Iterator[rollouts.RolloutFiles]:
    """The lab's GPU nodes on the base driver, installed through the role (slot a), with the agents draining in Slurm
    themselves (no controller acting on the drains a rollout makes)."""
    lab.use_controllers(False)
    yield rollouts.prepare(lab, BASE, {BROKEN: False, NEXT: True})
    lab.use_controllers(True)


def slurm_view(lab: Lab) -> str:
    """What Slurm and the agents said, for failure messages."""
    nodes = rollouts.on_operator_node(lab, "sinfo", "-N", "-o", "%N %T %E", timeout=30).stdout
    agents = {n: (lab.ctx.node_dir(n) / "log" / "agent.log").read_text()[-600:] for n in GPU_NODES}
    return f"\nsinfo:\n{nodes}\nagents: {agents}"


def rollout_nodes(lab: Lab) -> dict:
    """Each node's step and why, from the rollout's state (for failure messages)."""
    return {name: {k: v for k, v in node.items() if k in ("step", "failure", "note", "attempts")}
            for name, node in rollouts.rollout_state(lab).get("nodes", {}).items()}  # fmt: skip


def rollout(lab: Lab, *args: str, timeout: float = 900):
    return rollouts.on_operator_node(lab, *rollouts.rollout_args(lab, *args), timeout=timeout)


def test_a_driver_failing_validation_on_the_canary_halts_and_leaves_the_fleet_as_it_was(
    lab: Lab, driver_lab: rollouts.RolloutFiles
) -> None:
    slurm = Slurm(lab.transport("gpu1"))
    before = versions(lab)
    assert before == {n: {BASE} for n in GPU_NODES}
    job = rollouts.on_operator_node(lab, "sbatch", "--parsable", "-w", "gpu1", "--wrap", "sleep 300", timeout=30)
    assert job.returncode == 0, job.stderr
    job_id = job.stdout.strip()
    try:
        result = rollout(lab, BROKEN, BASE, "--soak", "0", "--waves", "1,rest")
        assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
        summary = json.loads(result.stdout)
        assert summary["phase"] == "halted", summary
        assert "canary" in summary["reason"], summary
        (canary,) = summary["failed"]
        assert BROKEN in summary["failed"][canary] or "validation" in summary["failed"][canary], summary
        # Every node runs the driver it ran before; the canary's own role switched it back.
        assert versions(lab) == before
        fact = json.loads((lab.ctx.node_dir(canary) / "ansible" / "gpu_driver.fact").read_text())
        assert fact["active_version"] == BASE and fact["last_failure"]["version"] == BROKEN
        # The job on a node the rollout never reached ran on, undisturbed.
        assert slurm.job_state(job_id) == "RUNNING"
        assert not slurm.node("gpu1").drained
    finally:
        rollouts.on_operator_node(lab, "scancel", job_id, timeout=30)


def test_a_rollout_killed_mid_wave_is_resumed_and_touches_no_node_twice(
    lab: Lab, driver_lab: rollouts.RolloutFiles, tmp_path: Path
) -> None:
    assert versions(lab) == {n: {BASE} for n in GPU_NODES}  # the canary above switched itself back
    cli = rollouts.start_rollout(lab, NEXT, BASE, "--soak", "0", "--waves", "1,rest", "--max-unavailable", "1",
                                 log=tmp_path / "killed.log")  # fmt: skip

    def mid_wave() -> str | None:
        """A node of the last wave (`rest`: gpu2 and gpu3 after the canary and a wave of 1) is being changed while
        another of that wave is done: the middle of a wave."""
        state = rollouts.rollout_state(lab)
        if not state or len(state["waves"]) < 3:
            return None
        steps = {n: state["nodes"][n]["step"] for n in (n for b in state["waves"][-1]["batches"] for n in b)}
        changing = [n for n, s in steps.items() if s == "applying"]
        return changing[0] if changing and "done" in steps.values() else None

    deadline, node = time.monotonic() + 600, None
    try:
        while node is None and cli.poll() is None and time.monotonic() < deadline:
            node = mid_wave()
            time.sleep(0.1)
    finally:
        if cli.poll() is None:
            os.kill(cli.pid, signal.SIGKILL)
        cli.wait(10)
    assert node is not None, (tmp_path / "killed.log").read_text()[-3000:]
    assert cli.returncode == -signal.SIGKILL, (tmp_path / "killed.log").read_text()[-2000:]
    status = rollouts.on_operator_node(lab, sys.executable, "-m", "ha_ops", "rollout", "status", "--state-dir",
                                       str(driver_lab.state_dir), "--json", timeout=30)  # fmt: skip
    seen = json.loads(status.stdout)
    assert seen["running"] is False and seen["summary"]["phase"] == "running", seen["summary"]
    assert seen["state"]["nodes"][node]["step"] == "applying"

    started = time.monotonic()
    resumed = rollouts.on_operator_node(lab, sys.executable, "-m", "ha_ops", "rollout", "resume", "--state-dir",
                                        str(driver_lab.state_dir), "--json", timeout=900)  # fmt: skip
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:] + slurm_view(lab)
    summary = json.loads(resumed.stdout)
    assert summary["phase"] == "completed" and summary["counts"] == {"done": 4}, (summary, rollout_nodes(lab))
    print(f"\nkilled while {node} was applying; resume finished in {time.monotonic() - started:.0f} s")
    # The whole lab on the new driver, the role's slots recording the one before (for a rollback), none drained.
    assert versions(lab) == {n: {NEXT} for n in GPU_NODES}
    for node in GPU_NODES:
        fact = json.loads((lab.ctx.node_dir(node) / "ansible" / "gpu_driver.fact").read_text())
        assert (fact["active_version"], fact["previous_version"]) == (NEXT, BASE)
    # Touched once: every node loaded the new driver exactly once, the one interrupted mid-apply included.
    assert {n: loads(lab, n, NEXT) for n in GPU_NODES} == {n: 1 for n in GPU_NODES}, rollout_nodes(lab)
    assert not any(Slurm(lab.transport("gpu1")).node(n).drained for n in GPU_NODES)
