"""The concrete layout derived from a ClusterSpec: which host sits on which leaf, every address, every link.

Pure and deterministic: the lab, the inventory and the Pulumi programs all place hosts through this module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv4Network
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ha_ops.cluster.power import BmcConfig
    from ha_ops.spec.model import ClusterSpec

SPINE_ASN = 65000
LEAF_ASN_BASE = 65100
FIRST_HOST_OFFSET = 10  # .1 is the leaf gateway; .2-.9 stay free for infrastructure
MFSMASTER_OFFSET = 5  # the MooseFS master's service address in its leaf's subnet


@dataclass(frozen=True)
class SpineLayout:
    index: int
    name: str
    asn: int


@dataclass(frozen=True)
class LeafLayout:
    index: int
    name: str
    asn: int
    subnet: IPv4Network
    gateway: IPv4Address


@dataclass(frozen=True)
class LinkLayout:
    """A spine-leaf point-to-point /31. Interface names are unique within each switch."""

    spine: int
    leaf: int
    spine_address: IPv4Address
    leaf_address: IPv4Address

    @property
    def spine_ifname(self) -> str:
        return f"to-leaf{self.leaf}"

    @property
    def leaf_ifname(self) -> str:
        return f"to-spine{self.spine}"


@dataclass(frozen=True)
class NodeLayout:
    name: str
    roles: tuple[str, ...]
    domain: str
    leaf: int
    address: IPv4Address
    pool: str | None = None
    gpus: int = 0
    gpu_model: str = ""
    cpus: int = 2
    memory_mb: int = 1024
    spare: bool = False
    bmc: BmcConfig | None = None


@dataclass(frozen=True)
class Layout:
    spines: list[SpineLayout]
    leaves: list[LeafLayout]
    links: list[LinkLayout]
    nodes: list[NodeLayout]
    problems: list[str] = field(default_factory=list)
    # Addresses that move between hosts (e.g. "mfsmaster": the MooseFS master's), from the infrastructure range.
    service_addresses: dict[str, IPv4Address] = field(default_factory=dict)

    def node(self, name: str) -> NodeLayout:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)

    def leaf(self, index: int) -> LeafLayout:
        return self.leaves[index - 1]

    def nodes_with_role(self, role: str) -> list[NodeLayout]:
        return [n for n in self.nodes if role in n.roles]


def leaf_for_domain(spec: ClusterSpec, domain: str) -> int:
    for i, dom in enumerate(spec.failure_domains):
        if dom.name == domain:
            return dom.leaf if dom.leaf is not None else i % spec.fabric.leaves + 1
    raise KeyError(domain)


def subnet_for_domain(spec: ClusterSpec, leaves: list[LeafLayout], domain: str) -> IPv4Network:
    """Where the domain's hosts have their addresses: an existing cluster's subnet, or the domain's leaf's /24."""
    leaf = leaf_for_domain(spec, domain)  # KeyError for a domain the spec lacks (an unvalidated spec)
    subnet = next(d.subnet for d in spec.failure_domains if d.name == domain)
    return subnet if subnet is not None else leaves[leaf - 1].subnet


def compute_layout(spec: ClusterSpec) -> Layout:
    fab = spec.fabric
    base = int(spec.network.host_cidr.network_address)
    spines = [SpineLayout(i, f"spine{i}", SPINE_ASN) for i in range(1, fab.spines + 1)]
    leaves = []
    for j in range(1, fab.leaves + 1):
        subnet = IPv4Network((base + (j - 1) * 256, 24))
        leaves.append(LeafLayout(j, f"leaf{j}", LEAF_ASN_BASE + j, subnet, subnet.network_address + 1))

    links = []
    fabric_base = int(spec.network.fabric_cidr.network_address)
    for leaf in leaves:
        for k in range(fab.uplinks_per_leaf):
            spine = (leaf.index - 1 + k) % fab.spines + 1
            n = len(links)
            links.append(
                LinkLayout(spine, leaf.index, IPv4Address(fabric_base + 2 * n), IPv4Address(fabric_base + 2 * n + 1))
            )

    # (name, roles, domain, address, extra, where): `where` is the spec field that names the host, for problems.
    wanted: list[tuple[str, tuple[str, ...], str, IPv4Address | None, dict, str]] = []
    for i, host in enumerate(spec.controllers.hosts):
        wanted.append((host.name, ("controller",), host.domain, host.address, {"bmc": host.bmc},
                       f"controllers.hosts[{i}]"))  # fmt: skip
    mon = spec.monitoring.host
    wanted.append((mon.name, ("monitoring",), mon.domain, mon.address, {"bmc": mon.bmc}, "monitoring.host"))
    if spec.storage:
        for role in ("master", "metalogger"):
            host = getattr(spec.storage, role)
            if host is not None:
                wanted.append((host.name, (f"storage_{role}",), host.domain, host.address, {"bmc": host.bmc},
                               f"storage.{role}"))  # fmt: skip
        for i, host in enumerate(spec.storage.hosts):
            wanted.append((host.name, ("chunkserver",), host.domain, host.address, {"bmc": host.bmc},
                           f"storage.hosts[{i}]"))  # fmt: skip
    for p, pool in enumerate(spec.pools):
        first_spare = pool.count - pool.spare_count
        for k, (name, domain) in enumerate(zip(pool.node_names(), pool.node_domains(), strict=True)):
            listed = pool.nodes[k] if pool.nodes else None
            extra = {
                "pool": pool.name,
                "gpus": pool.gpus_per_node,
                "gpu_model": pool.gpu_model,
                "cpus": pool.cpus_per_node,
                "memory_mb": pool.memory_mb,
                "spare": listed.spare if listed is not None else k >= first_spare,
                "bmc": listed.bmc if listed is not None else None,
            }
            address = listed.address if listed is not None else None
            where = f"pools[{p}].nodes[{k}]" if listed is not None else f"pools[{p}]"
            wanted.append((name, ("gpu",), domain, address, extra, where))

    problems: list[str] = []
    taken: dict[IPv4Address, str] = {}
    for leaf in leaves:
        taken[leaf.gateway] = f"{leaf.name} gateway"
    master_spec = spec.storage.master if spec.storage is not None and spec.storage.kind == "moosefs" else None
    if master_spec is not None:  # the address that moves with the master role: no host may have it
        master_subnet = subnet_for_domain(spec, leaves, master_spec.domain)
        taken[master_subnet.network_address + MFSMASTER_OFFSET] = "the MooseFS master's service address"
    for name, _roles, domain, address, _extra, where in wanted:
        subnet = subnet_for_domain(spec, leaves, domain)
        existing = spec.domain(domain).subnet is not None
        if address is None:
            if existing:
                problems.append(f"{where}.address: {name} is in {domain}, an existing subnet ({subnet}): give its "
                                "address")  # fmt: skip
            continue
        whose = f"{domain}'s subnet" if existing else f"leaf{leaf_for_domain(spec, domain)}'s subnet"
        if address not in subnet or address in (subnet.network_address, subnet.broadcast_address):
            problems.append(f"{where}.address: {address} ({name}) is not a host address of {whose} {subnet}")
        elif address in taken:
            problems.append(f"{where}.address: {address} ({name}) collides with {taken[address]}")
        else:
            taken[address] = name

    next_free = {leaf.index: FIRST_HOST_OFFSET for leaf in leaves}
    full: set[int] = set()
    nodes = []
    for name, roles, domain, address, extra, _where in wanted:
        leaf_index = leaf_for_domain(spec, domain)
        leaf = leaves[leaf_index - 1]
        if address is None:
            while True:
                offset = next_free[leaf_index]
                if offset >= 255:
                    if leaf_index not in full:
                        full.add(leaf_index)
                        problems.append(
                            f"{leaf.name}: more hosts than its /24 subnet holds (automatic addresses run "
                            f".{FIRST_HOST_OFFSET}-.254); spread the failure domains over more leaves"
                        )
                    address = leaf.subnet.broadcast_address
                    break
                candidate = leaf.subnet.network_address + offset
                next_free[leaf_index] += 1
                if candidate not in taken:
                    address = candidate
                    taken[candidate] = name
                    break
        nodes.append(NodeLayout(name, roles, domain, leaf_index, address, **extra))
    service: dict[str, IPv4Address] = {}
    if spec.storage is not None and spec.storage.kind == "moosefs" and spec.storage.master and spec.storage.metalogger:
        master = next(n for n in nodes if n.name == spec.storage.master.name)
        metalogger = next(n for n in nodes if n.name == spec.storage.metalogger.name)
        master_subnet = subnet_for_domain(spec, leaves, master.domain)
        if master_subnet != subnet_for_domain(spec, leaves, metalogger.domain):
            problems.append(
                f"storage.metalogger: {metalogger.name} is not in the subnet of the master {master.name} "
                f"({master_subnet}); they must share one so that the master's address can move to the metalogger"
            )
        service["mfsmaster"] = master_subnet.network_address + MFSMASTER_OFFSET
    return Layout(spines, leaves, links, nodes, problems, service)


def layout_problems(spec: ClusterSpec) -> list[str]:
    return compute_layout(spec).problems
