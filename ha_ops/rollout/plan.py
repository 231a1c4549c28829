"""The rollout plan: pure, from node records and a policy to a canary and waves, each split into batches.

Rules, in the order they apply:
- Skipped, with the reason: nodes in the skip list, nodes already down (they still count against max_unavailable),
  nodes already on the target version.
- Least critical first: spares, then lower `criticality`, then fewer running jobs (idle nodes first), then the
  order the nodes were given in.
- The canary (named nodes, a count or a percentage) is spread round-robin over failure domains, taking the least
  critical node of each domain in turn; so are the nodes inside every wave, so that a batch never empties one rack.
- Waves after the canary take sizes from `policy.waves` (a percentage is of the nodes to upgrade, rounded up); a
  list that does not end in "rest" repeats its last size.
- Every batch holds at most max_unavailable minus the nodes already down: a batch is what is out of service at once.

It touches nothing and is fast: 10,000 nodes plan in a few milliseconds (tests/bench/rollout_plan.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ha_ops.errors import SpecError
from ha_ops.rollout.policy import Amount, RolloutPolicy, parse_amount

DRIVER_VERSION = re.compile(r"[0-9]+(\.[0-9]+)*")  # what the gpu_driver role accepts
CANARY = "canary"


@dataclass(frozen=True, slots=True)
class FleetNode:
    """One GPU node as the planner sees it. Live data (down, jobs, versions) comes from the caller."""

    name: str
    domain: str
    zone: str = ""
    spare: bool = False
    down: bool = False
    running_jobs: int = 0
    criticality: int = 0  # higher is more critical (a site's own ranking); 0 by default
    driver_version: str | None = None  # None: unknown (the executor reads it from the node before acting)


@dataclass(frozen=True)
class Wave:
    index: int  # 0 is the canary
    name: str
    size: str  # as the policy wrote it: "2", "5%", "rest", or "named"
    nodes: tuple[str, ...]
    batches: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Plan:
    target_version: str
    fleet: int  # every node given, including skipped and down ones
    max_unavailable: int
    batch_size: int  # max_unavailable minus the nodes already down
    waves: tuple[Wave, ...]
    down: tuple[str, ...]
    skipped: dict[str, str] = field(default_factory=dict)  # node -> why it is not part of the rollout

    @property
    def planned(self) -> int:
        return sum(len(w.nodes) for w in self.waves)

    def to_json(self) -> dict[str, Any]:
        return {
            "target_version": self.target_version,
            "fleet": self.fleet,
            "planned": self.planned,
            "max_unavailable": self.max_unavailable,
            "batch_size": self.batch_size,
            "down": list(self.down),
            "skipped": dict(self.skipped),
            "waves": [
                {
                    "index": w.index,
                    "name": w.name,
                    "size": w.size,
                    "nodes": list(w.nodes),
                    "batches": [list(b) for b in w.batches],
                }
                for w in self.waves
            ],
        }


def _priority(indexed: tuple[int, FleetNode]) -> tuple[int, int, int, int]:
    index, node = indexed
    return (0 if node.spare else 1, node.criticality, node.running_jobs, index)


def spread(nodes: Iterable[FleetNode]) -> list[FleetNode]:
    """Round-robin over failure domains, keeping each domain's own order; domains in order of first appearance."""
    by_domain: dict[str, list[FleetNode]] = {}
    for node in nodes:
        by_domain.setdefault(node.domain, []).append(node)
    columns = list(by_domain.values())
    out: list[FleetNode] = []
    depth = max((len(c) for c in columns), default=0)
    for i in range(depth):
        out.extend(c[i] for c in columns if i < len(c))
    return out


def _batches(names: Sequence[str], size: int) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple(names[i : i + size]) for i in range(0, len(names), size))


def _check_inputs(nodes: Sequence[FleetNode], policy: RolloutPolicy, target: str) -> list[str]:
    problems: list[str] = []
    if not DRIVER_VERSION.fullmatch(target):
        problems.append(f"to: {target!r} is not a driver version (digits and dots, for example 570.86.15)")
    known: set[str] = set()
    for node in nodes:
        if node.name in known:
            problems.append(f"nodes: {node.name!r} is listed twice")
        known.add(node.name)
    problems += [f"skip: {n!r} is not a node of the cluster" for n in policy.skip if n not in known]
    if not isinstance(policy.canary, list) and (count := parse_amount(policy.canary).count or 0) > len(nodes):
        problems.append(f"canary: {count} is more nodes than the cluster's {len(nodes)} (a canary is a few)")
    if isinstance(policy.canary, list):
        by_name = {n.name: n for n in nodes}
        for name in policy.canary:
            node = by_name.get(name)
            if node is None:
                problems.append(f"canary: {name!r} is not a node of the cluster")
            elif name in policy.skip:
                problems.append(f"canary: {name!r} is also in the skip list")
            elif node.down:
                problems.append(f"canary: {name!r} is down")
            elif node.driver_version == target:
                problems.append(f"canary: {name!r} already runs {target}; a canary must change")
    return problems


def plan_rollout(nodes: Sequence[FleetNode], policy: RolloutPolicy, target_version: str) -> Plan:
    """The plan for moving `nodes` to `target_version` under `policy`; SpecError naming each bad field."""
    problems = _check_inputs(nodes, policy, target_version)
    down = tuple(n.name for n in nodes if n.down)
    max_unavailable = policy.max_unavailable_of(len(nodes))
    batch_size = max_unavailable - len(down)
    if batch_size < 1:
        written = f" ({policy.max_unavailable})" if policy.max_unavailable.endswith("%") else ""
        shown = ", ".join(down[:5]) + (f" and {len(down) - 5} more" if len(down) > 5 else "")
        problems.append(
            f"max_unavailable: {len(down)} node(s) are already down ({shown}) and max_unavailable is "
            f"{max_unavailable}{written}: no node could be taken out; raise it or repair them"
        )
    if problems:
        raise SpecError("rollout plan", problems)

    skip = set(policy.skip)
    skipped: dict[str, str] = {}
    eligible: list[tuple[int, FleetNode]] = []
    for index, node in enumerate(nodes):
        if node.name in skip:
            skipped[node.name] = "in the skip list"
        elif node.down:
            skipped[node.name] = "down (counts against max_unavailable)"
        elif node.driver_version == target_version:
            skipped[node.name] = f"already on {target_version}"
        else:
            eligible.append((index, node))
    ordered = [node for _, node in sorted(eligible, key=_priority)]
    total = len(ordered)

    if isinstance(policy.canary, list):
        named = set(policy.canary)
        canary = spread(n for n in ordered if n.name in named)
        canary_size = "named"
    else:
        canary = spread(ordered)[: parse_amount(policy.canary).of(total)]
        canary_size = policy.canary
    if not canary:  # nothing to upgrade (every node is skipped, down or already there)
        return Plan(target_version, len(nodes), max_unavailable, batch_size, (), down, skipped)
    names = tuple(n.name for n in canary)
    waves = [Wave(0, CANARY, canary_size, names, _batches(names, batch_size))]

    taken = set(names)
    rest = [n for n in ordered if n.name not in taken]
    sizes: list[tuple[str, Amount]] = list(zip(policy.waves, policy.wave_sizes(), strict=True))
    position = 0
    while position < len(rest):
        # Past the end of the list the last size repeats ("rest" simply takes everything left).
        text, amount = sizes[min(len(waves) - 1, len(sizes) - 1)]
        count = len(rest) - position if amount.rest else amount.of(total)
        members = spread(rest[position : position + count])
        position += count
        names = tuple(n.name for n in members)
        waves.append(Wave(len(waves), f"wave {len(waves)}", text, names, _batches(names, batch_size)))
    return Plan(target_version, len(nodes), max_unavailable, batch_size, tuple(waves), down, skipped)
