"""The rollout plan (pure): canary, waves, batches, ordering, skips, and errors that name the field."""

from __future__ import annotations

from collections import Counter

import pytest

from ha_ops.errors import SpecError
from ha_ops.rollout.plan import FleetNode, Plan, plan_rollout, spread
from ha_ops.rollout.policy import Amount, build_policy, parse_amount

TARGET = "570.86.15"
OLD = "550.127.05"


def fleet(count: int, domains: int = 4, **overrides: dict[str, object]) -> list[FleetNode]:
    """n1..nN round-robin over rack1..rackD; `overrides` per node name."""
    out = []
    for i in range(1, count + 1):
        name = f"n{i}"
        fields: dict[str, object] = {"domain": f"rack{(i - 1) % domains + 1}", "driver_version": OLD}
        fields.update(overrides.get(name, {}))
        out.append(FleetNode(name, **fields))  # type: ignore[arg-type]
    return out


def plan(nodes: list[FleetNode], **policy: object) -> Plan:
    return plan_rollout(nodes, build_policy(dict(policy)), TARGET)


def problems(nodes: list[FleetNode], **policy: object) -> list[str]:
    with pytest.raises(SpecError) as info:
        plan(nodes, **policy)
    return info.value.problems


# --- amounts ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "amount"),
    [("3", Amount(count=3)), ("5%", Amount(percent=5.0)), ("12.5%", Amount(percent=12.5)), ("REST", Amount(rest=True))],
)
def test_amounts(text: str, amount: Amount) -> None:
    assert parse_amount(text, allow_rest=True) == amount


def test_a_percentage_rounds_up_to_at_least_one() -> None:
    assert Amount(percent=5).of(10) == 1
    assert Amount(percent=10).of(100) == 10
    assert Amount(percent=25).of(61) == 16


# --- shape --------------------------------------------------------------------------------------------------------
def test_default_policy_canary_then_growing_waves() -> None:
    result = plan(fleet(100))
    assert [(w.name, w.size, len(w.nodes)) for w in result.waves] == [
        ("canary", "1", 1),
        ("wave 1", "1", 1),
        ("wave 2", "5%", 5),
        ("wave 3", "25%", 25),
        ("wave 4", "rest", 68),
    ]
    assert result.planned == 100 and result.max_unavailable == 1 and result.batch_size == 1
    names = [n for w in result.waves for n in w.nodes]
    assert len(names) == len(set(names)) == 100  # every node exactly once


def test_waves_without_rest_repeat_the_last_size() -> None:
    result = plan(fleet(40), waves=["25%"], max_unavailable="5")
    assert [len(w.nodes) for w in result.waves] == [1, 10, 10, 10, 9]


def test_batches_never_exceed_max_unavailable_minus_nodes_down() -> None:
    nodes = fleet(50, n7={"down": True}, n8={"down": True})
    result = plan(nodes, max_unavailable="10%")  # 5 of 50
    assert result.max_unavailable == 5 and result.batch_size == 3
    assert all(len(b) <= 3 for w in result.waves for b in w.batches)
    assert result.down == ("n7", "n8")
    assert result.skipped == {
        "n7": "down (counts against max_unavailable)",
        "n8": "down (counts against max_unavailable)",
    }


def test_a_max_unavailable_percentage_rounds_down_but_is_at_least_one() -> None:
    assert plan(fleet(50), max_unavailable="1%").max_unavailable == 1
    assert plan(fleet(50), max_unavailable="9%").max_unavailable == 4


def test_canary_count_spreads_over_failure_domains() -> None:
    result = plan(fleet(40, domains=4), canary="4")
    canary = result.waves[0]
    domains = {n: f"rack{(int(n[1:]) - 1) % 4 + 1}" for n in canary.nodes}
    assert sorted(domains.values()) == ["rack1", "rack2", "rack3", "rack4"]


def test_canary_percentage() -> None:
    assert len(plan(fleet(200), canary="2%").waves[0].nodes) == 4


def test_named_canaries() -> None:
    result = plan(fleet(20), canary="n9,n3")
    assert set(result.waves[0].nodes) == {"n3", "n9"} and result.waves[0].size == "named"
    assert "n3" not in result.waves[1].nodes


def test_least_critical_first_spares_then_idle_then_fewer_jobs() -> None:
    nodes = fleet(
        8,
        domains=1,
        n1={"running_jobs": 5},
        n2={"running_jobs": 1},
        n3={"running_jobs": 0},
        n4={"running_jobs": 3, "spare": True},
        n5={"running_jobs": 2},
        n6={"running_jobs": 0, "criticality": 9},
        n7={"running_jobs": 4},
        n8={"running_jobs": 0},
    )
    result = plan(nodes, canary="1", waves=["rest"])
    order = [n for w in result.waves for n in w.nodes]
    assert order == ["n4", "n3", "n8", "n2", "n5", "n7", "n1", "n6"]


def test_waves_are_spread_over_domains_so_a_batch_never_empties_one_rack() -> None:
    result = plan(fleet(40, domains=4), canary="1", waves=["rest"], max_unavailable="4")
    for batch in result.waves[1].batches[:-1]:
        assert len({(int(n[1:]) - 1) % 4 for n in batch}) == 4


def test_skipped_nodes_with_reasons() -> None:
    nodes = fleet(10, n2={"driver_version": TARGET}, n5={"down": True})
    result = plan(nodes, skip=["n9"], max_unavailable="2")
    assert result.skipped == {
        "n2": f"already on {TARGET}",
        "n5": "down (counts against max_unavailable)",
        "n9": "in the skip list",
    }
    planned = {n for w in result.waves for n in w.nodes}
    assert planned.isdisjoint(result.skipped) and len(planned) == 7


def test_nothing_to_do() -> None:
    result = plan(fleet(3, n1={"driver_version": TARGET}, n2={"driver_version": TARGET}, n3={"driver_version": TARGET}))
    assert result.waves == () and result.planned == 0 and len(result.skipped) == 3


def test_plan_json() -> None:
    data = plan(fleet(6), canary="2", max_unavailable="2").to_json()
    assert data["target_version"] == TARGET and data["planned"] == 6 and data["fleet"] == 6
    assert data["waves"][0] == {
        "index": 0,
        "name": "canary",
        "size": "2",
        "nodes": data["waves"][0]["nodes"],
        "batches": [data["waves"][0]["nodes"]],
    }
    assert Counter(len(w["nodes"]) for w in data["waves"]).total() == len(data["waves"])


def test_spread_keeps_each_domains_order() -> None:
    nodes = [FleetNode(n, d) for n, d in [("a1", "a"), ("a2", "a"), ("b1", "b"), ("a3", "a"), ("c1", "c")]]
    assert [n.name for n in spread(nodes)] == ["a1", "b1", "c1", "a2", "a3"]


# --- errors name the field ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ({"max_unavailable": "0"}, "max_unavailable: '0' must be at least 1"),
        ({"max_unavailable": "0%"}, "max_unavailable: '0%': a percentage must be above 0% and at most 100%"),
        ({"max_unavailable": "many"}, "max_unavailable: 'many' is not a count (5) or a percentage (5%)"),
        ({"waves": ["1", "7x"]}, "waves[1]: '7x' is not a count (5), a percentage (5%) or 'rest'"),
        ({"waves": ["rest", "5%"]}, "waves: 'rest' must be the last wave; it is wave 1 of 2"),
        ({"waves": []}, "waves: List should have at least 1 item after validation, not 0"),
        ({"canary": "150%"}, "canary: '150%': a percentage must be above 0% and at most 100%"),
        ({"canary": "n1,n1"}, "canary: n1 named twice"),
        ({"drain": {"mode": "later"}}, "drain.mode: Input should be 'wait' or 'requeue'"),
        ({"wave_max_failure_fraction": 2}, "wave_max_failure_fraction: Input should be less than or equal to 1"),
        ({"soak_s": -1}, "soak_s: Input should be greater than or equal to 0"),
        ({"surge": 1}, "surge: unknown key"),
    ],
)
def test_bad_policy_names_the_field(policy: dict[str, object], expected: str) -> None:
    assert expected in problems(fleet(4), **policy)


def test_bad_inputs_against_the_fleet_name_the_field() -> None:
    nodes = fleet(6, n2={"down": True}, n3={"driver_version": TARGET})
    assert problems(nodes, canary="n99,n2,n3", skip=["zz"], max_unavailable="2") == [
        "skip: 'zz' is not a node of the cluster",
        "canary: 'n99' is not a node of the cluster",
        "canary: 'n2' is down",
        f"canary: 'n3' already runs {TARGET}; a canary must change",
    ]
    assert problems(fleet(3), canary="n1", skip=["n1"]) == ["canary: 'n1' is also in the skip list"]


def test_nodes_already_down_can_use_up_max_unavailable() -> None:
    nodes = fleet(10, n1={"down": True}, n2={"down": True})
    (problem,) = problems(nodes, max_unavailable="2")
    assert problem.startswith("max_unavailable: 2 node(s) are already down (n1, n2) and max_unavailable is 2")


def test_target_must_be_a_driver_version() -> None:
    with pytest.raises(SpecError) as info:
        plan_rollout(fleet(2), build_policy({}), "latest")
    assert info.value.problems == ["to: 'latest' is not a driver version (digits and dots, for example 570.86.15)"]


def test_duplicate_nodes() -> None:
    nodes = [FleetNode("n1", "a"), FleetNode("n1", "b")]
    assert problems(nodes) == ["nodes: 'n1' is listed twice"]


def test_ten_thousand_nodes_are_all_planned() -> None:
    # (how fast: tests/bench/rollout_plan.py prints it; a timed assertion here would fail on a busy machine)
    nodes = [
        FleetNode(f"gpu{i}", f"rack{i % 8}", spare=i % 20 == 0, running_jobs=i % 7, driver_version=OLD)
        for i in range(10_000)
    ]
    policy = build_policy({"canary": "8", "max_unavailable": "2%"})
    result = plan_rollout(nodes, policy, TARGET)
    assert result.planned == 10_000
