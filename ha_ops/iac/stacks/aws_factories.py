"""The AWS side of the provider abstraction: EC2 instances for nodes (GPU nodes with EFA interfaces, in their
availability zone's cluster placement group) and FSx for Lustre file systems for storage replicas."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pulumi
import pulumi_aws as aws

from ha_ops.iac.plans.nodes import NodeRequest
from ha_ops.iac.plans.storage import StorageReplica

if TYPE_CHECKING:
    from ha_ops.iac.stacks.aws import AwsClusterConfig

LUSTRE_MOUNT_PATH = "/shared"


def _tags(cluster: str, name: str, extra: Mapping[str, str]) -> dict[str, str]:
    return {"Name": f"{cluster}-{name}", "ha-ops/cluster": cluster, **extra}


@dataclass(kw_only=True)
class AwsNodeFactory:
    """Builds every NodeRequest as an EC2 instance in the subnet of its layout leaf. GPU nodes launch from one
    launch template per (pool, leaf) carrying an EFA interface on each network card, inside the cluster placement
    group of their availability zone (a cluster placement group never spans zones). Every instance runs as the
    cluster's instance profile (GPU nodes through their launch template)."""

    cluster: str
    config: AwsClusterConfig
    zone_map: Mapping[str, str]
    subnets: Mapping[int, aws.ec2.Subnet]
    security_group: aws.ec2.SecurityGroup
    placement_groups: Mapping[str, aws.ec2.PlacementGroup]
    instance_profile: aws.iam.InstanceProfile  # every node's identity (ha_ops.iac.stacks.aws_iam)
    launch_templates: dict[tuple[str, int], aws.ec2.LaunchTemplate] = field(default_factory=dict)
    # Every instance built, by its request's (spec or layout) name: the stack exports their addresses.
    instances: dict[str, tuple[NodeRequest, aws.ec2.Instance]] = field(default_factory=dict)

    def __call__(self, resource_name: str, request: NodeRequest, opts: pulumi.ResourceOptions) -> pulumi.Resource:
        az = self.zone_map[request.zone]
        tags = _tags(
            self.cluster,
            request.name,
            {"ha-ops/role": request.role, "ha-ops/domain": request.domain, **request.labels},
        )
        instance = self._instance(resource_name, request, az, tags, opts)
        self.instances[request.name] = (request, instance)
        return instance

    def _instance(
        self, resource_name: str, request: NodeRequest, az: str, tags: dict[str, str], opts: pulumi.ResourceOptions
    ) -> aws.ec2.Instance:
        if request.role == "gpu":
            template = self._launch_template(request, opts)
            return aws.ec2.Instance(
                resource_name,
                availability_zone=az,
                placement_group=self.placement_groups[az].name,
                # "$Default", not the template's latest version: a changed template must not replace every GPU
                # node at once; nodes move to it through a driver/image rollout, a few at a time.
                launch_template={"id": template.id, "version": "$Default"},
                tags=tags,
                opts=opts,
            )
        cfg = self.config
        instance_type = cfg.etcd_instance_type if request.role == "etcd" else cfg.controller_instance_type
        return aws.ec2.Instance(
            resource_name,
            ami=self.config.ami,
            instance_type=instance_type,
            availability_zone=az,
            subnet_id=self.subnets[request.leaf].id,
            private_ip=str(request.address) if request.address is not None else None,
            vpc_security_group_ids=[self.security_group.id],
            key_name=self.config.key_name,
            iam_instance_profile=self.instance_profile.name,
            tags=tags,
            opts=opts,
        )

    def _launch_template(self, request: NodeRequest, opts: pulumi.ResourceOptions) -> aws.ec2.LaunchTemplate:
        key = (request.pool or "", request.leaf)
        if key not in self.launch_templates:
            subnet = self.subnets[request.leaf]
            # Network card 0 carries the primary interface (device 0); every other card one more EFA (device 1).
            interfaces = [
                {
                    "network_card_index": card,
                    "device_index": 0 if card == 0 else 1,
                    "interface_type": "efa",
                    "subnet_id": subnet.id,
                    "security_groups": [self.security_group.id],
                    "delete_on_termination": "true",
                }
                for card in range(self.config.efa_interfaces)
            ]
            self.launch_templates[key] = aws.ec2.LaunchTemplate(
                f"{self.cluster}-{request.pool}-leaf{request.leaf}-efa",
                image_id=self.config.ami,
                instance_type=self.config.gpu_instance_type,
                key_name=self.config.key_name,
                iam_instance_profile={"arn": self.instance_profile.arn},
                network_interfaces=interfaces,
                tags=_tags(self.cluster, f"{request.pool}-leaf{request.leaf}", {"ha-ops/pool": request.pool or ""}),
                opts=pulumi.ResourceOptions(parent=opts.parent),
            )
        return self.launch_templates[key]


@dataclass(kw_only=True)
class FsxLustreFactory:
    """One FSx for Lustre file system per storage replica, in its replica's subnet. FSx for Lustre lives in one
    availability zone; the replicas are kept in step through one S3 bucket (a data repository association with
    automatic export and import on each), so a lost zone still leaves the other replica and the bucket."""

    cluster: str
    config: AwsClusterConfig
    subnets: Mapping[int, aws.ec2.Subnet]
    security_group: aws.ec2.SecurityGroup
    bucket: aws.s3.Bucket

    def __call__(self, resource_name: str, replica: StorageReplica, opts: pulumi.ResourceOptions) -> pulumi.Resource:
        fs = aws.fsx.LustreFileSystem(
            resource_name,
            deployment_type="PERSISTENT_2",
            storage_capacity=self.config.lustre_capacity_gib,
            per_unit_storage_throughput=self.config.lustre_throughput_mb_per_tib,
            file_system_type_version="2.15",
            subnet_ids=self.subnets[replica.leaf].id,  # one subnet: the file system lives in its zone
            security_group_ids=[self.security_group.id],
            tags=_tags(self.cluster, replica.name, {"ha-ops/domain": replica.domain}),
            opts=opts,
        )
        events = ["NEW", "CHANGED", "DELETED"]
        aws.fsx.DataRepositoryAssociation(
            f"{resource_name}-s3",
            file_system_id=fs.id,
            file_system_path=LUSTRE_MOUNT_PATH,
            data_repository_path=self.bucket.bucket.apply(lambda b: f"s3://{b}{LUSTRE_MOUNT_PATH}"),
            s3={"auto_export_policy": {"events": events}, "auto_import_policy": {"events": events}},
            opts=pulumi.ResourceOptions(parent=opts.parent),
        )
        return fs
