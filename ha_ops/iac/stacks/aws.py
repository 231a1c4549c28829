"""The AWS stack: a GPU cluster from a ClusterSpec. GPU instances (p5-like, an EFA interface per network card) in
one cluster placement group per availability zone, spread over >= 2 zones; the control plane and FSx for Lustre
replicas spread the same way; Slurm's StateSaveLocation on EFS, which outlives a zone; egress through a NAT gateway
per zone (aws_network) and one instance profile for every node (aws_iam). Every HA rule is checked before the first
resource is declared.

`build_aws_cluster(spec, config)` is the program body (tests call it under Pulumi mocks); `program()` reads the
stack's configuration (`spec`, `aws` in the project's namespace: `ha-ops-aws:` for infra/aws) for a Pulumi
project's __main__.py or the automation API, and exports the nodes' addresses for `ha-ops inventory --addresses`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pulumi
import pulumi_aws as aws
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ha_ops.errors import SpecError
from ha_ops.iac.components.control_plane import ControlPlane, ControlPlaneArgs
from ha_ops.iac.components.node_pool import GpuNodePool, GpuNodePoolArgs
from ha_ops.iac.components.storage import ReplicatedStorage, ReplicatedStorageArgs
from ha_ops.iac.plans.control_plane import plan_control_plane
from ha_ops.iac.plans.storage import plan_storage, spec_replicas
from ha_ops.iac.policy import check_control_plane, check_pool_zones, check_spec, check_storage
from ha_ops.iac.stacks.aws_factories import AwsNodeFactory, FsxLustreFactory
from ha_ops.iac.stacks.aws_iam import build_node_identity
from ha_ops.iac.stacks.aws_network import build_network, plan_public_subnets, ssh_ingress
from ha_ops.iac.violations import Violation, enforce
from ha_ops.spec.layout import compute_layout, leaf_for_domain
from ha_ops.spec.load import load_spec, validation_problems
from ha_ops.spec.model import Cidr, ClusterSpec


class AwsClusterConfig(BaseModel):
    """What the spec does not say about AWS."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    ami: str = Field(min_length=1, description="The node image (e.g. an AWS Deep Learning AMI with EFA drivers).")
    zones: dict[str, str] = Field(
        default_factory=dict,
        description="Spec zone -> availability zone; default: the region's available zones, in spec order.",
    )
    gpu_instance_type: str = "p5.48xlarge"
    efa_interfaces: int = Field(32, ge=1, le=32, description="p5.48xlarge has 32 network cards, one EFA on each.")
    controller_instance_type: str = "m7i.2xlarge"
    etcd_instance_type: str = "m7i.large"
    key_name: str | None = None
    lustre_capacity_gib: int = Field(1200, ge=1200, multiple_of=1200)
    lustre_throughput_mb_per_tib: int = Field(250, description="PERSISTENT_2: 125, 250, 500 or 1000.")
    admin_cidrs: list[Cidr] = Field(
        default_factory=list,
        description="Networks allowed to SSH (tcp 22) to the nodes. Default none: no inbound SSH at all; operators and "
        "Ansible then reach the nodes through SSM Session Manager. The nodes have no public address, so these are "
        "networks that reach the VPC (peered, VPN, Direct Connect).",
    )


# The roles of NodeRequests that are hosts of the spec (etcd members are not: the stack names them).
SPEC_HOST_ROLES = ("gpu", "slurm-controller")


class AwsGpuCluster(pulumi.ComponentResource):
    """Everything of one cluster, under one component so that `pulumi stack` shows it as one tree."""

    def __init__(
        self,
        name: str,
        spec: ClusterSpec,
        config: AwsClusterConfig,
        zone_map: Mapping[str, str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        self.zone_map: dict[str, str] = dict(zone_map)
        # Before registering: a spec the network cannot be laid out for leaves nothing behind.
        leaf_zone = leaf_zones(spec, self.zone_map)
        public_cidrs = plan_public_subnets(spec, sorted(set(leaf_zone.values())))
        super().__init__("haops:aws:GpuCluster", name, None, opts)
        layout = compute_layout(spec)
        child = pulumi.ResourceOptions(parent=self)

        self.vpc: aws.ec2.Vpc = aws.ec2.Vpc(
            f"{name}-vpc",
            cidr_block=str(spec.network.host_cidr),
            enable_dns_hostnames=True,
            enable_dns_support=True,
            tags={"Name": name, "ha-ops/cluster": name},
            opts=child,
        )
        # One subnet per leaf of the layout (its /24), in the zone of the failure domains on that leaf.
        self.subnets: dict[int, aws.ec2.Subnet] = {
            leaf: aws.ec2.Subnet(
                f"{name}-leaf{leaf}",
                vpc_id=self.vpc.id,
                cidr_block=str(layout.leaf(leaf).subnet),
                availability_zone=az,
                tags={"Name": f"{name}-leaf{leaf}", "ha-ops/cluster": name},
                opts=child,
            )
            for leaf, az in sorted(leaf_zone.items())
        }
        self.network = build_network(name, self.vpc, self.subnets, leaf_zone, public_cidrs, parent=self)
        # EFA needs all traffic to and from the security group itself; FSx and EFS ride on the same rule. From
        # outside, SSH from the operators' networks only (none without admin_cidrs).
        self.security_group = aws.ec2.SecurityGroup(
            f"{name}-cluster",
            vpc_id=self.vpc.id,
            description=f"ha-ops cluster {name}: EFA, Lustre and NFS between members",
            ingress=[{"protocol": "-1", "from_port": 0, "to_port": 0, "self": True}, *ssh_ingress(config.admin_cidrs)],
            egress=[
                {"protocol": "-1", "from_port": 0, "to_port": 0, "self": True},
                {"protocol": "-1", "from_port": 0, "to_port": 0, "cidr_blocks": ["0.0.0.0/0"]},
            ],
            tags={"ha-ops/cluster": name},
            opts=child,
        )
        gpu_azs = sorted({self.zone_map[spec.domain(n.domain).zone] for n in layout.nodes if "gpu" in n.roles})
        self.placement_groups: dict[str, aws.ec2.PlacementGroup] = {
            az: aws.ec2.PlacementGroup(
                f"{name}-{az}-cluster", strategy="cluster", tags={"ha-ops/cluster": name}, opts=child
            )
            for az in gpu_azs
        }

        # The bucket and Slurm's state file system come before the nodes: the nodes' role is scoped to them.
        self.bucket = aws.s3.Bucket(f"{name}-shared", tags={"ha-ops/cluster": name}, opts=child)
        # Slurm's StateSaveLocation: both controllers must see one copy, in whichever zone survives.
        self.slurm_state = aws.efs.FileSystem(
            f"{name}-slurm-state", encrypted=True, tags={"ha-ops/cluster": name}, opts=child
        )
        self.identity = build_node_identity(name, self.bucket, self.slurm_state, parent=self)

        nodes = AwsNodeFactory(
            cluster=name,
            config=config,
            zone_map=self.zone_map,
            subnets=self.subnets,
            security_group=self.security_group,
            placement_groups=self.placement_groups,
            instance_profile=self.identity.profile,
        )
        self.pools: dict[str, GpuNodePool] = {
            pool.name: GpuNodePool(f"{name}-{pool.name}", GpuNodePoolArgs(spec, pool.name, nodes), opts=child)
            for pool in spec.pools
        }
        self.control_plane: ControlPlane = ControlPlane(f"{name}-control", ControlPlaneArgs(spec, nodes), opts=child)

        lustre = FsxLustreFactory(
            cluster=name, config=config, subnets=self.subnets, security_group=self.security_group, bucket=self.bucket
        )
        self.storage: ReplicatedStorage = ReplicatedStorage(
            f"{name}-lustre", ReplicatedStorageArgs(spec, lustre), opts=child
        )

        first_subnet_per_az: dict[str, aws.ec2.Subnet] = {}
        for leaf, az in sorted(leaf_zone.items()):
            first_subnet_per_az.setdefault(az, self.subnets[leaf])
        for az, subnet in sorted(first_subnet_per_az.items()):
            aws.efs.MountTarget(
                f"{name}-slurm-state-{az}",
                file_system_id=self.slurm_state.id,
                subnet_id=subnet.id,
                security_groups=[self.security_group.id],
                opts=child,
            )

        # Every instance's private address by its name: spec hosts (what `ha-ops inventory --addresses` takes; GPU
        # nodes get theirs from AWS, not the layout), and the etcd members the stack named itself.
        built = nodes.instances.values()
        self.node_addresses: dict[str, pulumi.Output[str]] = {
            req.name: inst.private_ip for req, inst in built if req.role in SPEC_HOST_ROLES
        }
        self.etcd_addresses: dict[str, pulumi.Output[str]] = {
            req.name: inst.private_ip for req, inst in built if req.role == "etcd"
        }
        self.nat_public_ips: dict[str, pulumi.Output[str]] = {
            az: eip.public_ip for az, eip in self.network.nat_ips.items()
        }
        self.register_outputs(
            {
                "vpc_id": self.vpc.id,
                "nodes": self.node_addresses,
                "etcd_members": self.etcd_addresses,
                "nat_public_ips": self.nat_public_ips,
                "instance_profile": self.identity.profile.name,
                "availability_zones": self.zone_map,
                "placement_groups": {az: pg.name for az, pg in self.placement_groups.items()},
                "gpu_nodes_per_zone": {p: pool.plan.by_zone() for p, pool in self.pools.items()},
                "slurm_primary": self.control_plane.slurm_primary,
                "slurm_backup": self.control_plane.slurm_backup,
                "etcd_initial_cluster": self.control_plane.etcd_initial_cluster,
                "lustre": {r: fs.id for r, fs in self.storage.replicas.items()},
                "slurm_state_efs": self.slurm_state.id,
                "shared_bucket": self.bucket.bucket,
            }
        )


def leaf_zones(spec: ClusterSpec, zone_map: Mapping[str, str]) -> dict[int, str]:
    """Layout leaf -> availability zone of its subnet. A subnet lives in one zone, so every failure domain on a
    leaf must map to the same one."""
    out: dict[int, str] = {}
    problems = []
    for dom in spec.failure_domains:
        leaf, az = leaf_for_domain(spec, dom.name), zone_map[dom.zone]
        if out.setdefault(leaf, az) != az:
            problems.append(f"failure_domains: leaf{leaf} holds domains in {out[leaf]} and {az}; a subnet has one zone")
    if problems:
        raise SpecError(f"aws cluster {spec.name!r}", problems)
    return out


def preflight(spec: ClusterSpec, zone_map: Mapping[str, str]) -> list[Violation]:
    """Every rule the stack and its components enforce, checked together before anything is declared (a component
    alone would only refuse after the network was declared)."""
    violations = check_spec(spec) + check_pool_zones(spec, zone_map)
    violations += check_control_plane(plan_control_plane(spec), len(spec.failure_domains))
    violations += check_storage(plan_storage(spec, spec_replicas(spec)))
    return violations


def resolve_zones(spec: ClusterSpec, config: AwsClusterConfig) -> dict[str, str]:
    """Spec zone -> availability zone: the config's mapping, else the region's available zones in spec order."""
    zones = list(dict.fromkeys(d.zone for d in spec.failure_domains))
    if config.zones:
        missing = [z for z in zones if z not in config.zones]
        if missing:
            raise SpecError("aws config", [f"zones: no availability zone for spec zone(s) {missing}"])
        return {z: config.zones[z] for z in zones}
    available = aws.get_availability_zones(state="available").names
    if len(available) < len(zones):
        raise SpecError("aws config", [f"zones: the spec has {len(zones)} zones, the region {len(available)}"])
    return dict(zip(zones, available, strict=False))


def build_aws_cluster(spec: ClusterSpec, config: AwsClusterConfig, name: str | None = None) -> AwsGpuCluster:
    """The program: refuses a spec that breaks an HA rule before it declares anything, then builds the cluster."""
    enforce(check_spec(spec), f"aws cluster {spec.name!r}")  # before the zone lookup, the first call out
    zone_map = resolve_zones(spec, config)
    enforce(preflight(spec, zone_map), f"aws cluster {spec.name!r}")
    # AwsGpuCluster itself checks, before it registers anything, that each leaf's domains share a zone and that
    # host_cidr has room for the NAT gateways' subnets.
    return AwsGpuCluster(name or spec.name, spec, config, zone_map)


def program() -> None:
    """Entry point for a Pulumi project (infra/aws): in the project's own config namespace, `spec` is the spec's
    path and `aws` an AwsClusterConfig."""
    cfg = pulumi.Config()  # the project's namespace: `ha-ops-aws:spec` for infra/aws
    spec = load_spec(Path(cfg.require("spec")))
    try:
        config = AwsClusterConfig.model_validate(cfg.require_object("aws"))
    except ValidationError as exc:
        raise SpecError(cfg.full_key("aws"), validation_problems(exc)) from None
    cluster = build_aws_cluster(spec, config)
    # `nodes` is what `ha-ops inventory --addresses` reads from `pulumi stack output --json`.
    pulumi.export("nodes", cluster.node_addresses)
    pulumi.export("etcd_members", cluster.etcd_addresses)
    pulumi.export("vpc_id", cluster.vpc.id)
    pulumi.export("nat_public_ips", cluster.nat_public_ips)
    pulumi.export("shared_bucket", cluster.bucket.bucket)
    pulumi.export("availability_zones", cluster.zone_map)
    pulumi.export("slurm_primary", cluster.control_plane.slurm_primary)
    pulumi.export("slurm_backup", cluster.control_plane.slurm_backup)
    pulumi.export("lustre", {r: fs.id for r, fs in cluster.storage.replicas.items()})
    pulumi.export("slurm_state_efs", cluster.slurm_state.id)
