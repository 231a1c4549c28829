"""The provider-agnostic components under Pulumi mocks: what each creates, where, under which parent, the outputs it
registers, and that a component whose rules are broken registers nothing at all, not even itself."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from ha_ops.errors import SpecError
from ha_ops.iac.components import (
    ControlPlane,
    ControlPlaneArgs,
    Fabric,
    FabricArgs,
    GpuNodePool,
    GpuNodePoolArgs,
    ReplicatedStorage,
    ReplicatedStorageArgs,
)
from ha_ops.iac.plans.fabric import plan_fabric
from ha_ops.iac.violations import PolicyViolationError
from ha_ops.spec import compute_layout
from tests.unit.iac_harness import Harness, link_factory, node_factory, replica_factory, switch_factory
from tests.unit.iac_specs import changed, example


@pytest.fixture
def mocks() -> Harness:
    return Harness.install()


# --- GpuNodePool ------------------------------------------------------------------------------------------------------
def test_gpu_node_pool_builds_every_node_of_the_pool_under_itself(mocks: Harness) -> None:
    spec = example("production.yaml")
    pool = mocks.run(lambda: GpuNodePool("prod-gpu", GpuNodePoolArgs(spec, "gpu", node_factory)))
    assert isinstance(pool, GpuNodePool)

    component = mocks.one("haops:compute:GpuNodePool", "prod-gpu")
    nodes = mocks.of_type("test:index:Node")
    assert len(nodes) == 64
    assert all(mocks.parent(n) == component for n in nodes)
    assert mocks.children(component) == nodes
    assert sorted(n.name for n in nodes) == sorted(f"prod-gpu-gpu{i}" for i in range(1, 65))
    layout = compute_layout(spec)
    for node in nodes:
        placed = layout.node(node.inputs["host"])
        assert (node.inputs["domain"], node.inputs["leaf"], node.inputs["spare"]) == (
            placed.domain,
            placed.leaf,
            placed.spare,
        )
        assert node.inputs["gpus"] == 8
    assert Counter(n.inputs["domain"] for n in nodes) == {"rack1": 16, "rack2": 16, "rack3": 16, "rack4": 16}
    assert Counter(n.inputs["zone"] for n in nodes) == {"zone-a": 32, "zone-b": 32}
    assert sorted(n.inputs["host"] for n in nodes if n.inputs["spare"]) == sorted(f"gpu{i}" for i in range(56, 65))

    out = mocks.outputs(component)
    assert out["pool"] == "gpu" and out["gpus"] == 512
    assert out["spares"] == [f"gpu{i}" for i in range(56, 65)]
    assert out["nodes_by_zone"] == {"zone-a": 32, "zone-b": 32}
    assert sorted(out["nodes_by_domain"]) == ["rack1", "rack2", "rack3", "rack4"]
    assert out["nodes_by_domain"]["rack2"][:2] == ["gpu2", "gpu6"]
    assert sorted(pool.nodes) == sorted(f"gpu{i}" for i in range(1, 65))


def test_gpu_node_pool_without_enough_spares_creates_nothing(mocks: Harness) -> None:
    spec = changed("lab.yaml", lambda d: d["pools"][0].update(spare_fraction=0.0))
    with pytest.raises(PolicyViolationError) as info:
        mocks.run(lambda: GpuNodePool("lab-gpu", GpuNodePoolArgs(spec, "gpu", node_factory)))
    assert info.value.rules == {"HA-POOL-SPARES"}
    assert str(info.value).startswith("GpuNodePool lab-gpu: HA-POOL-SPARES pools[0].spare_fraction:")
    assert mocks.resources == []


def test_gpu_node_pool_refuses_a_pool_the_spec_does_not_have(mocks: Harness) -> None:
    with pytest.raises(SpecError, match="pool: pool 'cpu' is not in the spec"):
        mocks.run(lambda: GpuNodePool("x", GpuNodePoolArgs(example("lab.yaml"), "cpu", node_factory)))
    assert mocks.resources == []


# --- Fabric -----------------------------------------------------------------------------------------------------------
def test_fabric_creates_every_switch_and_link_of_the_plan(mocks: Harness) -> None:
    spec = example("lab.yaml")
    plan = plan_fabric(spec)
    mocks.run(lambda: Fabric("lab-fabric", FabricArgs(spec, switch_factory, link_factory)))

    component = mocks.one("haops:network:Fabric", "lab-fabric")
    switches = mocks.of_type("test:index:Switch")
    links = mocks.of_type("test:index:Link")
    assert sorted(s.inputs["switch"] for s in switches) == sorted(s.name for s in plan.switches())
    assert [s.inputs["tier"] for s in switches].count("spine") == 2
    assert len(links) == len(plan.links) == 2 * 7 + 4 * 2
    assert all(mocks.parent(r) == component for r in switches + links)

    homes: dict[str, set[str]] = {}
    for link in links:
        if link.inputs["kind"] == "host":
            homes.setdefault(link.inputs["lower"], set()).add(link.inputs["upper"])
    assert len(homes) == 7 and all(len(h) == 2 for h in homes.values())

    # A link waits for the switches at its ends.
    urn_of = {s.inputs["switch"]: s.urn for s in switches}
    uplink = next(lk for lk in links if lk.inputs["kind"] == "uplink")
    assert set(uplink.dependencies) == {urn_of[uplink.inputs["lower"]], urn_of[uplink.inputs["upper"]]}
    host_link = next(lk for lk in links if lk.inputs["kind"] == "host")
    assert set(host_link.dependencies) == {urn_of[host_link.inputs["upper"]]}

    out = mocks.outputs(component)
    assert out["spines"] == ["spine1", "spine2"]
    assert out["leaves"] == ["leaf1a", "leaf1b", "leaf2a", "leaf2b"]
    assert out["homing"]["gpu3"] == ["leaf1a", "leaf1b"]
    assert out["links"] == len(plan.links) and out["switch_radix"] == 64


def test_fabric_with_one_spine_creates_nothing(mocks: Harness) -> None:
    spec = changed("lab.yaml", lambda d: d["fabric"].update(spines=1, uplinks_per_leaf=1, ecmp=False))
    with pytest.raises(PolicyViolationError) as info:
        mocks.run(lambda: Fabric("lab-fabric", FabricArgs(spec, switch_factory, link_factory)))
    assert info.value.rules == {"HA-FABRIC-SPINES", "HA-FABRIC-SPOF"}
    assert mocks.resources == []


# --- ReplicatedStorage ------------------------------------------------------------------------------------------------
def test_replicated_storage_puts_its_replicas_in_different_zones(mocks: Harness) -> None:
    spec = example("production.yaml")
    mocks.run(lambda: ReplicatedStorage("prod-storage", ReplicatedStorageArgs(spec, replica_factory)))
    component = mocks.one("haops:storage:ReplicatedStorage", "prod-storage")
    replicas = sorted(mocks.of_type("test:index:Replica"), key=lambda r: r.name)  # registered concurrently
    assert [(r.name, r.inputs["domain"], r.inputs["zone"]) for r in replicas] == [
        ("prod-storage-replica1", "rack1", "zone-a"),
        ("prod-storage-replica2", "rack3", "zone-b"),
    ]
    assert all(mocks.parent(r) == component for r in replicas)
    out = mocks.outputs(component)
    assert out["mount_for_domain"] == {
        "rack1": "replica1",
        "rack2": "replica1",
        "rack3": "replica2",
        "rack4": "replica2",
    }
    assert [r["zone"] for r in out["replicas"]] == ["zone-a", "zone-b"]


@pytest.mark.parametrize(("spec_name", "replicas", "message"), [
    ("lab.yaml", None, "1 replica(s); need >= 2"),  # the lab's shared-dir: one copy
    ("lab.yaml", 3, "1 replica(s) more than there are failure domains"),
])  # fmt: skip
def test_replicated_storage_refuses_replicas_that_would_fail_together(
    mocks: Harness, spec_name: str, replicas: int | None, message: str
) -> None:
    args = ReplicatedStorageArgs(example(spec_name), replica_factory, replicas=replicas)
    with pytest.raises(PolicyViolationError, match="HA-STORAGE-REPLICAS") as info:
        mocks.run(lambda: ReplicatedStorage("storage", args))
    assert message in str(info.value)
    assert mocks.resources == []


# --- ControlPlane -----------------------------------------------------------------------------------------------------
def test_control_plane_spreads_slurm_controllers_and_etcd(mocks: Harness) -> None:
    spec = example("production.yaml")
    mocks.run(lambda: ControlPlane("prod-control", ControlPlaneArgs(spec, node_factory)))
    component = mocks.one("haops:control:ControlPlane", "prod-control")
    nodes = mocks.of_type("test:index:Node")
    assert all(mocks.parent(n) == component for n in nodes)
    by_role: dict[str, list[dict[str, Any]]] = {}
    for node in nodes:
        by_role.setdefault(node.inputs["role"], []).append(node.inputs)
    slurm, etcd = by_role["slurm-controller"], by_role["etcd"]
    assert sorted((n["host"], n["domain"], n["zone"]) for n in slurm) == [
        ("ctl1", "rack1", "zone-a"),
        ("ctl2", "rack3", "zone-b"),
    ]
    assert len(etcd) == 3
    assert len({n["domain"] for n in etcd}) == 3 and {n["zone"] for n in etcd} == {"zone-a", "zone-b"}
    out = mocks.outputs(component)
    assert (out["slurm_primary"], out["slurm_backup"]) == ("ctl1", "ctl2")
    assert out["etcd_initial_cluster"] == ("etcd1=https://etcd1:2380,etcd2=https://etcd2:2380,etcd3=https://etcd3:2380")
    assert out["slurm_domains"] == {"ctl1": "rack1", "ctl2": "rack3"}


def test_control_plane_with_one_slurm_controller_creates_nothing(mocks: Harness) -> None:
    spec = changed(
        "lab.yaml", lambda d: d.update(controllers={"ha": False, "hosts": [{"name": "ctl1", "domain": "rack1"}]})
    )
    with pytest.raises(PolicyViolationError) as info:
        mocks.run(lambda: ControlPlane("control", ControlPlaneArgs(spec, node_factory)))
    assert info.value.rules == {"HA-SLURM-CONTROLLERS"}
    assert mocks.resources == []


def test_control_plane_refuses_an_even_etcd(mocks: Harness) -> None:
    with pytest.raises(PolicyViolationError) as info:
        mocks.run(lambda: ControlPlane("control", ControlPlaneArgs(example("lab.yaml"), node_factory, etcd_members=4)))
    assert info.value.rules == {"HA-ETCD-SPREAD"}
    assert mocks.resources == []
