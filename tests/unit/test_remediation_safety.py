"""The safety gate in front of every cordon (ha_ops.remediation.safety), alone and through the policy: opt-out,
the circuit breaker (count, fraction, window, flaps), the minimum healthy share and the rate limit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ha_ops.health.report import AgentReport
from ha_ops.remediation import policy, safety
from ha_ops.remediation.config import ControllerConfig, Ladder, PoolConfig, Safety
from ha_ops.remediation.model import ControllerState, NodePhase, NodeRecord
from ha_ops.remediation.safety import gate_cordon

NOW = 10_000.0
NODES = [f"n{i}" for i in range(1, 7)]


def make_config(spares: tuple[str, ...] = (), **limits: Any) -> ControllerConfig:
    values: dict[str, Any] = {"breaker_max_nodes": 10, "breaker_max_fraction": 1.0, "min_healthy_fraction": 0.0}
    values.update(limits)
    return ControllerConfig(
        id="c1",
        state_dir=Path("unused"),
        pools={"p": PoolConfig(nodes=NODES, spares=list(spares))},
        safety=Safety(**values),
        ladder=Ladder(validate_timeout_s=5, probation_s=1, max_flaps=5, flap_window_s=100, drain_timeout_s=1),
    )


def fresh(config: ControllerConfig) -> ControllerState:
    state = ControllerState()
    policy.init_state(state, config, NOW)
    return state


def no_spares() -> int:
    return 0


def report(node: str, seq: int = 1, state: str = "unhealthy") -> AgentReport:
    return AgentReport(
        node=node,
        seq=seq,
        agent_id="a",
        sent_at=0,
        state=state,
        action="reset_gpu" if state == "unhealthy" else "none",
        reason="bad",
    )


def cordon(state: ControllerState, config: ControllerConfig, node: str, now: float = NOW, seq: int = 1) -> Any:
    return policy.on_report(state, report(node, seq), config, now, 1)


# --- opt-out ----------------------------------------------------------------------------------------------------
def test_opt_out_flag_on_the_record_refuses() -> None:
    config = make_config()
    state = fresh(config)
    state.nodes["n1"].opt_out = True
    result = gate_cordon(state, state.nodes["n1"], config.safety, NOW, no_spares)
    assert result.outcome == "refuse" and "opted out" in result.why and not result.trips_breaker


def test_opt_out_list_in_the_config_refuses_through_the_policy() -> None:
    config = make_config(opt_out=["n2"])
    state = fresh(config)
    out = cordon(state, config, "n2")
    assert "opted out" in out.ignored and out.intents == []
    assert state.nodes["n2"].phase == NodePhase.HEALTHY and state.breaker.cordons == []


# --- the circuit breaker ----------------------------------------------------------------------------------------
def test_third_distinct_node_trips_the_breaker() -> None:
    config = make_config(breaker_max_nodes=2, breaker_max_fraction=0.5)  # 0.5 x 6 = 3: the count (2) binds
    state = fresh(config)
    assert cordon(state, config, "n1").intents
    assert cordon(state, config, "n2", NOW + 1).intents
    out = cordon(state, config, "n3", NOW + 2)
    assert out.intents == [] and state.nodes["n3"].phase == NodePhase.HEALTHY
    assert state.breaker.open and state.breaker.opened_at == NOW + 2
    assert "limit of 2" in state.breaker.reason and "breaker_max_nodes 2" in state.breaker.reason
    assert "n3" in out.ignored and "limit of 2" in out.ignored
    assert [n for _, n in state.breaker.cordons] == ["n1", "n2"]


def test_the_same_node_again_is_not_counted_twice() -> None:
    config = make_config(breaker_max_nodes=2, breaker_max_fraction=0.5)
    state = fresh(config)
    cordon(state, config, "n1")
    state.nodes["n1"].phase = NodePhase.RETURNED  # back in service, then fails again: a flap
    assert cordon(state, config, "n1", NOW + 1, seq=2).intents
    assert [n for _, n in state.breaker.cordons] == ["n1", "n1"]
    assert cordon(state, config, "n2", NOW + 2).intents  # the second distinct node
    assert not state.breaker.open
    state.nodes["n2"].phase = NodePhase.RETURNED
    assert cordon(state, config, "n2", NOW + 3, seq=2).intents  # at the limit, but n2 is not a new node
    assert not state.breaker.open
    assert not cordon(state, config, "n3", NOW + 4).intents
    assert state.breaker.open


def test_flap_at_the_limit_through_the_gate() -> None:
    config = make_config(breaker_max_nodes=2, breaker_max_fraction=0.5)
    state = fresh(config)
    state.breaker.cordons = [(NOW, "n1"), (NOW, "n2")]
    assert gate_cordon(state, state.nodes["n1"], config.safety, NOW, no_spares).outcome == "allow"
    third = gate_cordon(state, state.nodes["n3"], config.safety, NOW, no_spares)
    assert third.outcome == "refuse" and third.trips_breaker


@pytest.mark.parametrize(
    ("max_nodes", "fraction", "spares", "limit"),
    [(10, 0.34, (), 2), (10, 0.25, ("s1", "s2"), 1), (10, 0.1, (), 1), (2, 1.0, ("s1",), 2), (10, 0.5, (), 3)],
)
def test_breaker_limit_by_fraction_of_the_pool_without_spares(
    max_nodes: int, fraction: float, spares: tuple[str, ...], limit: int
) -> None:
    config = make_config(spares, breaker_max_nodes=max_nodes, breaker_max_fraction=fraction)
    state = fresh(config)
    assert safety.pool_size(state, "p") == 6
    assert safety.breaker_limit(state, "p", config.safety) == limit
    for i in range(limit):
        assert cordon(state, config, NODES[i], NOW + i).intents
    out = cordon(state, config, NODES[limit], NOW + limit)
    assert out.intents == [] and state.breaker.open and f"limit of {limit}" in out.ignored


def test_old_cordons_leave_the_window() -> None:
    config = make_config(breaker_max_nodes=2, breaker_max_fraction=1.0, breaker_window_s=100)
    state = fresh(config)
    cordon(state, config, "n1", NOW)
    cordon(state, config, "n2", NOW + 50)
    assert gate_cordon(state, state.nodes["n3"], config.safety, NOW + 99.9, no_spares).outcome == "refuse"
    assert cordon(state, config, "n3", NOW + 100).intents  # n1's cordon is 100 s old: out of the window
    assert not state.breaker.open
    assert [n for _, n in state.breaker.cordons] == ["n2", "n3"]


def test_open_breaker_refuses_every_cordon_until_closed() -> None:
    config = make_config(breaker_max_nodes=1, breaker_max_fraction=1.0, breaker_window_s=10)
    state = fresh(config)
    cordon(state, config, "n1")
    assert not cordon(state, config, "n2").intents
    assert state.breaker.open
    reason = state.breaker.reason
    for node, later in (("n3", 1), ("n4", 1000), ("n2", 5000)):
        out = cordon(state, config, node, NOW + later, seq=later)
        assert out.intents == [] and "circuit breaker open" in out.ignored
    assert state.breaker.reason == reason  # the first reason stays
    state.breaker.open, state.breaker.reason, state.breaker.cordons = False, "", []  # what a reset does
    assert cordon(state, config, "n5", NOW + 5001).intents


def test_free_spares_not_asked_when_the_breaker_refuses() -> None:
    config = make_config(("s1",), breaker_max_nodes=1)
    state = fresh(config)
    state.breaker.cordons = [(NOW, "n1")]
    calls: list[int] = []

    def spares() -> int:
        calls.append(1)
        return 1

    assert gate_cordon(state, state.nodes["n2"], config.safety, NOW, spares).outcome == "refuse"
    assert calls == []


# --- capacity ---------------------------------------------------------------------------------------------------
def test_min_healthy_fraction_refuses_a_cordon_that_leaves_too_few() -> None:
    config = make_config(min_healthy_fraction=0.5)  # at least 3 of 6 in service
    state = fresh(config)
    for node in ("n1", "n2", "n3"):
        assert cordon(state, config, node).intents
    out = cordon(state, config, "n4")
    assert out.intents == [] and not state.breaker.open
    assert "would leave 2 of 6" in out.ignored and "min_healthy_fraction 0.5 (3)" in out.ignored
    assert "n4" not in state.deferred  # refused, not deferred


def test_min_healthy_fraction_counts_a_free_spare() -> None:
    config = make_config(("s1",), min_healthy_fraction=0.5)
    state = fresh(config)
    for node in ("n1", "n2", "n3"):
        state.nodes[node].phase = NodePhase.AWAITING_REPAIR
    assert gate_cordon(state, state.nodes["n4"], config.safety, NOW, lambda: 1).outcome == "allow"
    assert gate_cordon(state, state.nodes["n4"], config.safety, NOW, lambda: 3).outcome == "allow"
    assert gate_cordon(state, state.nodes["n4"], config.safety, NOW, no_spares).outcome == "refuse"
    out = cordon(state, config, "n4")  # through the policy: s1 is free, and is brought in
    assert [(i.kind, i.node) for i in out.intents] == [("drain", "n4"), ("spare_in", "s1"), ("requeue_jobs", "n4")]
    state.nodes["s1"].phase = NodePhase.AWAITING_REPAIR  # stand-in broken: n4's slot is empty again
    state.nodes["s1"].in_main = False
    out = cordon(state, config, "n5")  # n5, n6 in service; no free spare
    assert out.intents == [] and "would leave 1 of 6" in out.ignored


def test_a_node_outside_the_main_partition_is_not_capacity() -> None:
    config = make_config(("s1",), min_healthy_fraction=1.0)
    state = fresh(config)
    result = gate_cordon(state, state.nodes["s1"], config.safety, NOW, no_spares)
    assert result.outcome == "allow"  # an idle spare can be taken out without touching capacity


# --- the rate limit ---------------------------------------------------------------------------------------------
def test_rate_limit_defers_and_the_policy_records_it() -> None:
    config = make_config(max_cordons_per_minute=2)
    state = fresh(config)
    cordon(state, config, "n1", NOW)
    cordon(state, config, "n2", NOW + 1)
    result = gate_cordon(state, state.nodes["n3"], config.safety, NOW + 2, no_spares)
    assert result.outcome == "defer" and "rate limit: 2 cordons" in result.why
    out = cordon(state, config, "n3", NOW + 2)
    assert out.intents == [] and "rate limit" in out.ignored
    assert "rate limit" in state.deferred["n3"]
    assert state.nodes["n3"].phase == NodePhase.HEALTHY
    assert not state.breaker.open


def test_a_deferred_cordon_is_tried_again_on_a_tick() -> None:
    config = make_config(max_cordons_per_minute=2)
    state = fresh(config)
    cordon(state, config, "n1", NOW)
    cordon(state, config, "n2", NOW + 1)
    cordon(state, config, "n3", NOW + 2)
    out = policy.on_tick(state, {}, config, NOW + 30, 1)
    assert not [i for i in out.intents if i.node == "n3"]
    assert "n3" in state.deferred and state.nodes["n3"].phase == NodePhase.HEALTHY  # held back within the minute
    assert not cordon(state, config, "n3", NOW + 55, seq=2).intents  # the agent's heartbeat: still too early
    out = policy.on_tick(state, {}, config, NOW + 60, 1)  # n1's cordon left the last minute; the report is fresh
    assert ("drain", "n3") in [(i.kind, i.node) for i in out.intents]
    assert state.nodes["n3"].phase == NodePhase.CORDONED
    assert state.deferred == {}


def test_a_deferred_cordon_is_not_retried_on_an_old_report() -> None:
    config = make_config(max_cordons_per_minute=1)  # report_fresh_s 30
    state = fresh(config)
    cordon(state, config, "n1", NOW)
    cordon(state, config, "n2", NOW + 1)
    assert "n2" in state.deferred
    assert policy.on_tick(state, {}, config, NOW + 61, 1).intents == []  # n2's report is 60 s old
    assert "n2" in state.deferred and state.nodes["n2"].phase == NodePhase.HEALTHY
    assert cordon(state, config, "n2", NOW + 62, seq=2).intents  # a new report acts
    assert state.deferred == {}


def test_a_later_report_retries_a_deferred_cordon() -> None:
    config = make_config(max_cordons_per_minute=1)
    state = fresh(config)
    cordon(state, config, "n1", NOW)
    cordon(state, config, "n2", NOW + 1)
    assert "n2" in state.deferred
    assert cordon(state, config, "n2", NOW + 61, seq=2).intents  # the agent's heartbeat
    assert state.deferred == {}


def test_a_deferred_node_that_recovers_is_no_longer_deferred() -> None:
    config = make_config(max_cordons_per_minute=1)
    state = fresh(config)
    cordon(state, config, "n1", NOW)
    cordon(state, config, "n2", NOW + 1)
    assert "n2" in state.deferred
    policy.on_report(state, report("n2", 2, state="healthy"), config, NOW + 2, 1)
    assert state.deferred == {}
    assert policy.on_tick(state, {}, config, NOW + 61, 1).intents == []  # nothing left to retry
    assert state.nodes["n2"].phase == NodePhase.HEALTHY


def test_prune_and_counts() -> None:
    config = make_config(("s1",), breaker_window_s=10)
    state = fresh(config)
    state.breaker.cordons = [(NOW - 11, "n1"), (NOW - 10, "n2"), (NOW - 9, "n3")]
    safety.prune(state, config.safety, NOW)
    assert state.breaker.cordons == [(NOW - 9, "n3")]
    state.nodes["n1"].phase = NodePhase.DRAINING
    state.nodes["s1"] = NodeRecord(name="s1", pool="p", spare=True, in_main=True)
    assert safety.in_service(state, "p") == 6  # n2..n6 and the spare in service
    assert safety.pool_size(state, "p") == 6
