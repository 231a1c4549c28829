"""The remediation policy's building blocks (policy.py, episodes.py): the outcome of a decision, intents, a node's
phase, spares, the ladder's starting rung, and maintenance windows. No I/O."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ha_ops.remediation.config import ControllerConfig
from ha_ops.remediation.model import (
    ControllerState,
    Intent,
    IntentKind,
    Maintenance,
    NodePhase,
    NodeRecord,
    Rung,
)

DRAIN_RETRY_S = 10.0
REASON_GPU = re.compile(r"^GPU(\d+) ")  # an agent's verdict reason starts with the GPU it is about

RUNG_FOR_ACTION = {
    "drain": Rung.RESET_GPU,
    "reset_gpu": Rung.RESET_GPU,
    "reboot_node": Rung.REBOOT_NODE,
    "replace": Rung.REPLACE,
}


@dataclass
class Outcome:
    """What one decision did: intents added, and notes for the log (and the HTTP answer)."""

    intents: list[Intent] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    ignored: str = ""
    burst: str | None = None  # a burst of application XIDs began: its id (the controller names its job)
    ended_maintenance: list[tuple[str, Maintenance]] = field(default_factory=list)  # expired windows (audited)


def make_intent(
    state: ControllerState, rec: NodeRecord, kind: IntentKind, why: str, now: float, token: int, **args: Any
) -> Intent:
    intent = Intent(
        id=f"{state.next_intent:08d}-{rec.name}-{kind}",
        node=rec.name,
        kind=kind,
        why=why,
        args={"episode": rec.episode, **args},
        created_at=now,
        token=token,
    )
    state.next_intent += 1
    state.intents.append(intent)
    return intent


def set_phase(rec: NodeRecord, phase: NodePhase, now: float, reason: str | None = None) -> None:
    rec.phase = phase
    rec.since = now
    if reason is not None:
        rec.reason = reason


def free_spares(state: ControllerState, pool: str) -> list[NodeRecord]:
    """The pool's spares that may stand in: healthy, outside the main partition, for nobody yet, and not in a
    maintenance window (a rollout changing a spare's driver has it drained)."""
    return [
        r
        for r in state.nodes.values()
        if r.pool == pool and r.spare and not r.in_main and r.spare_for is None and r.phase == NodePhase.HEALTHY
        and r.maintenance is None
    ]  # fmt: skip


def recent_returns(rec: NodeRecord, config: ControllerConfig, now: float) -> list[float]:
    return [t for t in rec.returns if now - t < config.ladder.flap_window_s]


def starting_rung(rec: NodeRecord, action: str, config: ControllerConfig, now: float) -> Rung:
    rung = RUNG_FOR_ACTION.get(action, Rung.RESET_GPU)
    flaps = recent_returns(rec, config, now)
    if len(flaps) >= config.ladder.max_flaps:
        return Rung.REPLACE
    on_probation = rec.phase == NodePhase.RETURNED
    if (flaps or on_probation) and rec.rung is not None:
        previous_next = rec.rung.next()
        rung = max(rung, previous_next, key=list(Rung).index)
    return rung


def maintenance_of(rec: NodeRecord, now: float) -> Maintenance | None:
    """The node's maintenance window while it lasts (an expired one is closed by the next tick)."""
    return rec.maintenance if rec.maintenance is not None and now < rec.maintenance.until else None


def start_maintenance(
    state: ControllerState, nodes: list[str], reason: str, ttl_s: float, by: str, now: float
) -> dict[str, Maintenance | None]:
    """Open (or extend) a maintenance window on each node; returns each node's window before. ValueError naming the
    first node that is unknown or that ha-ops itself has out of service (its repair is not the rollout's)."""
    for name in nodes:
        rec = state.nodes.get(name)
        if rec is None:
            raise ValueError(f"unknown node {name!r}")
        if rec.phase.out_of_service and rec.maintenance is None:
            raise ValueError(f"{name} is {rec.phase.value} by ha-ops ({rec.reason}): no maintenance window on it")
    before = {}
    for name in nodes:
        rec = state.nodes[name]
        before[name] = rec.maintenance
        since = rec.maintenance.since if rec.maintenance is not None else now
        rec.maintenance = Maintenance(until=now + ttl_s, reason=reason, by=by, since=since)
    return before


def end_maintenance(state: ControllerState, nodes: list[str]) -> dict[str, Maintenance]:
    """Close the windows of these nodes (unknown nodes and nodes without one: nothing to do); returns those closed.
    The node's next report is acted on as usual: a node still failing after a rollback is remediated then."""
    closed = {}
    for name in nodes:
        rec = state.nodes.get(name)
        if rec is not None and rec.maintenance is not None:
            closed[name], rec.maintenance = rec.maintenance, None
    return closed
