"""Driver rollouts in the lab: the gpu_driver role (archive method, fake driver builds) on the lab's GPU nodes over
their sshd, driven by `ha-ops rollout` from a controller node, draining and returning nodes in the real Slurm, with
both remediation controllers running: each batch is in a maintenance window at the controller (issue 22)."""

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
from ha_ops.util.wait import wait_for
from tests.labkit import audit_entries, call_controller, leader, reset_remediation

pytestmark = pytest.mark.lab

GPU_NODES = ("gpu1", "gpu2", "gpu3", "gpu4")
BASE, BROKEN, NEXT, LATER = "550.90.07", "575.51.02", "580.65.06", "590.48.01"
# What the controller does to a node it remediates (maintenance windows are not remediation).
REMEDIATION = {"drain", "requeue_jobs", "spare_in", "spare_out", "reset_gpu", "reboot_node", "validate", "resume"}


def versions(lab: Lab) -> dict[str, set[str]]:
    return {node: set(v) for node, v in rollouts.reported_versions(lab).items()}


def loads(lab: Lab, node: str, version: str) -> int:
    """How often `version` was loaded on the node's GPU 0 (the fake backend's event log)."""
    events = (lab.ctx.node_dir(node) / "gpus" / "events.jsonl").read_text().splitlines()
    wanted = {"gpu": 0, "kind": "reset", "detail": f"driver {version} loaded"}
    return sum(1 for line in events if wanted.items() <= json.loads(line).items())


@pytest.fixture(scope="module")
def driver_lab(lab: Lab) -> Iterator[rollouts.RolloutFiles]:
    """The lab's GPU nodes on the base driver, installed through the role (slot a), and both remediation controllers
    running with a fresh history: the rollout announces its batches to them."""
    reset_remediation(lab)
    yield rollouts.prepare(lab, BASE, {BROKEN: False, NEXT: True, LATER: True})
    reset_remediation(lab)


def remediated(lab: Lab, node: str) -> list[str]:
    return [e["what"] for e in audit_entries(lab) if e["node"] == node and e["what"] in REMEDIATION]


def windows(lab: Lab, node: str) -> list[str]:
    return [e["what"] for e in audit_entries(lab) if e["node"] == node and e["what"].startswith("maintenance")]


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
        # The broken driver's lost GPUs were the rollout's to handle: the controller, running, remediated nothing on
        # the canary, which was in a maintenance window from before its drain until it was back.
        assert remediated(lab, canary) == [], audit_entries(lab)
        assert windows(lab, canary) == ["maintenance_start", "maintenance_end"]
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


def test_an_xid_79_outside_the_batch_is_remediated_while_the_rollout_goes_on(
    lab: Lab, driver_lab: rollouts.RolloutFiles, tmp_path: Path
) -> None:
    assert versions(lab) == {n: {NEXT} for n in GPU_NODES}
    before = {n: len(windows(lab, n)) for n in GPU_NODES}
    cli = rollouts.start_rollout(lab, LATER, NEXT, "--soak", "0", "--waves", "1,rest", log=tmp_path / "later.log")
    try:

        def canary_changing() -> str | None:
            state = rollouts.rollout_state(lab)
            if not state or state.get("target_version") != LATER:
                return None
            (canary,) = state["waves"][0]["batches"][0]
            return canary if state["nodes"][canary]["step"] in ("applying", "applied", "validating") else None

        canary = wait_for("the canary being changed", canary_changing, timeout=120, interval=0.1)
        outside = next(n for n in ("gpu2", "gpu3", "gpu1") if n != canary)
        lab.node(outside).gpus().fall_off_bus(1)  # XID 79 on a node no batch holds
        wait_for(f"{outside} remediated and returned", lambda: remediated(lab, outside)[-1:] == ["resume"],
                 timeout=120, interval=0.5)  # fmt: skip
        cli.wait(600)
    finally:
        if cli.poll() is None:
            os.kill(cli.pid, signal.SIGKILL)
            cli.wait(10)
    log = (tmp_path / "later.log").read_text()
    assert cli.returncode == 0, log[-3000:] + slurm_view(lab)
    assert rollouts.rollout_state(lab)["phase"] == "completed", rollout_nodes(lab)
    assert {"drain", "reboot_node", "validate", "resume"} <= set(remediated(lab, outside)), audit_entries(lab)
    assert remediated(lab, canary) == []  # in its window throughout
    # Every node the rollout changed had one window, opened and closed (the remediated one too, if it was back in
    # service when the rollout reached it; else the rollout skipped it).
    changed = [n for n in GPU_NODES if versions(lab)[n] == {LATER}]
    assert canary in changed, versions(lab)
    assert all(windows(lab, n)[before[n] :] == ["maintenance_start", "maintenance_end"] for n in changed), {
        n: windows(lab, n) for n in GPU_NODES
    }


def test_a_rollout_asked_to_start_while_the_breaker_is_open_refuses_and_names_why(
    lab: Lab, driver_lab: rollouts.RolloutFiles
) -> None:
    reset_remediation(lab)
    try:
        for node in ("gpu1", "gpu2"):  # the lab's breaker allows one node within its window: the second trips it
            lab.node(node).gpus().fall_off_bus(0)
            lab.node(node).gpus().break_permanently(0)

        def breaker_open() -> bool:
            ctl = leader(lab)
            return bool(ctl) and call_controller(lab, ctl, "/v1/state")[1]["state"]["breaker"]["open"]

        wait_for("the breaker open", breaker_open, timeout=30, interval=0.2)
        before = versions(lab)
        state_dir = str(driver_lab.state_dir / "refused")  # (a separate one: this rollout stays paused)
        result = rollout(lab, BASE, LATER, "--soak", "0", "--state-dir", state_dir)
        assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
        assert "refused to start: the remediation controller's circuit breaker is open" in result.stderr, result.stderr
        assert versions(lab) == before  # nothing touched
    finally:
        reset_remediation(lab)
