"""The AWS stack (ha_ops.iac.stacks.aws) under Pulumi mocks: GPU instances with EFA interfaces in one cluster
placement group per availability zone, spread over two zones, the control plane and FSx for Lustre replicas spread
the same way, Slurm state on EFS, egress through a NAT gateway per zone, one least-privilege instance profile, the
nodes' addresses exported, all under one component tree; a spec that breaks a rule declares nothing; and the
infra/aws Pulumi project runs the stack from its example stack configuration."""

from __future__ import annotations

import json
import runpy
import tomllib
from collections import Counter
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path

import pulumi
import pytest
import yaml
from pydantic import ValidationError

from ha_ops.errors import SpecError
from ha_ops.iac.stacks.aws import AwsClusterConfig, AwsGpuCluster, build_aws_cluster, program
from ha_ops.iac.stacks.aws_network import plan_public_subnets
from ha_ops.iac.violations import PolicyViolationError
from ha_ops.spec import compute_layout, load_spec
from tests.unit.iac_harness import AVAILABILITY_ZONES, MOCK_PRIVATE_BASE, REGION, Harness, Registered
from tests.unit.iac_specs import EXAMPLES, changed, example

CONFIG = AwsClusterConfig(ami="ami-0123456789abcdef0", efa_interfaces=32)
ZONES_CALL = "aws:index/getAvailabilityZones:getAvailabilityZones"
REGION_CALL = "aws:index/getRegion:getRegion"
INFRA_AWS = Path(__file__).resolve().parents[2] / "infra" / "aws"
PROD_AZS = ["us-east-1a", "us-east-1b"]


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


def by_name(mocks: Harness, typ: str) -> dict[str, Registered]:
    return {r.name: r for r in mocks.of_type(typ)}


def test_subnets_follow_the_layout_and_the_zone_of_their_domains(prod: Harness) -> None:
    subnets = {s.name: s.inputs for s in prod.of_type("aws:ec2/subnet:Subnet") if "-leaf" in s.name}
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
    # The network and the identity hang off the cluster too.
    network_and_identity = [
        "aws:ec2/internetGateway:InternetGateway",
        "aws:ec2/natGateway:NatGateway",
        "aws:ec2/eip:Eip",
        "aws:ec2/routeTable:RouteTable",
        "aws:ec2/route:Route",
        "aws:ec2/vpcEndpoint:VpcEndpoint",
        "aws:iam/role:Role",
        "aws:iam/rolePolicy:RolePolicy",
        "aws:iam/instanceProfile:InstanceProfile",
    ]
    for typ in network_and_identity:
        assert prod.of_type(typ) and all(prod.parent(r) == cluster for r in prod.of_type(typ)), typ
    assert prod.mocks.calls == [ZONES_CALL, REGION_CALL]


def test_zones_from_the_config_are_used_without_asking_the_region(mocks: Harness) -> None:
    config = CONFIG.model_copy(update={"zones": {"zone-a": "eu-west-1c", "zone-b": "eu-west-1a"}})
    mocks.run(lambda: build_aws_cluster(example("production.yaml"), config))
    assert mocks.mocks.calls == [REGION_CALL]  # its name, for the S3 endpoint; not its zones
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


def test_the_program_reads_the_spec_and_aws_settings_from_stack_config(stack_config: object) -> None:
    # The project's own namespace (infra/aws/Pulumi.yaml names the project ha-ops-aws).
    mocks = Harness.install(project="ha-ops-aws")
    settings = {"ami": "ami-1", "zones": {"zone-a": "us-west-2a", "zone-b": "us-west-2b"}, "efa_interfaces": 4}
    pulumi.runtime.set_all_config(
        {"ha-ops-aws:spec": str(EXAMPLES / "production.yaml"), "ha-ops-aws:aws": json.dumps(settings)}
    )
    mocks.run(program)
    assert len(instances(mocks, "gpu")) == 64
    template = mocks.of_type("aws:ec2/launchTemplate:LaunchTemplate")[0].inputs
    assert template["imageId"] == "ami-1" and len(template["networkInterfaces"]) == 4
    assert set(mocks.exports) >= {"nodes", "etcd_members", "vpc_id", "nat_public_ips", "availability_zones"}
    assert mocks.exports["vpc_id"] == "prod-vpc-id"
    assert set(mocks.exports["nat_public_ips"]) == {"us-west-2a", "us-west-2b"}

    spec = str(Path(EXAMPLES / "production.yaml"))
    pulumi.runtime.set_all_config({"ha-ops-aws:spec": spec, "ha-ops-aws:aws": "{}"})
    with pytest.raises(SpecError, match="ha-ops-aws:aws: ami: required key is missing"):
        Harness.install(project="ha-ops-aws").run(program)
    bad_cidr = json.dumps({"ami": "ami-1", "admin_cidrs": ["10.0.0.1/8"]})  # host bits set: not a network
    pulumi.runtime.set_all_config({"ha-ops-aws:spec": spec, "ha-ops-aws:aws": bad_cidr})
    with pytest.raises(SpecError, match=r"admin_cidrs\[0\]"):
        Harness.install(project="ha-ops-aws").run(program)


def test_availability_zones_come_from_the_mocked_region() -> None:
    assert AVAILABILITY_ZONES[:2] == ["us-east-1a", "us-east-1b"]  # what the assertions above rely on


# The network: egress per zone, the S3 endpoint, SSH from the operators only.


def test_each_zone_has_its_own_nat_gateway_and_elastic_ip_in_a_public_subnet_of_that_zone(prod: Harness) -> None:
    (vpc,) = prod.of_type("aws:ec2/vpc:Vpc")
    (igw,) = prod.of_type("aws:ec2/internetGateway:InternetGateway")
    assert igw.inputs["vpcId"] == "prod-vpc-id"
    subnets = by_name(prod, "aws:ec2/subnet:Subnet")
    eips = by_name(prod, "aws:ec2/eip:Eip")
    nats = by_name(prod, "aws:ec2/natGateway:NatGateway")
    assert sorted(nats) == sorted(eips) == [f"prod-{az}-nat" for az in PROD_AZS]
    for az in PROD_AZS:
        public = subnets[f"prod-{az}-public"].inputs
        assert public["availabilityZone"] == az and IPv4Network(public["cidrBlock"]).prefixlen == 28
        assert public["mapPublicIpOnLaunch"] is False
        nat = nats[f"prod-{az}-nat"]
        assert nat.inputs["subnetId"] == f"prod-{az}-public-id"
        assert nat.inputs["allocationId"] == f"prod-{az}-nat-id"  # its own zone's Elastic IP
        assert eips[f"prod-{az}-nat"].inputs["domain"] == "vpc"
        assert igw.urn in nat.dependencies and igw.urn in eips[f"prod-{az}-nat"].dependencies
    # One public route table: the default route to the Internet gateway, on every public subnet.
    routes = {r.name: r.inputs for r in prod.of_type("aws:ec2/route:Route")}
    assert routes["prod-public-default"] == {
        "routeTableId": "prod-public-id",
        "destinationCidrBlock": "0.0.0.0/0",
        "gatewayId": "prod-igw-id",
    }
    associations = {a.inputs["subnetId"]: a.inputs["routeTableId"] for a in
                    prod.of_type("aws:ec2/routeTableAssociation:RouteTableAssociation")}  # fmt: skip
    assert {f"prod-{az}-public-id": "prod-public-id" for az in PROD_AZS}.items() <= associations.items()
    assert vpc.inputs["cidrBlock"] == "10.80.0.0/16"


def test_each_zones_leaf_subnets_route_out_through_their_own_zones_nat_gateway(prod: Harness) -> None:
    routes = {r.name: r.inputs for r in prod.of_type("aws:ec2/route:Route")}
    tables = by_name(prod, "aws:ec2/routeTable:RouteTable")
    assert sorted(tables) == ["prod-public", *(f"prod-{az}-private" for az in PROD_AZS)]
    for az in PROD_AZS:
        assert routes[f"prod-{az}-private-default"] == {
            "routeTableId": f"prod-{az}-private-id",
            "destinationCidrBlock": "0.0.0.0/0",
            "natGatewayId": f"prod-{az}-nat-id",
        }
    associations = {a.inputs["subnetId"]: a.inputs["routeTableId"] for a in
                    prod.of_type("aws:ec2/routeTableAssociation:RouteTableAssociation")}  # fmt: skip
    subnets = by_name(prod, "aws:ec2/subnet:Subnet")
    leaves = {n: s for n, s in subnets.items() if "-leaf" in n}
    assert len(leaves) == 4
    for name, leaf in leaves.items():
        # Every leaf subnet on the private table of the zone it is in, so its egress never crosses zones.
        assert associations[f"{name}-id"] == f"prod-{leaf.inputs['availabilityZone']}-private-id"
    # No route table has inline routes (they would fight the S3 endpoint's routes).
    assert all("routes" not in t.inputs for t in tables.values())


def test_s3_traffic_takes_a_gateway_endpoint_on_the_private_route_tables(prod: Harness) -> None:
    (endpoint,) = prod.of_type("aws:ec2/vpcEndpoint:VpcEndpoint")
    assert endpoint.inputs["serviceName"] == f"com.amazonaws.{REGION}.s3"
    assert endpoint.inputs["vpcEndpointType"] == "Gateway"
    assert endpoint.inputs["vpcId"] == "prod-vpc-id"
    assert sorted(endpoint.inputs["routeTableIds"]) == [f"prod-{az}-private-id" for az in PROD_AZS]


def test_the_public_subnets_overlap_no_leaf_subnet_or_address(prod: Harness) -> None:
    subnets = by_name(prod, "aws:ec2/subnet:Subnet")
    public = [IPv4Network(subnets[f"prod-{az}-public"].inputs["cidrBlock"]) for az in PROD_AZS]
    assert public == [IPv4Network("10.80.255.240/28"), IPv4Network("10.80.255.224/28")]  # the top of host_cidr
    leaves = [IPv4Network(s.inputs["cidrBlock"]) for n, s in subnets.items() if "-leaf" in n]
    assert not any(p.overlaps(leaf) for p in public for leaf in leaves)
    # Every example, with as many zones as could be asked of it: clear of every leaf, domain subnet and address.
    for path in sorted(EXAMPLES.glob("*.yaml")):
        spec = load_spec(path)
        layout = compute_layout(spec)
        planned = plan_public_subnets(spec, [f"az{i}" for i in range(3)])
        taken = [leaf.subnet for leaf in layout.leaves] + [d.subnet for d in spec.failure_domains if d.subnet]
        addresses = [n.address for n in layout.nodes] + list(layout.service_addresses.values())
        assert len(set(planned.values())) == 3, path.name
        for net in planned.values():
            assert net.subnet_of(spec.network.host_cidr), (path.name, net)
            assert not any(net.overlaps(t) for t in taken), (path.name, net)
            assert not any(a in net for a in addresses), (path.name, net)


def test_a_host_cidr_with_no_room_for_the_public_subnets_is_refused_before_anything_is_declared(
    mocks: Harness,
) -> None:
    # A /22 is exactly the four leaves' /24s: nothing is left for a NAT gateway's subnet.
    spec = changed("production.yaml", lambda d: d["network"].update(host_cidr="10.80.0.0/22"))
    with pytest.raises(SpecError, match=r"network.host_cidr: 10.80.0.0/22 has no free /28"):
        mocks.run(lambda: build_aws_cluster(spec, CONFIG))
    assert mocks.resources == []


def ssh_rules(mocks: Harness) -> list[dict]:
    (group,) = mocks.of_type("aws:ec2/securityGroup:SecurityGroup")
    return [r for r in group.inputs["ingress"] if not r.get("self")]


def test_no_ssh_from_outside_without_admin_cidrs(prod: Harness) -> None:
    (group,) = prod.of_type("aws:ec2/securityGroup:SecurityGroup")
    assert group.inputs["ingress"] == [{"protocol": "-1", "fromPort": 0, "toPort": 0, "self": True}]


def test_ssh_is_allowed_only_from_the_admin_cidrs(mocks: Harness) -> None:
    config = CONFIG.model_copy(update={"admin_cidrs": [IPv4Network("10.9.0.0/16"), IPv4Network("192.0.2.0/24")]})
    mocks.run(lambda: build_aws_cluster(example("production.yaml"), config))
    assert ssh_rules(mocks) == [
        {
            "protocol": "tcp",
            "fromPort": 22,
            "toPort": 22,
            "cidrBlocks": ["10.9.0.0/16", "192.0.2.0/24"],
            "description": "SSH from the operators' networks (admin_cidrs)",
        }
    ]


def test_admin_cidrs_must_be_networks() -> None:
    assert AwsClusterConfig(ami="a", admin_cidrs=["10.9.0.0/16"]).admin_cidrs == [IPv4Network("10.9.0.0/16")]
    for bad in ("10.9.0.1/16", "not-a-cidr", "2001:db8::/32", 167772160):  # (an int: ipaddress would take it)
        with pytest.raises(ValidationError):
            AwsClusterConfig(ami="a", admin_cidrs=[bad])


# The nodes' identity: one instance profile, least privilege.


def test_every_node_runs_as_the_clusters_instance_profile(prod: Harness) -> None:
    (profile,) = prod.of_type("aws:iam/instanceProfile:InstanceProfile")
    assert profile.inputs["role"] == "prod-node-role"
    arn = "arn:aws:iam::111122223333:instance-profile/prod-node-instance-profile"
    templates = prod.of_type("aws:ec2/launchTemplate:LaunchTemplate")
    assert len(templates) == 4 and all(t.inputs["iamInstanceProfile"] == {"arn": arn} for t in templates)
    plain = instances(prod, "slurm-controller") + instances(prod, "etcd")
    assert len(plain) == 5
    assert all(i.inputs["iamInstanceProfile"] == "prod-node-instance-profile" for i in plain)
    # The profile waits for the role's policies: a node boots with its permissions.
    policy_types = ("aws:iam/rolePolicy:RolePolicy", "aws:iam/rolePolicyAttachment:RolePolicyAttachment")
    attachments = [r.urn for r in prod.resources if r.type in policy_types]
    assert len(attachments) == 2 and set(attachments) <= set(profile.dependencies)


def test_the_node_role_may_use_ssm_the_clusters_bucket_and_its_slurm_state_only(prod: Harness) -> None:
    (role,) = prod.of_type("aws:iam/role:Role")
    trust = json.loads(role.inputs["assumeRolePolicy"])
    assert trust["Statement"] == [
        {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}
    ]
    (ssm,) = prod.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
    assert ssm.inputs == {"role": "prod-node-role", "policyArn": "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"}
    (inline,) = prod.of_type("aws:iam/rolePolicy:RolePolicy")
    assert inline.inputs["role"] == "prod-node-id"
    statements = json.loads(inline.inputs["policy"])["Statement"]
    bucket = "arn:aws:s3:::prod-shared-bucket"
    efs = "arn:aws:elasticfilesystem:us-east-1:111122223333:file-system/prod-slurm-state-id"
    granted = {(tuple(s["Action"]), s["Resource"]) for s in statements}
    assert granted == {
        (("s3:ListBucket",), bucket),
        (("s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"), f"{bucket}/*"),
        (("elasticfilesystem:ClientMount", "elasticfilesystem:ClientWrite"), efs),
    }
    assert all(s["Effect"] == "Allow" for s in statements)
    assert not any("*" in a for s in statements for a in s["Action"])


# The addresses the stack exports, for `ha-ops inventory --addresses`.


def test_the_nodes_output_names_exactly_the_spec_hosts_the_stack_built(prod: Harness) -> None:
    (cluster,) = prod.of_type("haops:aws:GpuCluster")
    out = prod.outputs(cluster)
    layout = compute_layout(example("production.yaml"))
    gpus = {n.name for n in layout.nodes if "gpu" in n.roles}
    controllers = {n.name: str(n.address) for n in layout.nodes if "controller" in n.roles}
    assert len(gpus) == 64 and set(controllers) == {"ctl1", "ctl2"}
    assert set(out["nodes"]) == gpus | set(controllers)  # not the storage or monitoring hosts: AWS builds none
    assert {h: out["nodes"][h] for h in controllers} == controllers  # at their spec addresses
    # GPU nodes: whatever AWS gave each (the mocked provider counts up from MOCK_PRIVATE_BASE), one each.
    gpu_addresses = [IPv4Address(out["nodes"][h]) for h in gpus]
    assert len(set(gpu_addresses)) == 64 and all(a > MOCK_PRIVATE_BASE for a in gpu_addresses)
    assert sorted(out["etcd_members"]) == ["etcd1", "etcd2", "etcd3"]
    assert all(IPv4Address(a) > MOCK_PRIVATE_BASE for a in out["etcd_members"].values())
    assert sorted(out["nat_public_ips"]) == PROD_AZS
    assert len(set(out["nat_public_ips"].values())) == 2
    assert out["vpc_id"] == "prod-vpc-id"


def stack_settings(stack_file: Path) -> dict[str, str]:
    """A stack file's config as the engine hands it to a program: objects as JSON text."""
    config = yaml.safe_load(stack_file.read_text())["config"]
    return {k: v if isinstance(v, str) else json.dumps(v) for k, v in config.items()}


def test_the_infra_aws_project_runs_the_stack_from_its_example_config(
    stack_config: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = yaml.safe_load((INFRA_AWS / "Pulumi.yaml").read_text())
    assert project["name"] == "ha-ops-aws"
    assert project["runtime"] == {"name": "python", "options": {"toolchain": "pip", "virtualenv": "venv"}}
    # `aws` is an object, which Pulumi's project config types cannot declare: Pulumi.yaml describes it in comments.
    assert project["config"]["ha-ops-aws:spec"]["type"] == "string"
    # requirements.txt installs this checkout with the extra that carries pulumi-aws.
    extras = tomllib.loads((INFRA_AWS.parents[1] / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(d.startswith("pulumi-aws") for d in extras["iac"])
    assert "-e ../..[iac]" in (INFRA_AWS / "requirements.txt").read_text().splitlines()

    settings = stack_settings(INFRA_AWS / "Pulumi.example.yaml")
    assert json.loads(settings["ha-ops-aws:aws"])["admin_cidrs"]  # the example shows SSH from an admin network
    pulumi.runtime.set_all_config(settings)
    monkeypatch.chdir(INFRA_AWS)  # where Pulumi runs the program: the spec path is relative to it
    mocks = Harness.install(project=project["name"])
    mocks.run(lambda: runpy.run_path(str(INFRA_AWS / "__main__.py"), run_name="__main__"))

    assert len(instances(mocks, "gpu")) == 64
    layout = compute_layout(example("production.yaml"))
    expected = {n.name for n in layout.nodes if {"gpu", "controller"} & set(n.roles)}
    assert set(mocks.exports["nodes"]) == expected
    assert sorted(mocks.exports["etcd_members"]) == ["etcd1", "etcd2", "etcd3"]
    zones = json.loads(settings["ha-ops-aws:aws"])["zones"]
    assert mocks.exports["availability_zones"] == zones
    assert set(mocks.exports["nat_public_ips"]) == set(zones.values())
    assert ssh_rules(mocks)[0]["cidrBlocks"] == json.loads(settings["ha-ops-aws:aws"])["admin_cidrs"]
