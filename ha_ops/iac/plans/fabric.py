"""The physical leaf-spine fabric built for a spec, sized from its hosts and the switch radix.

Each leaf of the spec's layout (one subnet, one BGP AS: what the lab runs as one FRR switch) is built as groups of
`host_links` switches (a redundant pair by default, MLAG/EVPN multihoming): every host has one link to each switch
of its group, so no single leaf switch carries a host alone. A leaf switch spends one port on each spine (the spec
asks for one uplink from every leaf to every spine) and the rest on hosts; a leaf with more hosts than that gets
more groups. Every spine has one port per leaf switch, which bounds a two-tier fabric at `switch_radix` leaf
switches. Pure: the policy checks the plan and the Fabric component creates exactly what it lists.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

from ha_ops.spec.layout import Layout, compute_layout
from ha_ops.spec.model import ClusterSpec

HOST_LINKS = 2  # dual-homed


@dataclass(frozen=True)
class Switch:
    name: str
    tier: Literal["spine", "leaf"]
    asn: int
    leaf: int | None = None  # the layout leaf (subnet) a leaf switch serves
    host_ports: int = 0  # host-facing ports in use


@dataclass(frozen=True)
class Link:
    """`lower` is a host (kind "host") or a leaf switch (kind "uplink"); `upper` the switch above it."""

    lower: str
    upper: str
    kind: Literal["host", "uplink"]


@dataclass(frozen=True)
class FabricPlan:
    radix: int
    spines: tuple[Switch, ...]
    leaves: tuple[Switch, ...]
    links: tuple[Link, ...]
    host_domains: dict[str, str]  # every host of the spec and its failure domain
    problems: tuple[str, ...] = ()  # what this radix cannot build

    def switches(self) -> list[Switch]:
        return [*self.spines, *self.leaves]

    @cached_property
    def homing(self) -> dict[str, frozenset[str]]:
        """Every host and the leaf switches it has a link to."""
        homes: dict[str, set[str]] = {host: set() for host in self.host_domains}
        for link in self.links:
            if link.kind == "host":
                homes.setdefault(link.lower, set()).add(link.upper)
        return {host: frozenset(s) for host, s in homes.items()}

    @cached_property
    def uplinks(self) -> dict[str, frozenset[str]]:
        """Every leaf switch and the spines it has a link to."""
        ups: dict[str, set[str]] = {leaf.name: set() for leaf in self.leaves}
        for link in self.links:
            if link.kind == "uplink":
                ups.setdefault(link.lower, set()).add(link.upper)
        return {leaf: frozenset(s) for leaf, s in ups.items()}

    def domains_cut_off(self, lost: Iterable[str]) -> list[str]:
        """Failure domains with a host that, once the `lost` switches are gone, reaches no spine. Hosts never carry
        traffic for others, so a host is cut off when none of its remaining leaf switches has a remaining spine."""
        gone = set(lost)
        spines = {s.name for s in self.spines} - gone
        alive_leaves = {leaf for leaf, ups in self.uplinks.items() if leaf not in gone and ups & spines}
        cut = {self.host_domains.get(host, host) for host, homes in self.homing.items() if not homes & alive_leaves}
        return sorted(cut)

    def single_points_of_failure(self) -> dict[str, list[str]]:
        """Switches whose loss alone cuts off a failure domain, with the domains they cut off."""
        # Domains already cut off with every switch up are the dual-homing rule's problem, not any one switch's.
        already = set(self.domains_cut_off([]))
        out = {}
        for switch in self.switches():
            if cut := [d for d in self.domains_cut_off([switch.name]) if d not in already]:
                out[switch.name] = cut
        return out

    def oversubscription(self) -> float:
        """Host ports over uplinks on the busiest leaf switch (1.0 is non-blocking)."""
        busiest = max((leaf.host_ports for leaf in self.leaves), default=0)
        return busiest / len(self.spines) if self.spines else math.inf


def _suffix(i: int) -> str:
    """a, b, ..., z, aa, ab, ...: leaf switches of one layout leaf."""
    out = ""
    i += 1
    while i:
        i, rem = divmod(i - 1, 26)
        out = chr(97 + rem) + out
    return out


def plan_fabric(spec: ClusterSpec, layout: Layout | None = None, host_links: int = HOST_LINKS) -> FabricPlan:
    layout = layout or compute_layout(spec)
    radix = spec.fabric.switch_radix
    spines = tuple(Switch(s.name, "spine", s.asn) for s in layout.spines)
    host_ports = radix - len(spines)
    problems = []
    if host_ports < 1:
        problems.append(f"a leaf switch of radix {radix} has no port left for hosts after {len(spines)} spine uplinks")

    leaves: list[Switch] = []
    links: list[Link] = []
    for logical in layout.leaves:
        hosts = [n.name for n in layout.nodes if n.leaf == logical.index]
        groups = max(1, math.ceil(len(hosts) / host_ports)) if host_ports >= 1 else 1
        for g in range(groups):
            members = hosts[g * host_ports : (g + 1) * host_ports] if host_ports >= 1 else []
            names = [f"{logical.name}{_suffix(g * host_links + k)}" for k in range(host_links)]
            for switch in names:
                leaves.append(Switch(switch, "leaf", logical.asn, logical.index, len(members)))
                links += [Link(switch, spine.name, "uplink") for spine in spines]
                links += [Link(host, switch, "host") for host in members]
    if len(leaves) > radix:
        problems.append(
            f"{len(leaves)} leaf switches need {len(leaves)} ports on every spine, more than switch_radix {radix}: "
            "a two-tier fabric this size needs switches with more ports"
        )
    return FabricPlan(
        radix=radix,
        spines=spines,
        leaves=tuple(leaves),
        links=tuple(links),
        host_domains={n.name: n.domain for n in layout.nodes},
        problems=tuple(problems),
    )
