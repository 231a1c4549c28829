"""Machines a component asks for, and where they go: GPU pool nodes come from the spec's layout, other roles
(Slurm controllers, etcd members) are spread over failure domains by `spread_domains`."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from ipaddress import IPv4Address

from ha_ops.spec.layout import Layout, NodeLayout, compute_layout, leaf_for_domain
from ha_ops.spec.model import ClusterSpec, FailureDomain, NodePool


@dataclass(frozen=True)
class NodeRequest:
    """One machine, independent of the provider that builds it (a NodeFactory turns it into a resource)."""

    name: str
    role: str  # gpu, slurm-controller, etcd
    domain: str
    zone: str
    leaf: int
    # The layout's address; None where the spec places no address (etcd members) and the provider picks one.
    address: IPv4Address | None = None
    pool: str | None = None
    gpus: int = 0
    gpu_model: str = ""
    cpus: int = 2
    memory_mb: int = 1024
    spare: bool = False
    labels: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_layout(cls, spec: ClusterSpec, node: NodeLayout, role: str, labels: dict[str, str]) -> NodeRequest:
        """A host of the spec, where and as the layout places it."""
        return cls(name=node.name, role=role, domain=node.domain, zone=spec.domain(node.domain).zone, leaf=node.leaf,
                   address=node.address, pool=node.pool, gpus=node.gpus, gpu_model=node.gpu_model, cpus=node.cpus,
                   memory_mb=node.memory_mb, spare=node.spare, labels=labels)  # fmt: skip


@dataclass(frozen=True)
class PoolPlan:
    pool: str
    nodes: tuple[NodeRequest, ...]

    @property
    def spares(self) -> list[str]:
        return [n.name for n in self.nodes if n.spare]

    def by_domain(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for node in self.nodes:
            out.setdefault(node.domain, []).append(node.name)
        return out

    def by_zone(self) -> dict[str, int]:
        return dict(Counter(n.zone for n in self.nodes))


def find_pool(spec: ClusterSpec, name: str) -> NodePool:
    for pool in spec.pools:
        if pool.name == name:
            return pool
    raise KeyError(f"pool {name!r} is not in the spec (pools: {', '.join(p.name for p in spec.pools)})")


def plan_pool(spec: ClusterSpec, pool_name: str, layout: Layout | None = None) -> PoolPlan:
    """The pool's nodes exactly as the layout places them (round-robin over the pool's domains, spares last)."""
    find_pool(spec, pool_name)
    layout = layout or compute_layout(spec)
    nodes = []
    for node in layout.nodes:
        if node.pool != pool_name:
            continue
        labels = {"ha-ops/pool": pool_name, "ha-ops/spare": str(node.spare).lower()}
        nodes.append(NodeRequest.from_layout(spec, node, "gpu", labels))
    return PoolPlan(pool_name, tuple(nodes))


def spread_domains(spec: ClusterSpec) -> list[FailureDomain]:
    """Failure domains in the order that spreads best: one per zone in turn (zones in spec order), so that the
    first k of them cover as many zones, then as many domains, as k allows."""
    zones: dict[str, list[FailureDomain]] = {}
    for dom in spec.failure_domains:
        zones.setdefault(dom.zone, []).append(dom)
    ordered: list[FailureDomain] = []
    depth = 0
    while len(ordered) < len(spec.failure_domains):
        for members in zones.values():
            if depth < len(members):
                ordered.append(members[depth])
        depth += 1
    return ordered


def spread_requests(spec: ClusterSpec, role: str, prefix: str, count: int) -> list[NodeRequest]:
    """`count` machines of one role named <prefix><n>, placed over `spread_domains` (cycling when there are more
    machines than domains)."""
    domains = spread_domains(spec)
    requests = []
    for i in range(count):
        dom = domains[i % len(domains)]
        requests.append(
            NodeRequest(
                name=f"{prefix}{i + 1}",
                role=role,
                domain=dom.name,
                zone=dom.zone,
                leaf=leaf_for_domain(spec, dom.name),
                labels={"ha-ops/role": role},
            )
        )
    return requests
