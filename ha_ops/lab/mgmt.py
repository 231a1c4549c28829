"""The lab's management network: what a real cluster's out-of-band network is to its operator. Every host and
switch has a `mgmt0` on one bridge, and the root namespace (the operator's machine) an interface on it too, so
ssh reaches each node from the operator's machine without nsenter, and no fault on the fabric cuts it off.

The bridge lives in a namespace of its own (`hao-LAB--mgmt`), so removing the lab's namespaces by prefix removes
the whole network, the root namespace's end included. Each lab takes one 169.254.X.0/24 (link-local: never routed
anywhere), chosen free on its first `up` and kept in the lab's folder.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
from pathlib import Path

from ha_ops.errors import LabError
from ha_ops.lab import netns
from ha_ops.lab.context import LabContext
from ha_ops.lab.paths import DEFAULT_ROOT, netns_name

MGMT_IF = "mgmt0"
BRIDGE = "br-mgmt"
UPLINK = "uplink"
FIRST_HOST = 10
# 169.254.169.0/24 holds cloud metadata services (169.254.169.254): never take it, nor the reserved ends.
RESERVED = {0, 169, 255}


def namespace(ctx: LabContext) -> str:
    return netns_name(ctx.name, "-mgmt")  # "hao-LAB--mgmt": no node name starts with "-"


def root_interface(lab: str) -> str:
    """The operator's end, in the root namespace (at most 15 characters, like every interface name)."""
    return "hao-m-" + hashlib.sha256(lab.encode()).hexdigest()[:8]


def _subnet_file(ctx: LabContext) -> Path:
    return ctx.paths.root / "mgmt-subnet"


def _subnets_in_use(ctx: LabContext) -> set[int]:
    """Third octets of 169.254.X.0/24 taken by other labs (their folders) or by any address of the root namespace."""
    used = set()
    base = ctx.paths.root.parent if ctx.paths.root.parent.exists() else DEFAULT_ROOT
    for other in base.glob("*/mgmt-subnet"):
        if other.parent != ctx.paths.root:
            try:
                used.add(int(other.read_text()))
            except ValueError:
                continue
    for entry in json.loads(netns.ip("-j", "-4", "addr", "show").stdout or "[]"):
        for info in entry.get("addr_info", []):
            address = ipaddress.ip_address(info["local"])
            if address in ipaddress.ip_network("169.254.0.0/16"):
                used.add(address.packed[2])
    return used


def subnet(ctx: LabContext) -> ipaddress.IPv4Network:
    """This lab's management subnet, chosen on first use (starting from a point given by the lab's name, so two
    labs rarely probe the same one) and then read back."""
    path = _subnet_file(ctx)
    if not path.exists():
        used = _subnets_in_use(ctx) | RESERVED
        start = int(hashlib.sha256(ctx.name.encode()).hexdigest(), 16) % 256
        free = next((x for i in range(256) if (x := (start + i) % 256) not in used), None)
        if free is None:
            raise LabError("no free 169.254.X.0/24 for the lab's management network")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{free}\n")
    return ipaddress.ip_network(f"169.254.{int(path.read_text())}.0/24")


def nodes(ctx: LabContext) -> list[str]:
    """Every node on the management network, switches first, in a fixed order: it gives each its address."""
    return ctx.switch_names() + ctx.host_names()


def address(ctx: LabContext, node: str) -> ipaddress.IPv4Address:
    names = nodes(ctx)
    if node not in names:
        raise LabError(f"no node {node!r} in lab {ctx.name!r}")
    index = FIRST_HOST + names.index(node)
    if index > 254:
        raise LabError(f"lab {ctx.name!r} has more nodes than its management /24 holds")
    return subnet(ctx).network_address + index


def operator_address(ctx: LabContext) -> ipaddress.IPv4Address:
    """The root namespace's address on the management network."""
    return subnet(ctx).network_address + 1


def _exists(ifname: str, ns: str | None) -> bool:
    return netns.ip("link", "show", "dev", ifname, netns=ns, check=False).ok


def wire(ctx: LabContext) -> None:
    """The bridge, the operator's end and every node's mgmt0; skips what exists (a second call repairs)."""
    ns, prefix = namespace(ctx), subnet(ctx).prefixlen
    netns.create(ns)
    if not _exists(BRIDGE, ns):
        netns.ip("link", "add", "name", BRIDGE, "type", "bridge", netns=ns)
    netns.ip("link", "set", BRIDGE, "up", netns=ns)
    outside = root_interface(ctx.name)
    if not _exists(outside, None):
        netns.ip("link", "add", "name", outside, "type", "veth", "peer", "name", UPLINK, "netns", ns)
    netns.ip("addr", "replace", f"{operator_address(ctx)}/{prefix}", "dev", outside)
    netns.ip("link", "set", outside, "up")
    netns.ip("link", "set", UPLINK, "master", BRIDGE, "up", netns=ns)
    for index, node in enumerate(nodes(ctx)):
        node_ns, port = ctx.netns(node), f"n{index}"
        if not _exists(MGMT_IF, node_ns):
            netns.ip("link", "add", "name", MGMT_IF, "type", "veth", "peer", "name", port, "netns", ns, netns=node_ns)
        netns.ip("link", "set", port, "master", BRIDGE, "up", netns=ns)
        netns.ip("addr", "replace", f"{address(ctx, node)}/{prefix}", "dev", MGMT_IF, netns=node_ns)
        netns.ip("link", "set", MGMT_IF, "up", netns=node_ns)
