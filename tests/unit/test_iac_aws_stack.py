"""The AWS stack (ha_ops.iac.stacks.aws) under Pulumi mocks: GPU instances with EFA interfaces in one cluster
placement group per availability zone, spread over two zones, the control plane and FSx for Lustre replicas spread
the same way, Slurm state on EFS, all under one component tree; and a spec that breaks a rule declares nothing."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pulumi
import pytest

from ha_ops.errors import SpecError
from ha_ops.iac.stacks.aws import AwsClusterConfig, AwsGpuCluster, build_aws_cluster, program
from ha_ops.iac.violations import PolicyViolationError
from ha_ops.spec import compute_layout
from tests.unit.iac_harness import AVAILABILITY_ZONES, Harness, Registered
from tests.unit.iac_specs import EXAMPLES, changed, example

CONFIG = AwsClusterConfig(ami="ami-0123456789abcdef0", efa_interfaces=32)
ZONES_CALL = "aws:index/getAvailabilityZones:getAvailabilityZones"


@pytest.fixture
def mocks() -> Harness:
    return Harness.install()


@pytest.fixture(scope="module")
def prod() -> Harness:
    """The production example built once; the tests below only read what it registered."""
    mocks = Harness.install()
    cluster = mocks.run(lambda: build_aws_cluster(example("production.yaml"), CONFIG))
    assert isinstance(cluster, AwsGpuCluster)
    return mocks


def instances(mocks: Harness, role: str) -> list[Registered]:
    return [r for r in mocks.of_type("aws:ec2/instance:Instance") if r.inputs["tags"]["ha-ops/role"] == role]


def test_gpu_instances_spread_over_two_zones_in_their_zones_placement_group(prod: Harness) -> None:
    gpus = instances(prod, "gpu")
    assert len(gpus) == 64
    assert Counter(g.inputs["availabilityZone"] for g in gpus) == {"us-east-1a": 32, "us-east-1b": 32}
    groups = prod.of_type("aws:ec2/placementGroup:PlacementGroup")
    assert sorted((g.name, g.inputs["strategy"]) for g in groups) == [
        ("prod-us-east-1a-cluster", "cluster"),
        ("prod-us-east-1b-cluster", "cluster"),
    ]
    for gpu in gpus:
        # Every instance sits in the placement group of its own zone (a cluster placement group spans no zones).
        assert gpu.inputs["placementGroup"] == f"prod-{gpu.inputs['availabilityZone']}-cluster-pg"
    assert Counter(g.inputs["tags"]["ha-ops/domain"] for g in gpus) == {f"rack{i}": 16 for i in range(1, 5)}
    assert sum(g.inputs["tags"]["ha-ops/spare"] == "true" for g in gpus) == 9


def test_gpu_instances_launch_with_an_efa_interface_on_every_network_card(prod: Harness) -> None:
    templates = {t.name: t for t in prod.of_type("aws:ec2/launchTemplate:LaunchTemplate")}
    assert sorted(templates) == [f"prod-gpu-leaf{i}-efa" for i in range(1, 5)]
    subnets = {s.name: s for s in prod.of_type("aws:ec2/subnet:Subnet")}
    for leaf in range(1, 5):
        template = templates[f"prod-gpu-leaf{leaf}-efa"].inputs
        assert template["instanceType"] == "p5.48xlarge"
        nics = template["networkInterfaces"]
        assert [n["networkCardIndex"] for n in nics] == list(range(32))
        assert {n["interfaceType"] for n in nics} == {"efa"}
        assert [n["deviceIndex"] for n in nics] == [0] + [1] * 31
        assert {n["subnetId"] for n in nics} == {f"prod-leaf{leaf}-id"}
        assert subnets[f"prod-leaf{leaf}"].inputs["cidrBlock"] == f"10.80.{leaf - 1}.0/24"
    layout = compute_layout(example("production.yaml"))
    for gpu in instances(prod, "gpu"):
        host = gpu.inputs["tags"]["Name"].removeprefix("prod-")
        assert gpu.inputs["launchTemplate"] == {
            "id": f"prod-gpu-leaf{layout.node(host).leaf}-efa-id",
            "version": "$Default",
        }


def test_subnets_follow_the_layout_and_the_zone_of_their_domains(prod: Harness) -> None:
    subnets = {s.name: s.inputs for s in prod.of_type("aws:ec2/subnet:Subnet")}
    assert {n: (s["cidrBlock"], s["availabilityZone"]) for n, s in subnets.items()} == {
        "prod-leaf1": ("10.80.0.0/24", "us-east-1a"),
        "prod-leaf2": ("10.80.1.0/24", "us-east-1a"),
        "prod-leaf3": ("10.80.2.0/24", "us-east-1b"),
        "prod-leaf4": ("10.80.3.0/24", "us-east-1b"),
    }
    (vpc,) = prod.of_type("aws:ec2/vpc:Vpc")
    assert vpc.inputs["cidrBlock"] == "10.80.0.0/16"
    (group,) = prod.of_type("aws:ec2/securityGroup:SecurityGroup")
    assert {"protocol": "-1", "fromPort": 0, "toPort": 0, "self": True} in group.inputs["ingress"]  # EFA's rule


def test_controllers_and_etcd_are_spread_over_both_zones(prod: Harness) -> None:
    controllers = instances(prod, "slurm-controller")
    assert sorted((c.inputs["privateIp"], c.inputs["availabilityZone"]) for c in controllers) == [
        ("10.80.0.6", "us-east-1a"),
        ("10.80.2.5", "us-east-1b"),
    ]
    etcd = instances(prod, "etcd")
    assert len(etcd) == 3 and {e.inputs["availabilityZone"] for e in etcd} == {"us-east-1a", "us-east-1b"}
    assert len({e.inputs["tags"]["ha-ops/domain"] for e in etcd}) == 3
    assert all("placementGroup" not in i.inputs for i in controllers + etcd)


def test_lustre_replicas_in_two_zones_share_one_bucket_and_slurm_state_is_on_efs(prod: Harness) -> None:
    lustre = sorted(prod.of_type("aws:fsx/lustreFileSystem:LustreFileSystem"), key=lambda r: r.name)
    assert [(fs.inputs["deploymentType"], fs.inputs["subnetIds"]) for fs in lustre] == [
        ("PERSISTENT_2", "prod-leaf1-id"),
        ("PERSISTENT_2", "prod-leaf3-id"),
    ]
    links = prod.of_type("aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation")
    assert sorted(a.inputs["fileSystemId"] for a in links) == ["prod-lustre-replica1-id", "prod-lustre-replica2-id"]
    assert {a.inputs["dataRepositoryPath"] for a in links} == {"s3://prod-shared-bucket/shared"}
    mounts = prod.of_type("aws:efs/mountTarget:MountTarget")
    assert sorted(m.inputs["subnetId"] for m in mounts) == ["prod-leaf1-id", "prod-leaf3-id"]  # one per zone
    assert {m.inputs["fileSystemId"] for m in mounts} == {"prod-slurm-state-id"}


def test_every_resource_hangs_off_the_cluster_component(prod: Harness) -> None:
    (cluster,) = prod.of_type("haops:aws:GpuCluster")
    pool = prod.one("haops:compute:GpuNodePool", "prod-gpu")
    control = prod.one("haops:control:ControlPlane", "prod-control")
    storage = prod.one("haops:storage:ReplicatedStorage", "prod-lustre")
    assert prod.parent(pool) == prod.parent(control) == prod.parent(storage) == cluster
    assert all(prod.parent(g) == pool for g in instances(prod, "gpu"))
    assert all(prod.parent(t) == pool for t in prod.of_type("aws:ec2/launchTemplate:LaunchTemplate"))
    assert all(prod.parent(i) == control for i in instances(prod, "slurm-controller") + instances(prod, "etcd"))
    assert all(prod.parent(fs) == storage for fs in prod.of_type("aws:fsx/lustreFileSystem:LustreFileSystem"))
    # Nothing is left at the top of the stack beside the cluster itself.
    top = [r for r in prod.resources if prod.parent(r) is None]
    assert top == [cluster]

    out = prod.outputs(cluster)
    assert out["availability_zones"] == {"zone-a": "us-east-1a", "zone-b": "us-east-1b"}
    assert out["gpu_nodes_per_zone"] == {"gpu": {"zone-a": 32, "zone-b": 32}}
    assert out["placement_groups"] == {
        "us-east-1a": "prod-us-east-1a-cluster-pg",
        "us-east-1b": "prod-us-east-1b-cluster-pg",
    }
    assert (out["slurm_primary"], out["slurm_backup"]) == ("ctl1", "ctl2")
    assert out["lustre"] == {"replica1": "prod-lustre-replica1-id", "replica2": "prod-lustre-replica2-id"}
    assert prod.mocks.calls == [ZONES_CALL]


def test_zones_from_the_config_are_used_without_asking_the_region(mocks: Harness) -> None:
    config = CONFIG.model_copy(update={"zones": {"zone-a": "eu-west-1c", "zone-b": "eu-west-1a"}})
    mocks.run(lambda: build_aws_cluster(example("production.yaml"), config))
    assert mocks.mocks.calls == []
    assert Counter(g.inputs["availabilityZone"] for g in instances(mocks, "gpu")) == {
        "eu-west-1c": 32,
        "eu-west-1a": 32,
    }


def test_a_spec_in_one_zone_declares_nothing(mocks: Harness) -> None:
    with pytest.raises(PolicyViolationError) as info:
        mocks.run(lambda: build_aws_cluster(example("lab.yaml"), CONFIG))
    # The lab's racks share one zone, and its storage is one shared directory.
    assert info.value.rules == {"HA-POOL-ZONES", "HA-STORAGE-REPLICAS"}
    assert mocks.resources == []


def test_a_spec_breaking_a_spec_rule_is_refused_before_the_region_is_even_asked(mocks: Harness) -> None:
    spec = changed("production.yaml", lambda d: d["pools"][0].update(spare_fraction=0.1))
    with pytest.raises(PolicyViolationError, match=r"HA-POOL-SPARES pools\[0\].spare_fraction"):
        mocks.run(lambda: build_aws_cluster(spec, CONFIG))
    assert mocks.resources == [] and mocks.mocks.calls == []


def test_two_spec_zones_on_one_availability_zone_are_refused(mocks: Harness) -> None:
    config = CONFIG.model_copy(update={"zones": {"zone-a": "us-east-1a", "zone-b": "us-east-1a"}})
    with pytest.raises(PolicyViolationError) as info:
        mocks.run(lambda: build_aws_cluster(example("production.yaml"), config))
    assert info.value.rules == {"HA-POOL-ZONES"}
    assert mocks.resources == []


def test_a_zone_map_missing_a_spec_zone_is_a_spec_error(mocks: Harness) -> None:
    config = CONFIG.model_copy(update={"zones": {"zone-a": "us-east-1a"}})
    with pytest.raises(SpecError, match=r"zones: no availability zone for spec zone\(s\) \['zone-b'\]"):
        mocks.run(lambda: build_aws_cluster(example("production.yaml"), config))
    assert mocks.resources == []


@pytest.fixture
def stack_config() -> object:
    yield pulumi.runtime.set_all_config
    pulumi.runtime.set_all_config({})


def test_the_program_reads_the_spec_and_aws_settings_from_stack_config(mocks: Harness, stack_config: object) -> None:
    settings = {"ami": "ami-1", "zones": {"zone-a": "us-west-2a", "zone-b": "us-west-2b"}, "efa_interfaces": 4}
    pulumi.runtime.set_all_config(
        {"ha-ops:spec": str(EXAMPLES / "production.yaml"), "ha-ops:aws": json.dumps(settings)}
    )
    mocks.run(program)
    assert len(instances(mocks, "gpu")) == 64
    template = mocks.of_type("aws:ec2/launchTemplate:LaunchTemplate")[0].inputs
    assert template["imageId"] == "ami-1" and len(template["networkInterfaces"]) == 4

    pulumi.runtime.set_all_config({"ha-ops:spec": str(Path(EXAMPLES / "production.yaml")), "ha-ops:aws": "{}"})
    with pytest.raises(SpecError, match="ami: required key is missing"):
        Harness.install().run(program)


def test_availability_zones_come_from_the_mocked_region() -> None:
    assert AVAILABILITY_ZONES[:2] == ["us-east-1a", "us-east-1b"]  # what the assertions above rely on
