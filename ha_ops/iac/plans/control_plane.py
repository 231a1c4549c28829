"""The control plane's placement: the spec's Slurm controllers (primary first) and the etcd members, spread so that
one lost failure domain (or zone, where the spec has several) takes as few of them as possible."""

from __future__ import annotations

from dataclasses import dataclass

from ha_ops.iac.plans.nodes import NodeRequest, spread_requests
from ha_ops.spec.layout import Layout, compute_layout
from ha_ops.spec.model import ClusterSpec

ETCD_MEMBERS = 3
ETCD_PEER_PORT = 2380


@dataclass(frozen=True)
class ControlPlanePlan:
    slurm: tuple[NodeRequest, ...]  # the primary, then the backup
    etcd: tuple[NodeRequest, ...]

    def etcd_initial_cluster(self) -> str:
        """etcd's --initial-cluster value: every member by name and peer URL."""
        return ",".join(f"{m.name}=https://{m.name}:{ETCD_PEER_PORT}" for m in self.etcd)


def plan_control_plane(
    spec: ClusterSpec, etcd_members: int = ETCD_MEMBERS, layout: Layout | None = None
) -> ControlPlanePlan:
    layout = layout or compute_layout(spec)
    slurm = []
    for host in spec.controllers.hosts:
        node = layout.node(host.name)
        slurm.append(NodeRequest.from_layout(spec, node, "slurm-controller", {"ha-ops/role": "slurm-controller"}))
    taken = set(spec.host_names())
    # etcd members are not hosts of the spec; their names must not collide with one (a pool named "etcd").
    prefix = "etcd" if not any(f"etcd{i}" in taken for i in range(1, etcd_members + 1)) else f"{spec.name}-etcd"
    etcd = spread_requests(spec, "etcd", prefix, etcd_members)
    return ControlPlanePlan(tuple(slurm), tuple(etcd))
