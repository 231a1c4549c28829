"""The persisted rollout state: versioned JSON written atomically, operator requests, and the rollout lock."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ha_ops.rollout.inputs import RolloutInputs
from ha_ops.rollout.plan import FleetNode, plan_rollout
from ha_ops.rollout.policy import build_policy
from ha_ops.rollout.protocols import DriverFacts
from ha_ops.rollout.state import (
    STATE_VERSION,
    TERMINAL_STEPS,
    NodeStep,
    Phase,
    RolloutError,
    RolloutState,
    RolloutStateError,
    RolloutStore,
    new_state,
)

REPO = Path(__file__).resolve().parents[2]


def a_state(rollout_id: str = "r1") -> RolloutState:
    nodes = [FleetNode(f"n{i}", f"rack{i % 2}", driver_version="550.1") for i in range(1, 7)]
    policy = build_policy({"canary": "2", "max_unavailable": "2"})
    plan = plan_rollout(nodes, policy, "570.2")
    return new_state(plan, policy, rollout_id, 100.0, RolloutInputs(inventory=Path("/x/inv.yml")),
                     {n.name: n.domain for n in nodes})  # fmt: skip


def test_new_state_follows_the_plan() -> None:
    state = a_state()
    assert state.phase == Phase.PLANNED and state.version == STATE_VERSION
    assert [w.name for w in state.waves] == ["canary", "wave 1", "wave 2", "wave 3"]
    assert len(state.waves[0].batches) == 1 and len(state.waves[0].batches[0]) == 2
    assert all(n.step == NodeStep.PENDING for n in state.nodes.values())
    first = state.nodes[state.waves[0].batches[0][0]]
    assert first.wave == 0 and first.batch == 0 and first.domain.startswith("rack")
    assert state.inputs == RolloutInputs(inventory=Path("/x/inv.yml")) and state.max_unavailable == 2


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    store = RolloutStore(tmp_path)
    state = a_state()
    node = state.nodes["n1"]
    node.step, node.before, node.attempts = NodeStep.APPLYING, DriverFacts(active_version="550.1"), {"apply": 1}
    store.save(state)
    store.save(state)
    loaded = store.load()
    assert loaded == state and loaded.revision == 2
    on_disk = json.loads((tmp_path / "state.json").read_text())
    assert on_disk["version"] == STATE_VERSION
    assert on_disk["nodes"]["n1"]["step"] == "applying"
    assert on_disk["nodes"]["n1"]["before"]["active_version"] == "550.1"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".state.json")] == []  # no temp files left


def test_states_are_documented_constants() -> None:
    assert [s.value for s in NodeStep] == [
        "pending", "draining", "drained", "applying", "applied", "validating", "returning", "done",
        "failed_rolled_back", "rolling_back", "rolled_back", "skipped", "failed",
    ]  # fmt: skip
    assert [p.value for p in Phase] == [
        "planned", "running", "paused", "halted", "rolling_back", "completed", "aborted",
    ]  # fmt: skip
    assert {s.value for s in TERMINAL_STEPS} == {"done", "failed_rolled_back", "rolled_back", "skipped", "failed"}


def test_missing_damaged_or_foreign_state_is_refused(tmp_path: Path) -> None:
    store = RolloutStore(tmp_path)
    with pytest.raises(RolloutError, match="no rollout in"):
        store.load()
    (tmp_path / "state.json").write_text("{not json")
    with pytest.raises(RolloutStateError, match="unreadable"):
        store.load()
    (tmp_path / "state.json").write_text(json.dumps({"version": 99}))
    with pytest.raises(RolloutStateError, match="version 99, expected 1"):
        store.load()
    (tmp_path / "state.json").write_text(json.dumps({"version": STATE_VERSION, "id": "x"}))
    with pytest.raises(RolloutStateError, match="invalid"):
        store.load()


def test_operator_requests_live_beside_the_state(tmp_path: Path) -> None:
    store = RolloutStore(tmp_path)
    assert not store.read_control().pause
    store.request(pause=True, note="freeze")
    other = RolloutStore(tmp_path)
    control = other.read_control()
    assert control.pause and control.note == "freeze" and not control.abort
    other.request(abort=True, abort_rollback=True)
    control = store.read_control()
    assert control.pause and control.abort and control.abort_rollback  # one request does not erase the other


def test_a_second_lock_is_refused_naming_the_holder(tmp_path: Path) -> None:
    first, second = RolloutStore(tmp_path), RolloutStore(tmp_path)
    with first.lock():
        with first.lock():  # re-entrant for its own holder
            pass
        assert second.running_elsewhere()
        with pytest.raises(RolloutError, match=rf"lock held by pid {os.getpid()}"), second.lock():
            pass
    with second.lock():
        assert not second.running_elsewhere()


def test_the_lock_dies_with_its_process(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from ha_ops.rollout.state import RolloutStore\n"
         "with RolloutStore(sys.argv[1]).lock():\n    print('locked', flush=True); time.sleep(60)", str(tmp_path)],
        cwd=REPO, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        store = RolloutStore(tmp_path)
        with pytest.raises(RolloutError, match=f"pid {holder.pid}"), store.lock():
            pass
        os.kill(holder.pid, signal.SIGKILL)  # kill -9: no cleanup runs
        holder.wait(timeout=10)
        deadline = time.monotonic() + 5
        while store.running_elsewhere() and time.monotonic() < deadline:
            time.sleep(0.05)
        with store.lock():
            pass
    finally:
        holder.kill()
        holder.wait(timeout=10)
        if holder.stdout:
            holder.stdout.close()


def test_a_new_rollout_is_refused_while_one_is_not_finished(tmp_path: Path) -> None:
    store = RolloutStore(tmp_path)
    store.refuse_if_active()  # nothing there
    state = a_state()
    state.phase, state.reason = Phase.PAUSED, "paused on request"
    store.save(state)
    with pytest.raises(RolloutError, match=r"rollout r1 to 570.2 is paused \(paused on request\); finish it"):
        store.refuse_if_active()
    state.phase = Phase.COMPLETED
    store.save(state)
    store.refuse_if_active()


def test_a_finished_rollout_is_archived(tmp_path: Path) -> None:
    store = RolloutStore(tmp_path)
    assert store.archive() is None
    state = a_state("old")
    state.phase = Phase.HALTED
    store.save(state)
    store.request(pause=True)
    moved = store.archive()
    assert moved == tmp_path / "history" / "state-old.json" and moved.exists()
    assert not store.exists() and not store.read_control().pause


def test_log_keeps_the_last_lines() -> None:
    state = a_state()
    for i in range(250):
        state.note(f"event {i}", 0.0)
    assert len(state.log) == 200 and state.log[-1] == "1970-01-01T00:00:00Z event 249"
