"""The fabric plan (ha_ops.iac.plans.fabric): sized from the hosts and the switch radix, every host dual-homed to
one redundant group of leaf switches of its layout leaf, every leaf switch on every spine, no single point of
failure; and the other placement plans (etcd, storage) spread over domains and zones."""

from __future__ import annotations

import math
from typing import Any

import pytest

from ha_ops.iac.plans.control_plane import plan_control_plane
from ha_ops.iac.plans.fabric import plan_fabric
from ha_ops.iac.plans.nodes import plan_pool, spread_domains
from ha_ops.iac.plans.storage import plan_storage
from ha_ops.spec import compute_layout
from tests.unit.iac_specs import changed, example


@pytest.mark.parametrize("name", ["lab.yaml", "production.yaml", "lab-storage.yaml"])
def test_every_host_is_dual_homed_within_its_layout_leaf_and_no_switch_is_a_single_point(name: str) -> None:
    spec = example(name)
    layout = compute_layout(spec)
    plan = plan_fabric(spec)
    assert plan.problems == ()
    assert set(plan.homing) == {n.name for n in layout.nodes}
    for node in layout.nodes:
        homes = plan.homing[node.name]
        assert len(homes) == 2, node.name
        leaves = {s.name: s for s in plan.leaves}
        assert {leaves[h].leaf for h in homes} == {node.leaf}
    spines = {s.name for s in plan.spines}
    assert all(ups == spines for ups in plan.uplinks.values())
    assert plan.single_points_of_failure() == {}
    # Two host links each, one uplink from every leaf switch to every spine: nothing else.
    assert len(plan.links) == 2 * len(layout.nodes) + len(plan.leaves) * len(plan.spines)


def test_the_lab_gets_a_pair_of_leaf_switches_per_layout_leaf() -> None:
    plan = plan_fabric(example("lab.yaml"))
    assert [s.name for s in plan.spines] == ["spine1", "spine2"]
    assert [(s.name, s.leaf, s.asn) for s in plan.leaves] == [
        ("leaf1a", 1, 65101), ("leaf1b", 1, 65101), ("leaf2a", 2, 65102), ("leaf2b", 2, 65102),
    ]  # fmt: skip
    assert plan.homing["gpu1"] == {"leaf1a", "leaf1b"} and plan.homing["gpu2"] == {"leaf2a", "leaf2b"}


def test_losing_both_switches_of_a_pair_cuts_off_its_domain_and_losing_every_spine_cuts_off_all() -> None:
    plan = plan_fabric(example("lab.yaml"))
    assert plan.domains_cut_off(["leaf1a"]) == []
    assert plan.domains_cut_off(["leaf1a", "leaf1b"]) == ["rack1"]
    assert plan.domains_cut_off(["spine1"]) == []
    assert plan.domains_cut_off(["spine1", "spine2"]) == ["rack1", "rack2"]


@pytest.mark.parametrize(("radix", "spines"), [(5, 2), (6, 2), (8, 4), (64, 4)])
def test_leaf_groups_grow_with_the_hosts_a_switch_cannot_hold(radix: int, spines: int) -> None:
    def change(data: dict[str, Any]) -> None:
        data["fabric"] |= {"switch_radix": radix, "spines": spines, "uplinks_per_leaf": spines}

    spec = changed("lab.yaml", change)
    layout = compute_layout(spec)
    plan = plan_fabric(spec)
    host_ports = radix - spines
    for logical in layout.leaves:
        hosts = [n for n in layout.nodes if n.leaf == logical.index]
        switches = [s for s in plan.leaves if s.leaf == logical.index]
        assert len(switches) == 2 * math.ceil(len(hosts) / host_ports)
        assert all(0 < s.host_ports <= host_ports for s in switches)
        assert sum(s.host_ports for s in switches) == 2 * len(hosts)
    assert plan.single_points_of_failure() == {}
    assert all(len(homes) == 2 for homes in plan.homing.values())
    assert plan.oversubscription() == max(s.host_ports for s in plan.leaves) / spines


def test_a_fabric_beyond_two_tiers_is_a_problem_of_the_plan() -> None:
    spec = changed("production.yaml", lambda d: d["fabric"].update(switch_radix=8))
    plan = plan_fabric(spec)
    # 19 hosts per layout leaf, 4 host ports per switch: 5 pairs per leaf, 40 switches for 8-port spines.
    assert len(plan.leaves) == 40
    assert plan.problems and "switch_radix 8" in plan.problems[0]
    assert plan.leaves[-1].name == "leaf4j"


def test_etcd_members_cover_every_zone_before_sharing_a_domain() -> None:
    prod = example("production.yaml")
    assert [d.name for d in spread_domains(prod)] == ["rack1", "rack3", "rack2", "rack4"]
    etcd = plan_control_plane(prod).etcd
    assert [(m.name, m.domain, m.zone) for m in etcd] == [
        ("etcd1", "rack1", "zone-a"), ("etcd2", "rack3", "zone-b"), ("etcd3", "rack2", "zone-a"),
    ]  # fmt: skip
    assert [m.leaf for m in etcd] == [1, 3, 2]
    assert [m.domain for m in plan_control_plane(example("lab.yaml")).etcd] == ["rack1", "rack2", "rack1"]


def test_etcd_names_step_aside_for_a_pool_named_etcd() -> None:
    spec = changed("lab.yaml", lambda d: d["pools"][0].update(name="etcd"))
    assert [m.name for m in plan_control_plane(spec).etcd] == ["lab-etcd1", "lab-etcd2", "lab-etcd3"]


def test_storage_replicas_go_to_different_zones_and_every_domain_mounts_one() -> None:
    plan = plan_storage(example("production.yaml"), 2)
    assert [(r.name, r.domain, r.zone) for r in plan.replicas] == [
        ("replica1", "rack1", "zone-a"), ("replica2", "rack3", "zone-b"),
    ]  # fmt: skip
    assert {d: plan.replica_for(d).name for d in ["rack1", "rack2", "rack3", "rack4"]} == {
        "rack1": "replica1", "rack2": "replica1", "rack3": "replica2", "rack4": "replica2",
    }  # fmt: skip


def test_pool_plan_follows_the_layout_with_spares_last() -> None:
    plan = plan_pool(example("production.yaml"), "gpu")
    assert len(plan.nodes) == 64
    assert plan.spares == [f"gpu{i}" for i in range(56, 65)]
    assert {d: len(n) for d, n in plan.by_domain().items()} == {"rack1": 16, "rack2": 16, "rack3": 16, "rack4": 16}
    assert plan.by_zone() == {"zone-a": 32, "zone-b": 32}
    with pytest.raises(KeyError, match="pool 'cpu' is not in the spec"):
        plan_pool(example("production.yaml"), "cpu")
