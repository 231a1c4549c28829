"""How the AWS cluster's VPC reaches out and who reaches in: an Internet gateway, per availability zone a small
public subnet with an Elastic IP and a NAT gateway, the route tables that send each zone's leaf subnets out through
their own zone's NAT gateway, an S3 gateway endpoint, and the security group rule for SSH from the operators.

The nodes themselves never get a public address: everything they start (packages, images, SSM) leaves through NAT,
and S3 traffic (checkpoints, Lustre's data repository) through the endpoint, which costs no NAT processing and keeps
working while a NAT gateway is down."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from ipaddress import IPv4Network
from typing import Any

import pulumi
import pulumi_aws as aws

from ha_ops.errors import SpecError
from ha_ops.spec.layout import compute_layout
from ha_ops.spec.model import ClusterSpec

PUBLIC_PREFIX = 28  # the smallest subnet AWS allows: a NAT gateway needs one address, AWS keeps five
ANYWHERE = "0.0.0.0/0"
SSH_PORT = 22


def plan_public_subnets(spec: ClusterSpec, azs: Sequence[str]) -> dict[str, IPv4Network]:
    """One /28 per availability zone (in the order given), taken from the top of `network.host_cidr` downwards:
    the layout fills the range from the bottom (leaf /24s), so the top stays free as the spec grows. A /28 never
    overlaps a leaf's subnet, a domain's existing subnet, a host's address or a service address."""
    layout = compute_layout(spec)
    taken = [leaf.subnet for leaf in layout.leaves] + [d.subnet for d in spec.failure_domains if d.subnet]
    addresses = {n.address for n in layout.nodes} | set(layout.service_addresses.values())
    free = (
        net
        for net in reversed(list(spec.network.host_cidr.subnets(new_prefix=PUBLIC_PREFIX)))
        if not any(net.overlaps(t) for t in taken) and not any(a in net for a in addresses)
    )
    out: dict[str, IPv4Network] = {}
    for az in azs:
        net = next(free, None)
        if net is None:
            raise SpecError(
                f"aws cluster {spec.name!r}",
                [
                    f"network.host_cidr: {spec.network.host_cidr} has no free /{PUBLIC_PREFIX} for the public "
                    f"(NAT) subnet of {az}: {len(azs)} are needed outside the leaf subnets and host addresses"
                ],
            )
        out[az] = net
    return out


def ssh_ingress(admin_cidrs: Sequence[IPv4Network]) -> list[dict[str, Any]]:
    """The security group's SSH rule: from the operators' networks only, none at all without them (operators then
    reach the nodes through SSM Session Manager, or over a peered or VPN network named in admin_cidrs)."""
    if not admin_cidrs:
        return []
    return [
        {
            "protocol": "tcp",
            "from_port": SSH_PORT,
            "to_port": SSH_PORT,
            "cidr_blocks": [str(c) for c in admin_cidrs],
            "description": "SSH from the operators' networks (admin_cidrs)",
        }
    ]


@dataclass(frozen=True)
class ClusterNetwork:
    internet_gateway: aws.ec2.InternetGateway
    public_subnets: dict[str, aws.ec2.Subnet]  # availability zone -> its public /28
    nat_ips: dict[str, aws.ec2.Eip]
    nat_gateways: dict[str, aws.ec2.NatGateway]
    private_route_tables: dict[str, aws.ec2.RouteTable]
    s3_endpoint: aws.ec2.VpcEndpoint


def build_network(
    cluster: str,
    vpc: aws.ec2.Vpc,
    leaf_subnets: Mapping[int, aws.ec2.Subnet],
    leaf_zone: Mapping[int, str],
    public_cidrs: Mapping[str, IPv4Network],
    parent: pulumi.Resource,
) -> ClusterNetwork:
    """Declares the egress of the VPC under `parent`: `public_cidrs` from `plan_public_subnets`, one per zone of
    `leaf_zone` (layout leaf -> availability zone)."""
    child = pulumi.ResourceOptions(parent=parent)
    tags = {"ha-ops/cluster": cluster}
    igw = aws.ec2.InternetGateway(f"{cluster}-igw", vpc_id=vpc.id, tags={"Name": cluster, **tags}, opts=child)
    # An Elastic IP and a NAT gateway need the VPC to have its Internet gateway first.
    after_igw = pulumi.ResourceOptions(parent=parent, depends_on=[igw])

    public_rt = aws.ec2.RouteTable(
        f"{cluster}-public", vpc_id=vpc.id, tags={"Name": f"{cluster}-public", **tags}, opts=child
    )
    # Routes as their own resources, not inline: inline routes would fight the S3 endpoint over the route tables.
    aws.ec2.Route(
        f"{cluster}-public-default",
        route_table_id=public_rt.id,
        destination_cidr_block=ANYWHERE,
        gateway_id=igw.id,
        opts=child,
    )
    public: dict[str, aws.ec2.Subnet] = {}
    eips: dict[str, aws.ec2.Eip] = {}
    nats: dict[str, aws.ec2.NatGateway] = {}
    private_rts: dict[str, aws.ec2.RouteTable] = {}
    # One NAT gateway per zone, each zone's leaves routed through their own: a lost zone (or its NAT gateway)
    # never cuts the other zone's egress, and no traffic crosses zones on its way out.
    for az, cidr in sorted(public_cidrs.items()):
        public[az] = aws.ec2.Subnet(
            f"{cluster}-{az}-public",
            vpc_id=vpc.id,
            cidr_block=str(cidr),
            availability_zone=az,
            map_public_ip_on_launch=False,  # only the NAT gateway lives here, with its Elastic IP
            tags={"Name": f"{cluster}-{az}-public", **tags},
            opts=child,
        )
        aws.ec2.RouteTableAssociation(
            f"{cluster}-{az}-public", subnet_id=public[az].id, route_table_id=public_rt.id, opts=child
        )
        eips[az] = aws.ec2.Eip(
            f"{cluster}-{az}-nat", domain="vpc", tags={"Name": f"{cluster}-{az}-nat", **tags}, opts=after_igw
        )
        nats[az] = aws.ec2.NatGateway(
            f"{cluster}-{az}-nat",
            allocation_id=eips[az].id,  # a VPC Elastic IP's id is its allocation id
            subnet_id=public[az].id,
            connectivity_type="public",
            tags={"Name": f"{cluster}-{az}-nat", **tags},
            opts=after_igw,
        )
        private_rts[az] = aws.ec2.RouteTable(
            f"{cluster}-{az}-private", vpc_id=vpc.id, tags={"Name": f"{cluster}-{az}-private", **tags}, opts=child
        )
        aws.ec2.Route(
            f"{cluster}-{az}-private-default",
            route_table_id=private_rts[az].id,
            destination_cidr_block=ANYWHERE,
            nat_gateway_id=nats[az].id,
            opts=child,
        )
    for leaf, az in sorted(leaf_zone.items()):
        aws.ec2.RouteTableAssociation(
            f"{cluster}-leaf{leaf}-private",
            subnet_id=leaf_subnets[leaf].id,
            route_table_id=private_rts[az].id,
            opts=child,
        )

    # The region names the S3 service; asked of the provider the cluster is built with (its parent's).
    region = aws.get_region(opts=pulumi.InvokeOptions(parent=parent)).region
    s3 = aws.ec2.VpcEndpoint(
        f"{cluster}-s3",
        vpc_id=vpc.id,
        service_name=f"com.amazonaws.{region}.s3",
        vpc_endpoint_type="Gateway",
        route_table_ids=[private_rts[az].id for az in sorted(private_rts)],
        tags={"Name": f"{cluster}-s3", **tags},
        opts=child,
    )
    return ClusterNetwork(igw, public, eips, nats, private_rts, s3)
