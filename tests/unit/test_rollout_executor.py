"""The rollout executor against a fake fleet (one object playing scheduler, driver applier and validator).

The fake records every call and every *effect* (a call that changed a node), and can "kill -9" the executor at
any numbered event: a call's entry, its exit, or a state write. KillSignal is a BaseException, so no handler in the
executor sees it, as with a real kill; a fresh executor then resumes from the state file.
"""

from __future__ import annotations

import base64
import json
import os
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from ha_ops.errors import TransportError, WaitTimeout
from ha_ops.rollout.ansible import AnsibleDriverApplier, AnsibleRunner, AnsibleValidator
from ha_ops.rollout.executor import DRAIN_REASON_PREFIX, RolloutExecutor
from ha_ops.rollout.plan import FleetNode, plan_rollout
from ha_ops.rollout.policy import build_policy
from ha_ops.rollout.protocols import ApplyResult, DriverFacts, Validation
from ha_ops.rollout.scheduler import RolloutScheduler
from ha_ops.rollout.state import NodeStep, Phase, RolloutError, RolloutState, RolloutStore, new_state
from ha_ops.schedulers.slurm import SlurmJob, SlurmNode

TARGET = "570.86.15"
OLD = "550.127.05"


class KillSignal(BaseException):
    """kill -9 of the CLI: nothing after it runs."""


class Killer:
    def __init__(self, at: int | None = None) -> None:
        self.at = at
        self.events = 0

    def tick(self, where: str) -> None:
        self.events += 1
        if self.at is not None and self.events == self.at:
            raise KillSignal(where)


@dataclass
class FakeNode:
    version: str | None = OLD
    previous: str | None = None
    last_failure: tuple[str, str] | None = None
    drained: bool = False
    down: bool = False
    jobs: int = 0
    stuck: bool = False  # its jobs never end
    broken_with_target: bool = False  # the role's own validation fails: it rolls back by itself
    fails_validation: bool = False  # our validation fails on the target version
    unhealthy_on_target: bool = False  # passes validation, then fails the gate after the soak
    silent_after_resume: int = 0  # health checks answered "not responding" after a resume, as Slurm does (idle*)
    silent_checks: int = 0
    rollback_breaks: bool = False


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


class Fleet:
    """Scheduler + DriverApplier + Validator over fake nodes."""

    def __init__(self, names: list[str], killer: Killer | None = None) -> None:
        self.nodes = {name: FakeNode() for name in names}
        self.killer = killer or Killer()
        self.calls: list[tuple[str, str]] = []
        self.effects: list[tuple[str, str]] = []
        self.max_out = 0
        self.clock = Clock()
        self.on_effect: Callable[[str, str], None] | None = None

    # bookkeeping
    def _enter(self, action: str, node: str) -> FakeNode:
        self.calls.append((action, node))
        self.killer.tick(f"before {action} {node}")
        return self.nodes[node]

    def _exit(self, action: str, node: str) -> None:
        self.killer.tick(f"after {action} {node}")

    def _effect(self, action: str, node: str) -> None:
        self.effects.append((action, node))
        if self.on_effect:
            self.on_effect(action, node)
        self.max_out = max(self.max_out, len(self.out()))

    def out(self) -> set[str]:
        return {name for name, n in self.nodes.items() if n.drained or n.down}

    def effects_of(self, node: str) -> list[str]:
        return [action for action, name in self.effects if name == node]

    # Scheduler
    def drain(self, node: str, reason: str) -> None:
        n = self._enter("drain", node)
        assert reason.startswith(DRAIN_REASON_PREFIX)
        if not n.drained:
            n.drained = True
            self._effect("drain", node)
        self._exit("drain", node)

    def wait_idle(self, node: str, timeout: float) -> None:
        n = self._enter("wait_idle", node)
        if n.stuck:
            raise WaitTimeout(f"timed out after {timeout:g} s waiting for jobs on {node} to end")
        n.jobs = 0
        self._exit("wait_idle", node)

    def requeue_jobs(self, node: str) -> list[str]:
        n = self._enter("requeue_jobs", node)
        ids = [f"{node}-job{i}" for i in range(n.jobs)]
        n.jobs = 0
        self._exit("requeue_jobs", node)
        return ids

    def resume(self, node: str) -> None:
        n = self._enter("resume", node)
        if n.drained:
            n.drained = False
            n.silent_checks = n.silent_after_resume
            self._effect("resume", node)
        self._exit("resume", node)

    def node_healthy(self, node: str) -> bool:
        n = self._enter("node_healthy", node)
        self._exit("node_healthy", node)
        if n.silent_checks and not n.drained:
            n.silent_checks -= 1
            return False
        return not n.drained and not n.down and not (n.unhealthy_on_target and n.version == TARGET)

    def unavailable(self) -> set[str]:
        self.killer.tick("unavailable")
        return self.out()

    # DriverApplier
    def facts(self, node: str) -> DriverFacts:
        n = self._enter("facts", node)
        self._exit("facts", node)
        failure = n.last_failure or (None, None)
        return DriverFacts(
            active_version=n.version,
            previous_version=n.previous,
            last_failure_version=failure[0],
            last_failure_reason=failure[1],
        )

    def apply(self, node: str, version: str) -> ApplyResult:
        n = self._enter("apply", node)
        assert n.drained, f"{node} applied while in service"
        if n.broken_with_target and version == TARGET:
            n.last_failure = (version, "validation failed (exit 9: no devices)")
            self._effect("apply", node)
            result = ApplyResult(False, True, n.version, f"{version} failed validation; rolled back to {n.version}")
        elif n.version == version:
            result = ApplyResult(True, False, version, "already active")
        else:
            n.previous, n.version = n.version, version
            self._effect("apply", node)
            result = ApplyResult(True, False, version, f"active {version}")
        self._exit("apply", node)
        return result

    def rollback(self, node: str) -> ApplyResult:
        n = self._enter("rollback", node)
        assert n.drained, f"{node} rolled back while in service"
        if n.rollback_breaks or n.previous is None:
            result = ApplyResult(False, False, n.version, "no previous slot on this node")
        else:
            n.previous, n.version = n.version, n.previous
            self._effect("rollback", node)
            result = ApplyResult(True, False, n.version, f"back on {n.version}")
        self._exit("rollback", node)
        return result

    # Validator
    def validate(self, node: str, version: str | None, *, burn_in: bool) -> Validation:
        n = self._enter("validate", node)
        self._exit("validate", node)
        if version is not None and n.version != version:
            return Validation(False, f"GPUs report {n.version}, expected {version}", n.version)
        if n.fails_validation and n.version == TARGET:
            return Validation(False, "GPU3 XID 79 under the burn-in", n.version)
        return Validation(True, "clean", n.version)


class KillingStore(RolloutStore):
    """The real store; its writes are events too (a kill right after the state was written)."""

    def __init__(self, directory: Path, killer: Killer) -> None:
        super().__init__(directory)
        self.killer = killer

    def save(self, state: RolloutState) -> None:
        super().save(state)
        self.killer.tick("after save")


def fleet_nodes(count: int, domains: int = 3, down: tuple[str, ...] = ()) -> list[FleetNode]:
    return [
        FleetNode(f"n{i}", f"rack{(i - 1) % domains + 1}", down=f"n{i}" in down, driver_version=OLD)
        for i in range(1, count + 1)
    ]


def start(directory: Path, nodes: list[FleetNode], **policy: object) -> RolloutStore:
    built = build_policy({"soak_s": 0, **policy})
    plan = plan_rollout(nodes, built, TARGET)
    store = RolloutStore(directory)
    store.save(new_state(plan, built, "r1", 0.0, domains={n.name: n.domain for n in nodes}))
    return store


def execute(store: RolloutStore, fleet: Fleet, lines: list[str] | None = None) -> RolloutState:
    executor = RolloutExecutor(
        store,
        fleet,
        fleet,
        fleet,
        clock=fleet.clock,
        sleep=fleet.clock.sleep,
        progress=(lines if lines is not None else []).append,
    )
    return executor.run()


def steps(state: RolloutState) -> dict[str, str]:
    return {name: node.step.value for name, node in state.nodes.items()}


# --- the normal path ------------------------------------------------------------------------------------------
def test_whole_fleet_rolled(tmp_path: Path) -> None:
    nodes = fleet_nodes(12)
    fleet = Fleet([n.name for n in nodes])
    lines: list[str] = []
    state = execute(start(tmp_path, nodes, max_unavailable="3"), fleet, lines)
    assert state.phase == Phase.COMPLETED
    assert set(steps(state).values()) == {"done"}
    for name, node in fleet.nodes.items():
        assert (node.version, node.drained) == (TARGET, False), name
        assert fleet.effects_of(name) == ["drain", "apply", "resume"], name
    assert fleet.max_out <= 3
    assert RolloutStore(tmp_path).load().phase == Phase.COMPLETED
    assert any("n1: done" in line for line in lines)
    assert all(w.status == "done" and w.gate == "passed" for w in state.waves)


def test_batches_are_drained_together_then_upgraded_one_by_one(tmp_path: Path) -> None:
    nodes = fleet_nodes(6)
    fleet = Fleet([n.name for n in nodes])
    execute(start(tmp_path, nodes, canary="2", waves=["rest"], max_unavailable="2"), fleet)
    first_two = fleet.effects[:3]
    assert [a for a, _ in first_two] == ["drain", "drain", "apply"]  # both canaries out before the first apply
    assert fleet.max_out == 2


def test_soak_between_waves_not_after_the_last(tmp_path: Path) -> None:
    nodes = fleet_nodes(10)
    fleet = Fleet([n.name for n in nodes])
    state = execute(start(tmp_path, nodes, waves=["2", "rest"], soak_s=600), fleet)
    assert state.phase == Phase.COMPLETED
    assert len(state.waves) == 3
    assert sum(fleet.clock.slept) == pytest.approx(1200)  # after the canary and after wave 1


def test_a_node_found_on_the_target_is_skipped_untouched(tmp_path: Path) -> None:
    nodes = fleet_nodes(4)
    fleet = Fleet([n.name for n in nodes])
    fleet.nodes["n3"].version = TARGET  # the plan did not know
    state = execute(start(tmp_path, nodes), fleet)
    assert state.phase == Phase.COMPLETED
    assert state.nodes["n3"].step == NodeStep.SKIPPED and TARGET in state.nodes["n3"].note
    assert fleet.effects_of("n3") == []


def test_jobs_that_outlive_the_drain_timeout_leave_the_node_untouched(tmp_path: Path) -> None:
    nodes = fleet_nodes(4)
    fleet = Fleet([n.name for n in nodes])
    fleet.nodes["n2"].stuck = True
    state = execute(start(tmp_path, nodes, drain={"mode": "wait", "timeout_s": 60}), fleet)
    assert state.phase == Phase.COMPLETED
    n2 = state.nodes["n2"]
    assert n2.step == NodeStep.SKIPPED and "60 s" in n2.note
    assert fleet.effects_of("n2") == ["drain", "resume"]
    assert (fleet.nodes["n2"].version, fleet.nodes["n2"].drained) == (OLD, False)


def test_requeue_policy_requeues_before_waiting(tmp_path: Path) -> None:
    nodes = fleet_nodes(3)
    fleet = Fleet([n.name for n in nodes])
    for node in fleet.nodes.values():
        node.jobs = 2
    execute(start(tmp_path, nodes, drain={"mode": "requeue", "timeout_s": 60}), fleet)
    for name in fleet.nodes:
        calls = [a for a, n in fleet.calls if n == name]
        assert calls.index("requeue_jobs") < calls.index("wait_idle") < calls.index("apply")


# --- failures ---------------------------------------------------------------------------------------------------
def test_canary_failure_halts_and_rolls_back_every_changed_node(tmp_path: Path) -> None:
    nodes = fleet_nodes(8)
    fleet = Fleet([n.name for n in nodes])
    fleet.nodes["n2"].fails_validation = True
    lines: list[str] = []
    state = execute(start(tmp_path, nodes, canary=["n1", "n2"], max_unavailable="2"), fleet, lines)
    assert state.phase == Phase.HALTED
    assert "canary: 1 of 2 node(s) failed (n2: validation failed: GPU3 XID 79" in state.reason
    assert "canary_max_failures is 0" in state.reason
    assert state.nodes["n1"].step == NodeStep.ROLLED_BACK
    assert state.nodes["n2"].step == NodeStep.FAILED_ROLLED_BACK
    assert {state.nodes[f"n{i}"].step for i in range(3, 9)} == {NodeStep.PENDING}
    # The fleet is as it was: every node on the old driver and in service; the others never touched.
    for name, node in fleet.nodes.items():
        assert (node.version, node.drained) == (OLD, False), name
    assert fleet.effects_of("n1") == ["drain", "apply", "resume", "drain", "rollback", "resume"]
    assert fleet.effects_of("n2") == ["drain", "apply", "rollback", "resume"]
    assert all(fleet.effects_of(f"n{i}") == [] for i in range(3, 9))
    assert any(line.startswith("halted: canary") for line in lines)
    assert any("rollout r1 halted" in line for line in lines)


def test_canary_the_role_rolled_back_by_itself(tmp_path: Path) -> None:
    nodes = fleet_nodes(5)
    fleet = Fleet([n.name for n in nodes])
    fleet.nodes["n1"].broken_with_target = True
    state = execute(start(tmp_path, nodes, canary=["n1"]), fleet)
    assert state.phase == Phase.HALTED
    assert state.nodes["n1"].step == NodeStep.FAILED_ROLLED_BACK
    assert "the role rolled it back" in state.nodes["n1"].failure
    assert fleet.effects_of("n1") == ["drain", "apply", "resume"]  # no rollback call: the role had done it
    assert fleet.nodes["n1"].version == OLD


def test_halt_without_rollback_leaves_done_nodes_on_the_target(tmp_path: Path) -> None:
    nodes = fleet_nodes(6)
    fleet = Fleet([n.name for n in nodes])
    fleet.nodes["n2"].fails_validation = True
    state = execute(start(tmp_path, nodes, canary=["n1", "n2"], max_unavailable="2", rollback_on_halt=False), fleet)
    assert state.phase == Phase.HALTED
    assert state.nodes["n1"].step == NodeStep.DONE and fleet.nodes["n1"].version == TARGET
    assert state.nodes["n2"].step == NodeStep.FAILED_ROLLED_BACK and fleet.nodes["n2"].version == OLD


def test_one_failure_in_a_later_wave_is_rolled_back_and_the_rollout_continues(tmp_path: Path) -> None:
    nodes = fleet_nodes(20)
    fleet = Fleet([n.name for n in nodes])
    fleet.nodes["n7"].fails_validation = True
    state = execute(start(tmp_path, nodes, canary="1", waves=["rest"], max_unavailable="4"), fleet)
    assert state.phase == Phase.COMPLETED  # 1 of 19 is under 10%
    assert state.nodes["n7"].step == NodeStep.FAILED_ROLLED_BACK
    assert (fleet.nodes["n7"].version, fleet.nodes["n7"].drained) == (OLD, False)  # back in service
    assert sum(1 for n in state.nodes.values() if n.step == NodeStep.DONE) == 19
    assert state.counts() == {"done": 19, "failed_rolled_back": 1}


def test_failures_beyond_the_wave_threshold_halt_and_roll_back(tmp_path: Path) -> None:
    nodes = fleet_nodes(11)
    fleet = Fleet([n.name for n in nodes])
    for name in ("n4", "n8"):
        fleet.nodes[name].fails_validation = True
    state = execute(start(tmp_path, nodes, canary=["n1"], waves=["rest"], max_unavailable="1"), fleet)
    assert state.phase == Phase.HALTED
    assert "wave 1: 2 of 10 node(s) failed" in state.reason
    assert "wave_max_failure_fraction 0.1" in state.reason
    for name, node in fleet.nodes.items():
        assert (node.version, node.drained) == (OLD, False), name
    rolled = [n for n, s in state.nodes.items() if s.step == NodeStep.ROLLED_BACK]
    assert "n1" in rolled  # the canary too
    # Newest first: the order of the rollbacks is the reverse of the order the nodes were done.
    done_order = [n for a, n in fleet.effects if a == "apply" and n not in ("n4", "n8")]
    rollback_order = [n for a, n in fleet.effects if a == "rollback" and n not in ("n4", "n8")]
    assert rollback_order == list(reversed(done_order))


def test_gate_failure_after_the_soak_halts(tmp_path: Path) -> None:
    nodes = fleet_nodes(6)
    fleet = Fleet([n.name for n in nodes])
    fleet.nodes["n1"].unhealthy_on_target = True
    state = execute(start(tmp_path, nodes, canary=["n1"], soak_s=300), fleet)
    assert state.phase == Phase.HALTED
    assert state.reason == "gate after canary: n1 not healthy after 120 s"
    assert state.waves[0].gate.startswith("failed")
    assert fleet.nodes["n1"].version == OLD and state.nodes["n1"].step == NodeStep.ROLLED_BACK


def test_a_failed_rollback_leaves_the_node_out_for_a_person(tmp_path: Path) -> None:
    nodes = fleet_nodes(4)
    fleet = Fleet([n.name for n in nodes])
    fleet.nodes["n1"].fails_validation = True
    fleet.nodes["n1"].rollback_breaks = True
    lines: list[str] = []
    state = execute(start(tmp_path, nodes, canary=["n1"]), fleet, lines)
    assert state.phase == Phase.HALTED
    assert state.nodes["n1"].step == NodeStep.FAILED
    assert "rollback failed" in state.nodes["n1"].failure
    assert fleet.nodes["n1"].drained  # never returned to service on a driver that failed
    assert any("need a person: n1" in line for line in lines)


# --- capacity ---------------------------------------------------------------------------------------------------
def test_max_unavailable_counts_nodes_already_down(tmp_path: Path) -> None:
    nodes = fleet_nodes(12, down=("n5", "n9"))
    fleet = Fleet([n.name for n in nodes])
    for name in ("n5", "n9"):
        fleet.nodes[name].down = True
    state = execute(start(tmp_path, nodes, max_unavailable="3", waves=["25%", "rest"]), fleet)
    assert state.phase == Phase.COMPLETED
    assert fleet.max_out == 3  # 2 down + 1 of ours, never more
    assert all(len(b) == 1 for w in state.waves for b in w.batches)
    assert "n5" in state.skipped and fleet.effects_of("n5") == []


def test_a_node_lost_during_the_rollout_shrinks_the_room(tmp_path: Path) -> None:
    nodes = fleet_nodes(8)
    fleet = Fleet([n.name for n in nodes])
    store = start(tmp_path, nodes, max_unavailable="2", canary="1", waves=["rest"])

    def lose_two(action: str, node: str) -> None:
        if (action, node) == ("resume", "n1"):  # the canary is back: two other nodes go down
            fleet.nodes["n7"].down = fleet.nodes["n8"].down = True

    fleet.on_effect = lose_two
    state = execute(store, fleet)
    assert state.phase == Phase.PAUSED
    assert "max_unavailable 2 reached" in state.reason
    assert fleet.max_out == 2
    fleet.nodes["n8"].down = False  # repaired: one slot free again
    fleet.nodes["n7"].down = False
    state = execute(RolloutStore(tmp_path), fleet)
    assert state.phase == Phase.COMPLETED
    assert fleet.max_out == 2


# --- operator requests ------------------------------------------------------------------------------------------
def test_pause_then_resume(tmp_path: Path) -> None:
    nodes = fleet_nodes(9)
    fleet = Fleet([n.name for n in nodes])
    store = start(tmp_path, nodes, canary="1", waves=["rest"], max_unavailable="3")

    def pause_on_the_fifth_apply(action: str, node: str) -> None:
        if action == "apply" and sum(1 for a, _ in fleet.effects if a == "apply") == 5:
            RolloutStore(tmp_path).request(pause=True, note="change freeze")

    fleet.on_effect = pause_on_the_fifth_apply
    state = execute(store, fleet)
    assert state.phase == Phase.PAUSED and state.reason == "paused on request (change freeze)"
    assert fleet.out() == set()  # nothing left out of service while paused
    assert sum(1 for s in state.nodes.values() if s.step == NodeStep.DONE) == 5  # the node being changed finished
    assert all(n.step in (NodeStep.DONE, NodeStep.PENDING) for n in state.nodes.values())
    fleet.on_effect = None
    store.request(pause=False)
    state = execute(RolloutStore(tmp_path), fleet)
    assert state.phase == Phase.COMPLETED
    assert all(node.version == TARGET for node in fleet.nodes.values())
    assert all(Counter(fleet.effects_of(n))["apply"] == 1 for n in fleet.nodes)


@pytest.mark.parametrize("rollback", [False, True])
def test_abort(tmp_path: Path, rollback: bool) -> None:
    nodes = fleet_nodes(9)
    fleet = Fleet([n.name for n in nodes])
    store = start(tmp_path, nodes, canary="1", waves=["rest"], max_unavailable="2")

    def abort_after_three(action: str, node: str) -> None:
        if action == "resume" and sum(1 for a, _ in fleet.effects if a == "resume") == 3:
            RolloutStore(tmp_path).request(abort=True, abort_rollback=rollback)

    fleet.on_effect = abort_after_three
    state = execute(store, fleet)
    assert state.phase == Phase.ABORTED and state.reason == "aborted on request"
    assert fleet.out() == set()
    done = {n for n, s in state.nodes.items() if s.step == NodeStep.DONE}
    rolled = {n for n, s in state.nodes.items() if s.step == NodeStep.ROLLED_BACK}
    if rollback:
        assert not done and len(rolled) == 3
        assert all(node.version == OLD for node in fleet.nodes.values())
    else:
        assert len(done) == 3 and not rolled
        assert {n for n, node in fleet.nodes.items() if node.version == TARGET} == done


def test_abort_of_a_paused_rollout(tmp_path: Path) -> None:
    nodes = fleet_nodes(4)
    fleet = Fleet([n.name for n in nodes])
    store = start(tmp_path, nodes)
    store.request(pause=True)
    assert execute(store, fleet).phase == Phase.PAUSED
    assert fleet.effects == []
    store.request(abort=True)
    assert execute(RolloutStore(tmp_path), fleet).phase == Phase.ABORTED
    assert fleet.effects == []


def test_a_second_executor_is_refused_while_one_runs(tmp_path: Path) -> None:
    nodes = fleet_nodes(3)
    start(tmp_path, nodes)
    other = RolloutStore(tmp_path)
    with other.lock(), pytest.raises(RolloutError, match="a rollout is running"):
        execute(RolloutStore(tmp_path), Fleet([n.name for n in nodes]))


def test_a_finished_rollout_is_left_alone(tmp_path: Path) -> None:
    nodes = fleet_nodes(3)
    fleet = Fleet([n.name for n in nodes])
    store = start(tmp_path, nodes)
    execute(store, fleet)
    effects = list(fleet.effects)
    assert execute(RolloutStore(tmp_path), fleet).phase == Phase.COMPLETED
    assert fleet.effects == effects


# --- kill -9 at every step --------------------------------------------------------------------------------------
Scenario = Callable[[Fleet], None]


def _healthy(fleet: Fleet) -> None:
    return None


def _canary_fails_validation(fleet: Fleet) -> None:
    fleet.nodes["n2"].fails_validation = True


def _canary_rolled_back_by_the_role(fleet: Fleet) -> None:
    fleet.nodes["n2"].broken_with_target = True


SCENARIOS: dict[str, tuple[Scenario, Phase, dict[str, list[str]]]] = {
    "healthy": (_healthy, Phase.COMPLETED, {f"n{i}": ["drain", "apply", "resume"] for i in range(1, 6)}),
    "canary fails validation": (
        _canary_fails_validation,
        Phase.HALTED,
        {
            "n1": ["drain", "apply", "resume", "drain", "rollback", "resume"],
            "n2": ["drain", "apply", "rollback", "resume"],
            **{f"n{i}": [] for i in range(3, 6)},
        },
    ),
    "canary rolled back by the role": (
        _canary_rolled_back_by_the_role,
        Phase.HALTED,
        {
            "n1": ["drain", "apply", "resume", "drain", "rollback", "resume"],
            "n2": ["drain", "apply", "resume"],
            **{f"n{i}": [] for i in range(3, 6)},
        },
    ),
}
POLICY = {"canary": ["n1", "n2"], "waves": ["1", "rest"], "max_unavailable": "2", "soak_s": 30}


def _run_killed_at(directory: Path, scenario: Scenario, kill_at: int | None) -> tuple[Fleet, RolloutState, bool]:
    nodes = fleet_nodes(5)
    fleet = Fleet([n.name for n in nodes], Killer(kill_at))
    scenario(fleet)
    start(directory, nodes, **POLICY)
    killed = False
    try:
        execute(KillingStore(directory, fleet.killer), fleet)
    except KillSignal:
        killed = True
    fleet.killer.at = None
    state = execute(RolloutStore(directory), fleet)  # a fresh CLI: `ha-ops rollout resume`
    return fleet, state, killed


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_kill_at_every_step_then_resume_touches_no_node_twice(
    tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Hundreds of runs: skip the disk flushes (write_atomic still writes a temp file and renames it).
    monkeypatch.setattr("ha_ops.util.atomic.os.fsync", lambda fd: None)
    scenario, phase, effects = SCENARIOS[name]
    baseline, state, killed = _run_killed_at(tmp_path / "baseline", scenario, None)
    assert not killed and state.phase == phase
    assert {n: baseline.effects_of(n) for n in baseline.nodes} == effects
    events = baseline.killer.events
    assert events > 50  # every call's entry and exit, and every state write
    for k in range(1, events + 1):
        fleet, state, killed = _run_killed_at(tmp_path / f"k{k}", scenario, k)
        assert killed, k
        assert state.phase == phase, (k, state.reason)
        assert {n: fleet.effects_of(n) for n in fleet.nodes} == effects, k
        expected_version = TARGET if phase == Phase.COMPLETED else OLD
        assert all(n.version == expected_version and not n.drained for n in fleet.nodes.values()), k
        assert fleet.max_out <= 2, k


# --- the real adapters, without running Ansible or Slurm --------------------------------------------------------
@dataclass
class FakeRun:
    """What ansible_runner.run() returns, as far as the adapters look."""

    status: str = "successful"
    rc: int = 0
    events: list[dict[str, object]] | None = None


def _event(kind: str, host: str, **res: object) -> dict[str, object]:
    return {"event": kind, "event_data": {"host": host, "res": res}}


def _fact(**fields: object) -> str:
    return base64.b64encode(json.dumps({"managed_by": "ha-ops gpu_driver role", **fields}).encode()).decode()


class ScriptedRunner:
    def __init__(self, *results: FakeRun) -> None:
        self.results = list(results)
        self.calls: list[dict[str, object]] = []

    def __call__(self, **kwargs: object) -> FakeRun:
        self.calls.append(kwargs)
        return self.results.pop(0)


def _applier(tmp_path: Path, *results: FakeRun) -> tuple[AnsibleDriverApplier, ScriptedRunner]:
    run = ScriptedRunner(*results)
    runner = AnsibleRunner(tmp_path / "inventory.yml", tmp_path / "ansible", roles_path=Path("/repo/roles"), run=run)
    return AnsibleDriverApplier(runner, Path("/repo/playbooks/driver-rollout.yml"), timeout_s=900), run


def test_ansible_apply_runs_the_playbook_limited_to_the_node_then_reads_the_fact(tmp_path: Path) -> None:
    applier, run = _applier(
        tmp_path,
        FakeRun(events=[_event("runner_on_ok", "gpu3", changed=True)]),
        FakeRun(events=[_event("runner_on_ok", "gpu3", content=_fact(active_version=TARGET, previous_version=OLD))]),
    )
    result = applier.apply("gpu3", TARGET)
    assert result == ApplyResult(True, False, TARGET, f"active {TARGET}")
    play, slurp = run.calls
    assert play["playbook"] == "/repo/playbooks/driver-rollout.yml" and play["project_dir"] == "/repo/playbooks"
    assert play["limit"] == "gpu3"
    assert play["extravars"] == {"gpu_driver_action": "install", "gpu_driver_version": TARGET}
    assert play["inventory"] == str((tmp_path / "inventory.yml").resolve())
    assert play["private_data_dir"] == str((tmp_path / "ansible").resolve())
    path = play["envvars"].pop("PATH")
    assert path.split(os.pathsep)[0] == str(Path(sys.executable).parent)  # the ansible beside ha-ops comes first
    assert play["envvars"] == {"ANSIBLE_NOCOLOR": "1", "ANSIBLE_RETRY_FILES_ENABLED": "0",
                               "ANSIBLE_ROLES_PATH": "/repo/roles", "ANSIBLE_PIPELINING": "True"}  # fmt: skip
    assert play["timeout"] == 900 and play["quiet"] is True and play["suppress_env_files"] is True
    assert str(play["ident"]).startswith("gpu3-install-")
    assert slurp["host_pattern"] == "gpu3" and slurp["module"] == "ansible.builtin.slurp"
    assert slurp["module_args"] == "src={{ gpu_driver_fact_file | default('/etc/ansible/facts.d/gpu_driver.fact') }}"
    assert "playbook" not in slurp and "limit" not in slurp


def test_ansible_runs_are_pipelined_unless_the_operator_turned_it_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANSIBLE_PIPELINING", "False")  # sudo with requiretty on the nodes
    runner = AnsibleRunner(tmp_path / "inventory.yml", tmp_path / "ansible", run=ScriptedRunner())
    assert runner.module_kwargs("gpu3", "ansible.builtin.ping", "", 30)["envvars"]["ANSIBLE_PIPELINING"] == "False"
    monkeypatch.delenv("ANSIBLE_PIPELINING")
    assert runner.module_kwargs("gpu3", "ansible.builtin.ping", "", 30)["envvars"]["ANSIBLE_PIPELINING"] == "True"


def test_ansible_apply_the_role_rolled_back(tmp_path: Path) -> None:
    failed = _event("runner_on_failed", "gpu3", msg=f"gpu_driver: {TARGET} failed validation; rolled back to {OLD}")
    applier, _ = _applier(
        tmp_path,
        FakeRun("failed", 2, [_event("runner_on_ok", "gpu3"), failed]),
        FakeRun(events=[_event("runner_on_ok", "gpu3", content=_fact(
            active_version=OLD, previous_version=None,
            last_failure={"version": TARGET, "reason": "validation failed (exit 9)"}))]),
    )  # fmt: skip
    result = applier.apply("gpu3", TARGET)
    assert (result.ok, result.rolled_back, result.active_version) == (False, True, OLD)
    assert "failed validation; rolled back" in result.message


def test_ansible_rollback_and_facts(tmp_path: Path) -> None:
    applier, run = _applier(
        tmp_path,
        FakeRun(events=[_event("runner_on_ok", "gpu1")]),
        FakeRun(events=[_event("runner_on_ok", "gpu1", content=_fact(active_version=OLD, previous_version=TARGET))]),
        FakeRun("failed", 2, [_event("runner_on_failed", "gpu1", msg="file not found: /etc/ansible/facts.d/x")]),
        FakeRun("failed", 4, [_event("runner_on_unreachable", "gpu1", msg="ssh: connect timed out")]),
    )
    assert applier.rollback("gpu1") == ApplyResult(True, False, OLD, f"back on {OLD}")
    assert run.calls[0]["extravars"] == {"gpu_driver_action": "rollback"}
    assert applier.facts("gpu1") == DriverFacts()  # the role never ran there
    with pytest.raises(TransportError, match="gpu1 unreachable through Ansible: ssh: connect timed out"):
        applier.facts("gpu1")


def test_ansible_validator(tmp_path: Path) -> None:
    def command(host: str, rc: int = 0, stdout: str = "", stderr: str = "") -> FakeRun:
        kind = "runner_on_ok" if rc == 0 else "runner_on_failed"
        return FakeRun("successful" if rc == 0 else "failed", rc and 2, [_event(kind, host, rc=rc, stdout=stdout,
                                                                                stderr=stderr)])  # fmt: skip

    run = ScriptedRunner(
        command("gpu2"), command("gpu2", stdout=f"{TARGET}\n{TARGET}\n"), command("gpu2"),  # pass, with burn-in
        command("gpu2"), command("gpu2", stdout=f"{TARGET}\n{OLD}\n"),  # one GPU on the old driver
        command("gpu2", rc=1, stdout='{"state": "unhealthy"}', stderr="GPU5 XID 79"),  # unhealthy
        command("gpu2"), command("gpu2", stdout=TARGET), command("gpu2", rc=3, stderr="dgemm: 12% below"),
    )  # fmt: skip
    validator = AnsibleValidator(
        AnsibleRunner(tmp_path / "inv", tmp_path / "a", run=run), burn_in_command="/opt/burn --minutes 5"
    )
    assert validator.validate("gpu2", TARGET, burn_in=True) == Validation(True, f"healthy, GPUs on {TARGET}", TARGET)
    assert [c["module_args"] for c in run.calls] == [
        "ha-ops health check --json",
        "nvidia-smi --query-gpu=driver_version --format=csv,noheader",
        "/opt/burn --minutes 5",
    ]
    assert (
        validator.validate("gpu2", TARGET, burn_in=False).message == f"GPUs report {OLD}, {TARGET}, expected {TARGET}"
    )
    assert validator.validate("gpu2", TARGET, burn_in=False).message == "health check: exit 1: GPU5 XID 79"
    assert validator.validate("gpu2", TARGET, burn_in=True).message == "burn-in: exit 3: dgemm: 12% below"


class FakeSlurm:
    def __init__(self) -> None:
        self.nodes = {
            "gpu1": SlurmNode("gpu1", "IDLE", ""),
            "gpu2": SlurmNode("gpu2", "IDLE+DRAIN", "ha-ops: GPU5 xid"),
        }
        self.jobs = [SlurmJob("11", "RUNNING", ("gpu1",)), SlurmJob("12", "RUNNING", ("gpu1",))]
        self.requeueable = {"11"}
        self.log: list[str] = []

    def node(self, name: str) -> SlurmNode:
        return self.nodes[name]

    def drain(self, name: str, reason: str) -> None:
        self.log.append(f"drain {name}")
        self.nodes[name] = SlurmNode(name, "MIXED+DRAIN", reason)

    def resume(self, name: str) -> None:
        self.log.append(f"resume {name}")
        self.nodes[name] = SlurmNode(name, "IDLE", "")

    def jobs_on(self, node: str) -> list[SlurmJob]:
        return [j for j in self.jobs if node in j.nodes]

    def job_requeueable(self, job_id: str) -> bool:
        return job_id in self.requeueable

    def requeue(self, job_id: str) -> None:
        self.log.append(f"requeue {job_id}")
        self.jobs = [j for j in self.jobs if j.id != job_id]

    def node_states_and_reasons(self) -> dict[str, tuple[str, str]]:
        states = {"gpu1": "idle", "gpu2": "drained", "gpu3": "down*", "gpu4": "mixed", "gpu5": "idle*"}
        return {name: (state, "") for name, state in states.items()}


def test_the_rollout_scheduler_drains_and_resumes_only_its_own() -> None:
    slurm = FakeSlurm()
    clock = Clock()
    scheduler = RolloutScheduler(slurm, poll_s=1, clock=clock, sleep=clock.sleep)  # type: ignore[arg-type]
    reason = f"{DRAIN_REASON_PREFIX} driver {TARGET} (r1)"
    scheduler.drain("gpu2", reason)  # drained by the agent: left alone
    scheduler.resume("gpu2")  # ... and never resumed by the rollout
    assert slurm.log == [] and slurm.nodes["gpu2"].reason == "ha-ops: GPU5 xid"
    scheduler.drain("gpu1", reason)
    scheduler.drain("gpu1", reason)  # repeated: nothing more
    assert slurm.log == ["drain gpu1"]
    assert scheduler.requeue_jobs("gpu1") == ["11"]  # 12 does not allow a requeue: left to finish
    with pytest.raises(WaitTimeout, match="the jobs on gpu1 to end"):
        scheduler.wait_idle("gpu1", 10)
    slurm.jobs = []
    scheduler.wait_idle("gpu1", 10)
    assert not scheduler.node_healthy("gpu1")
    scheduler.resume("gpu1")
    assert slurm.log[-1] == "resume gpu1" and scheduler.node_healthy("gpu1")
    assert scheduler.unavailable() == {"gpu2", "gpu3", "gpu5"}


def test_the_gate_waits_for_a_returned_node_to_answer_again(tmp_path: Path) -> None:
    """Slurm shows a just-resumed node as not responding (idle*) until it has pinged it: the gate waits for it."""
    nodes = fleet_nodes(4)
    fleet = Fleet([n.name for n in nodes])
    fleet.nodes["n1"].silent_after_resume = 3
    state = execute(start(tmp_path, nodes, canary=["n1"]), fleet)
    assert state.phase == Phase.COMPLETED, state.reason
    assert state.nodes["n1"].step == NodeStep.DONE and fleet.nodes["n1"].version == TARGET
    assert fleet.nodes["n1"].silent_checks == 0
