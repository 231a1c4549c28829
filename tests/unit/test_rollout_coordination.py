"""A rollout and the remediation controllers, coordinated (issue 22): windows opened before each drain and closed when
each node rests, no wave while the breaker is open or a pool is under its minimum, refusals that name why."""

from __future__ import annotations

from pathlib import Path

import pytest

from ha_ops.rollout.coordination import HELD_TTL_S, blocked_by
from ha_ops.rollout.executor import RolloutExecutor
from ha_ops.rollout.state import NodeStep, Phase, RolloutError, RolloutState, RolloutStore
from tests.unit.test_rollout_executor import Fleet, fleet_nodes, start


class FakeControllers:
    """Records the windows; `why` is what blocked() answers; `down` makes every call fail."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.why: str | None = None
        self.down = False
        self.open: set[str] = set()
        self.events: list[tuple[str, str]] = []
        self.ttls: dict[str, float] = {}  # each node's last window's length

    def blocked(self) -> str | None:
        if self.down:
            raise ConnectionError("connection refused")
        return self.why

    def begin(self, nodes: list[str], reason: str, ttl_s: float) -> None:
        if self.down:
            raise ConnectionError("connection refused")
        for n in nodes:
            # A window must be open before anything happens to the node.
            assert self.fleet.effects_of(n) in ([], ["drain", "apply", "resume"]) or n in self.open, n
            self.events.append(("begin", n))
            self.open.add(n)
            self.ttls[n] = ttl_s

    def end(self, nodes: list[str]) -> None:
        for n in nodes:
            self.events.append(("end", n))
            self.open.discard(n)


def run(store: RolloutStore, fleet: Fleet, controllers: FakeControllers) -> RolloutState:
    executor = RolloutExecutor(store, fleet, fleet, fleet, clock=fleet.clock, sleep=fleet.clock.sleep,
                               coordinator=controllers)  # fmt: skip
    return executor.run()


def test_each_changed_node_is_in_a_window_from_before_its_drain_until_it_rests(tmp_path: Path) -> None:
    nodes = fleet_nodes(6)
    fleet = Fleet([n.name for n in nodes])
    controllers = FakeControllers(fleet)
    state = run(start(tmp_path, nodes, max_unavailable="2"), fleet, controllers)
    assert state.phase == Phase.COMPLETED and not controllers.open
    firsts = [n for kind, n in controllers.events if kind == "begin"]
    assert sorted(set(firsts)) == [n.name for n in nodes]
    for n in nodes:  # opened (and renewed) first, ended last
        mine = [kind for kind, name in controllers.events if name == n.name]
        assert mine[0] == "begin" and mine[-1] == "end" and mine.count("end") == 1


def test_a_canary_failing_validation_is_rolled_back_inside_its_window(tmp_path: Path) -> None:
    nodes = fleet_nodes(6)
    fleet = Fleet([n.name for n in nodes])
    fleet.nodes["n1"].fails_validation = True
    controllers = FakeControllers(fleet)
    state = run(start(tmp_path, nodes, canary=["n1"], max_unavailable="1"), fleet, controllers)
    assert state.phase == Phase.HALTED and state.nodes["n1"].step == NodeStep.FAILED_ROLLED_BACK
    assert fleet.effects_of("n1") == ["drain", "apply", "rollback", "resume"]
    assert [k for k, n in controllers.events if n == "n1"][-1] == "end" and not controllers.open
    assert not [n for _, n in controllers.events if n != "n1"]  # no other node was announced


def test_a_node_left_for_a_person_keeps_its_window_so_the_controllers_do_not_repair_it(tmp_path: Path) -> None:
    # Out of its window the controller would take the node's reports as a fault to repair, and could return a node
    # whose driver is broken to service; the window stays (a week) until the person ends it.
    nodes = fleet_nodes(4)
    fleet = Fleet([n.name for n in nodes])
    fleet.nodes["n1"].fails_validation = True
    fleet.nodes["n1"].rollback_breaks = True
    controllers = FakeControllers(fleet)
    state = run(start(tmp_path, nodes, canary=["n1"]), fleet, controllers)
    assert state.phase == Phase.HALTED and state.nodes["n1"].step == NodeStep.FAILED
    assert controllers.open == {"n1"} and ("end", "n1") not in controllers.events
    assert controllers.ttls["n1"] == HELD_TTL_S == 7 * 86400  # the longest window a controller grants


def test_an_open_breaker_refuses_the_start_naming_why_and_resume_goes_on_once_closed(tmp_path: Path) -> None:
    nodes = fleet_nodes(3)
    fleet = Fleet([n.name for n in nodes])
    controllers = FakeControllers(fleet)
    controllers.why = "the remediation controller's circuit breaker is open (2 node(s) cordoned ...)"
    store = start(tmp_path, nodes, max_unavailable="1")
    with pytest.raises(RolloutError, match="refused to start: the remediation controller's circuit breaker is open"):
        run(store, fleet, controllers)
    assert store.load().phase == Phase.PAUSED and fleet.effects == [] and controllers.events == []
    controllers.why = None
    assert run(store, fleet, controllers).phase == Phase.COMPLETED


def test_a_wave_does_not_go_on_while_blocked_or_while_the_controllers_cannot_be_asked(tmp_path: Path) -> None:
    nodes = fleet_nodes(6)
    fleet = Fleet([n.name for n in nodes])
    controllers = FakeControllers(fleet)

    def block_after_the_canary(action: str, node: str) -> None:
        if action == "resume" and node == "n1":
            controllers.why = "pool gpu has 3 of 6 nodes in service, under its minimum healthy share (4)"

    fleet.on_effect = block_after_the_canary
    store = start(tmp_path, nodes, canary=["n1"], max_unavailable="2")
    state = run(store, fleet, controllers)
    assert state.phase == Phase.PAUSED and state.reason.startswith("pool gpu has 3 of 6 nodes in service")
    assert state.nodes["n1"].step == NodeStep.DONE and state.nodes["n2"].step == NodeStep.PENDING
    controllers.why, controllers.down = None, True
    with pytest.raises(RolloutError, match=r"refused to resume: cannot ask the remediation controllers \(conn"):
        run(store, fleet, controllers)
    controllers.down = False
    assert run(store, fleet, controllers).phase == Phase.COMPLETED


def test_blocked_by_reads_the_leaders_safety_summary() -> None:
    ok = {"breaker_open": False, "breaker_reason": "", "pools": {"gpu": {"size": 4, "in_service": 3, "minimum": 3}}}
    assert blocked_by(ok) is None
    assert blocked_by({**ok, "breaker_open": True, "breaker_reason": "limit of 1"}) == (
        "the remediation controller's circuit breaker is open (limit of 1)"
    )
    under = {**ok, "pools": {"gpu": {"size": 4, "in_service": 2, "minimum": 3}}}
    assert blocked_by(under) == "pool gpu has 2 of 4 nodes in service, under its minimum healthy share (3)"


def test_an_abort_goes_through_even_when_the_controllers_cannot_be_asked(tmp_path: Path) -> None:
    nodes = fleet_nodes(3)
    fleet = Fleet([n.name for n in nodes])
    controllers = FakeControllers(fleet)
    controllers.down = True
    store = start(tmp_path, nodes, max_unavailable="1")
    with pytest.raises(RolloutError, match="refused to start"):
        run(store, fleet, controllers)
    store.request(abort=True, abort_rollback=True)
    assert run(store, fleet, controllers).phase == Phase.ABORTED
