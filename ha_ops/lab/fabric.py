"""The lab's leaf-spine fabric: veth links between switch namespaces, FRR (zebra, bgpd, bfdd) with eBGP,
ECMP and BFD, and each host attached to its leaf's bridge. Settings from shared/LAB-NOTES.md."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from ha_ops.lab import netns, netwatch
from ha_ops.lab.context import LabContext, ServiceDef
from ha_ops.util.proc import run

FRR = Path("/usr/lib/frr")
HOST_BRIDGE = "br-hosts"
HOST_IF = "eth0"


def host_port_name(ctx: LabContext, node: str) -> str:
    """The leaf-side end of a host's link; interface names are capped at 15 characters, so use the index."""
    return f"h{ctx.host_names().index(node)}"


def frr_dir(ctx: LabContext, switch: str) -> Path:
    return ctx.node_dir(switch) / "frr"


def _router_id(ctx: LabContext, switch: str) -> str:
    for link in ctx.layout.links:
        if f"spine{link.spine}" == switch:
            return str(link.spine_address)
        if f"leaf{link.leaf}" == switch:
            return str(link.leaf_address)
    raise KeyError(switch)


def render_configs(ctx: LabContext, switch: str) -> dict[str, str]:
    fab = ctx.spec.fabric
    # Required on FRR 8.4: otherwise the kernel keeps one ECMP path after a link flap.
    zebra = f"hostname {switch}\nno zebra nexthop kernel enable\n"
    bfdd = (
        "bfd\n profile fabric\n"
        f"  receive-interval {fab.bfd_interval_ms}\n  transmit-interval {fab.bfd_interval_ms}\n"
        f"  detect-multiplier {fab.bfd_multiplier}\n exit\nexit\n"
    )
    if switch.startswith("spine"):
        index = int(switch.removeprefix("spine"))
        asn = next(s.asn for s in ctx.layout.spines if s.index == index)
        peers = [str(lk.leaf_address) for lk in ctx.layout.links if lk.spine == index]
        networks: list[str] = []
    else:
        index = int(switch.removeprefix("leaf"))
        leaf = ctx.layout.leaf(index)
        asn = leaf.asn
        peers = [str(lk.spine_address) for lk in ctx.layout.links if lk.leaf == index]
        networks = [str(leaf.subnet)]
    lines = [
        "frr defaults datacenter",
        f"hostname {switch}",
        f"router bgp {asn}",
        f" bgp router-id {_router_id(ctx, switch)}",
        " no bgp ebgp-requires-policy",
        " bgp bestpath as-path multipath-relax",
        " neighbor FABRIC peer-group",
        " neighbor FABRIC remote-as external",
        " neighbor FABRIC timers 3 9",
        " neighbor FABRIC timers connect 1",
        " neighbor FABRIC bfd",
        " neighbor FABRIC bfd profile fabric",
    ]
    lines += [f" neighbor {peer} peer-group FABRIC" for peer in peers]
    lines.append(" address-family ipv4 unicast")
    lines += [f"  network {net}" for net in networks]
    lines.append(f"  maximum-paths {16 if fab.ecmp else 1}")
    lines += [" exit-address-family", "exit"]
    return {"zebra.conf": zebra, "bgpd.conf": "\n".join(lines) + "\n", "bfdd.conf": bfdd, "vtysh.conf": ""}


def prepare(ctx: LabContext) -> None:
    for switch in ctx.switch_names():
        directory = frr_dir(ctx, switch)
        directory.mkdir(parents=True, exist_ok=True)
        for name, text in render_configs(ctx, switch).items():
            (directory / name).write_text(text)
        # FRR daemons drop to the frr user; their files must be its own.
        shutil.chown(directory, "frr", "frr")
        for path in directory.iterdir():
            shutil.chown(path, "frr", "frr")


def _daemon(ctx: LabContext, switch: str, daemon: str) -> ServiceDef:
    d = frr_dir(ctx, switch)
    argv = [
        str(FRR / daemon),
        "-f", str(d / f"{daemon}.conf"),
        "-i", str(d / f"{daemon}.pid"),
        "-z", str(d / "zserv.api"),
        "--vty_socket", str(d),
        "-P", "0",
        "--log", f"file:{d / (daemon + '.log')}",
    ]  # fmt: skip
    if daemon == "bfdd":
        argv += ["--bfdctl", str(d / "bfdd.sock")]
    return ServiceDef(switch, daemon, argv, ctx.node_dir(switch) / "log" / f"{daemon}.out")


def zebra_services(ctx: LabContext) -> list[ServiceDef]:
    return [_daemon(ctx, s, "zebra") for s in ctx.switch_names()]


def routing_services(ctx: LabContext) -> list[ServiceDef]:
    return [_daemon(ctx, s, d) for s in ctx.switch_names() for d in ("bfdd", "bgpd")]


def netwatch_services(ctx: LabContext) -> list[ServiceDef]:
    """Per host, what its network manager would do: the default route back when the uplink comes up."""
    script = str(Path(netwatch.__file__))
    services = []
    for n in ctx.layout.nodes:
        argv = [sys.executable, "-IS", script, HOST_IF, str(ctx.layout.leaf(n.leaf).gateway)]
        services.append(ServiceDef(n.name, "netwatch", argv, ctx.node_dir(n.name) / "log" / "netwatch.log"))
    return services


def zserv_ready(ctx: LabContext, switch: str) -> bool:
    return (frr_dir(ctx, switch) / "zserv.api").is_socket()


def _link_exists(ns: str, ifname: str) -> bool:
    return netns.ip("link", "show", "dev", ifname, netns=ns, check=False).ok


def wire(ctx: LabContext) -> None:
    """Create every link, address and route; skips what exists, so a second call repairs only what is missing."""
    for switch in ctx.switch_names():
        ns = ctx.netns(switch)
        for key in ("net.ipv4.ip_forward=1", "net.ipv4.fib_multipath_hash_policy=1"):
            k, v = key.split("=")
            netns.sysctl(ns, k, v)
        netns.sysctl(ns, "net.ipv4.conf.all.ignore_routes_with_linkdown", "1")
    for link in ctx.layout.links:
        spine_ns, leaf_ns = ctx.netns(f"spine{link.spine}"), ctx.netns(f"leaf{link.leaf}")
        if not _link_exists(spine_ns, link.spine_ifname):
            netns.ip("link", "add", "name", link.spine_ifname, "type", "veth",
                     "peer", "name", link.leaf_ifname, "netns", leaf_ns, netns=spine_ns)  # fmt: skip
        for ns, ifname, addr in (
            (spine_ns, link.spine_ifname, link.spine_address),
            (leaf_ns, link.leaf_ifname, link.leaf_address),
        ):
            netns.ip("addr", "replace", f"{addr}/31", "dev", ifname, netns=ns)
            netns.ip("link", "set", ifname, "up", netns=ns)
    for leaf in ctx.layout.leaves:
        ns = ctx.netns(leaf.name)
        if not _link_exists(ns, HOST_BRIDGE):
            netns.ip("link", "add", "name", HOST_BRIDGE, "type", "bridge", netns=ns)
        netns.ip("addr", "replace", f"{leaf.gateway}/24", "dev", HOST_BRIDGE, netns=ns)
        netns.ip("link", "set", HOST_BRIDGE, "up", netns=ns)
    for node in ctx.layout.nodes:
        host_ns, leaf = ctx.netns(node.name), ctx.layout.leaf(node.leaf)
        leaf_ns, port = ctx.netns(leaf.name), host_port_name(ctx, node.name)
        if not _link_exists(host_ns, HOST_IF):
            netns.ip(
                "link",
                "add",
                "name",
                HOST_IF,
                "type",
                "veth",
                "peer",
                "name",
                port,
                "netns",
                leaf_ns,
                netns=host_ns,
            )
        netns.ip("link", "set", port, "master", HOST_BRIDGE, "up", netns=leaf_ns)
        netns.ip("addr", "replace", f"{node.address}/24", "dev", HOST_IF, netns=host_ns)
        netns.ip("link", "set", HOST_IF, "up", netns=host_ns)
        netns.ip("route", "replace", "default", "via", str(leaf.gateway), netns=host_ns)


def vtysh(ctx: LabContext, switch: str, command: str, timeout: float = 5.0) -> str:
    d = frr_dir(ctx, switch)
    return run(["vtysh", "--vty_socket", str(d), "--config_dir", str(d), "-c", command], timeout=timeout).stdout


def bgp_peers(ctx: LabContext, switch: str) -> dict[str, str]:
    """Peer address -> BGP state, as bgpd reports it."""
    data = json.loads(vtysh(ctx, switch, "show bgp summary json") or "{}")
    peers = data.get("ipv4Unicast", {}).get("peers", {})
    return {addr: info.get("state", "?") for addr, info in peers.items()}


def ecmp_paths(ctx: LabContext, leaf: str, prefix: str) -> int:
    """How many next hops the kernel of `leaf` has for `prefix` (0 if no route)."""
    out = netns.ip("-j", "route", "show", prefix, netns=ctx.netns(leaf), check=False).stdout
    routes = json.loads(out or "[]")
    if not routes:
        return 0
    route = routes[0]
    return len(route.get("nexthops", [])) or (1 if route.get("gateway") else 0)


def fabric_problems(ctx: LabContext) -> list[str]:
    """Empty when every BGP session is up and every leaf has all its ECMP paths to every other leaf."""
    problems = []
    for switch in ctx.switch_names():
        try:
            peers = bgp_peers(ctx, switch)
        except Exception as exc:
            problems.append(f"{switch}: bgpd not answering ({exc})")
            continue
        expected = sum(1 for lk in ctx.layout.links if switch in (f"spine{lk.spine}", f"leaf{lk.leaf}"))
        established = sum(1 for state in peers.values() if state == "Established")
        if established < expected:
            problems.append(f"{switch}: {established}/{expected} BGP sessions established")
    want = ctx.spec.fabric.uplinks_per_leaf if ctx.spec.fabric.ecmp else 1
    for leaf in ctx.layout.leaves:
        for other in ctx.layout.leaves:
            if other.index == leaf.index:
                continue
            paths = ecmp_paths(ctx, leaf.name, str(other.subnet))
            if paths < want:
                problems.append(f"{leaf.name}: {paths}/{want} paths to {other.subnet}")
    return problems
