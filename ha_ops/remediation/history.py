"""Fleet memory: each node's reliability history, kept in the controller's state (so it survives failovers and
restarts like the rest), and what is derived from it: MTBI per node and per pool, lemon nodes, reliability tiers.
Pure: no I/O; the policy records, the controller publishes, `ha-ops fleet history` reads (docs/fleet.md).

- An incident is one episode out of service: recorded when the policy takes the node out (its cause classified from
  the reason the policy already has), its ladder steps appended as they start, closed when the episode ends: the node
  returned, or held for replacement (by the ladder, or as a lemon).
- Bounded: each node keeps its latest `max_incidents_per_node`, the state at most `max_incidents` in all (the oldest
  dropped first): the state is written at every commit and, on Kubernetes, is one ConfigMap of at most 1 MiB.
- MTBI (mean time between incidents), per node: the time the node was observed within the window (from the window's
  start, or from when its kept history begins: when the history began or the node appeared, or the latest incident
  the bounds dropped, whichever is latest) divided by its incidents in the window. None without an incident: the
  time so far is only a lower bound. Per pool: the pool's node-time observed over its incidents (the fleet's usual
  "MTBF" of operating time over failures), so a pool's figure compares with its nodes'.
- Lemon: at least `lemon.incidents` incidents within `lemon.window_s` (counted from a person's last `repaired` at the
  earliest): at the end of an episode the node is held for replacement instead of being returned.
- Tier: reliable (no incident within the tier window), standard (one), suspect (two or more, or a lemon). Published
  to the scheduler (Slurm's Weight and the feature `reliable`; Kubernetes' label) when it changes.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal

from ha_ops.gpu.xid import describe
from ha_ops.remediation.model import ControllerState, Incident, NodeRecord

if TYPE_CHECKING:
    from ha_ops.remediation.config import Fleet, Lemon

__all__ = ["Incident"]  # (kept in model.py, beside the NodeRecord that holds it; named here too, for callers)

DAY_S = 86400.0
REASON_MAX = 100  # characters of the reason kept with an incident (the state's size: see the module docstring)

Tier = Literal["reliable", "standard", "suspect"]
TIERS: tuple[Tier, ...] = ("reliable", "standard", "suspect")

# XID -> its class, for the cause "xid-<class>": a closed set (a metric's label), from the meanings in ha_ops.gpu.xid.
XID_CLASSES: dict[int, str] = {
    48: "memory", 63: "memory", 64: "memory", 92: "memory", 94: "memory", 95: "memory", 140: "memory",
    61: "firmware", 62: "firmware", 119: "firmware", 120: "firmware",
    69: "engine",
    74: "nvlink",
    79: "off-bus",
    136: "hardware",
    154: "recovery",
}  # fmt: skip
# Every cause an incident may have (the label values of ha_ops_fleet_incidents).
CAUSES: tuple[str, ...] = (
    *sorted({f"xid-{c}" for c in XID_CLASSES.values()} | {"xid-application", "xid-other"}),
    "ecc",
    "thermal",
    "lost",
    "flapping",
    "other",
)

_XID = re.compile(r"\bXID (\d+)")
_ECC = re.compile(r"\becc|row_remap|remapp", re.IGNORECASE)
_THERMAL = re.compile(r"\btemperature\b|thermal|\bhot\b|overheat", re.IGNORECASE)
_GPU_LOST = re.compile(r"\bgpu_lost\b|fallen off the bus")


def xid_class(xid: int) -> str:
    """The class of an XID: its table's application flag, else XID_CLASSES, else `other`."""
    if describe(xid).application:
        return "application"
    return XID_CLASSES.get(xid, "other")


def cause_of(reason: str, lost: bool = False, flap: bool = False) -> str:
    """An incident's cause from what the policy knows when it takes a node out: a lost node is `lost`; one that fails
    again soon after a return (on probation, or within the flap window) is `flapping`; else the reason's text: an XID
    (`xid-<class>`, the first XID named), ECC (uncorrectable errors, row remapping), thermal, a GPU off the bus (the
    fault XID 79 names, as the agent reports it when NVML cannot reach the GPU), or `other` (an alert's summary)."""
    if lost:
        return "lost"
    if flap:
        return "flapping"
    found = _XID.search(reason)
    if found:
        return f"xid-{xid_class(int(found.group(1)))}"
    if _GPU_LOST.search(reason):
        return "xid-off-bus"
    if _ECC.search(reason):
        return "ecc"
    if _THERMAL.search(reason):
        return "thermal"
    return "other"


# --- recording (the policy, at each step of an episode: O(1)) -----------------------------------------------------
def open_incident(rec: NodeRecord) -> Incident | None:
    """The incident of the node's current episode while it is still open (None for one that began before history
    was kept: a state written by an older release)."""
    last = rec.incidents[-1] if rec.incidents else None
    return last if last is not None and last.episode == rec.episode and not last.outcome else None


def record_start(rec: NodeRecord, cause: str, reason: str, now: float, action: str, max_per_node: int) -> Incident:
    """A new episode began (rec.episode already counts it)."""
    incident = Incident(cause=cause, at=now, episode=rec.episode, reason=reason[:REASON_MAX], actions=[action])
    rec.incidents.append(incident)
    rec.touch()  # (in place: node_records.py writes only records that say they changed)
    _drop(rec, len(rec.incidents) - max_per_node)
    return incident


def _drop(rec: NodeRecord, count: int) -> None:
    """Forget the node's `count` oldest incidents: its history is complete from the latest of them on (MTBI)."""
    if count > 0:
        rec.seen_since = max(rec.seen_since, rec.incidents[count - 1].at)
        del rec.incidents[:count]
        rec.touch()


def note_action(rec: NodeRecord, action: str) -> None:
    incident = open_incident(rec)
    if incident is not None and (not incident.actions or incident.actions[-1] != action):
        incident.actions.append(action)
        rec.touch()


def close(rec: NodeRecord, outcome: str, now: float, action: str | None = None) -> None:
    """The episode ended: the node returned, or is held for replacement."""
    incident = open_incident(rec)
    if incident is None:
        return
    if action:
        note_action(rec, action)
    incident.outcome, incident.ended_at = outcome, now
    rec.touch()


def returned(rec: NodeRecord, now: float) -> None:
    """The node is back in service: its open incident closes as returned; one that closed held for replacement
    (a person reported it repaired since) says so."""
    last = rec.incidents[-1] if rec.incidents else None
    if last is None or last.episode != rec.episode:
        return
    if not last.outcome:
        close(rec, "returned", now, "resume")
    elif last.outcome.startswith("held") and "returned" not in last.outcome:
        last.outcome, last.ended_at = f"{last.outcome}; repaired and returned", now
        last.actions.append("resume")
        rec.touch()


def trim(records: Iterable[NodeRecord], max_total: int) -> int:
    """Keep at most `max_total` incidents in all, dropping the oldest (one pass to count; the rare trim sorts).
    Returns how many were dropped."""
    records = list(records)
    excess = sum(len(r.incidents) for r in records) - max_total
    if excess <= 0:
        return 0
    oldest = sorted((i.at, n) for n, r in enumerate(records) for i in r.incidents)[:excess]
    for n, count in Counter(n for _, n in oldest).items():
        _drop(records[n], count)  # (each node's oldest first)
    return excess


# --- derived: lemons, tiers, MTBI -------------------------------------------------------------------------------
def recent(rec: NodeRecord, now: float, window_s: float) -> list[Incident]:
    """The incidents within the window, counted from the node's last repair at the earliest (a replaced part starts
    afresh for lemons and tiers; MTBI keeps the whole history)."""
    since = max(now - window_s, rec.repaired_at)
    return [i for i in rec.incidents if i.at > since]


def lemon_reason(rec: NodeRecord, lemon: Lemon, now: float) -> str | None:
    """Why the node is a lemon (held for replacement instead of returned), or None."""
    if not lemon.enabled:
        return None
    found = recent(rec, now, lemon.window_s)
    if len(found) < lemon.incidents:
        return None
    causes = ", ".join(i.cause for i in found)
    return f"lemon: {len(found)} incidents in {lemon.window_s / DAY_S:g} days ({causes})"


def is_held_lemon(rec: NodeRecord) -> bool:
    return rec.phase == "awaiting_repair" and rec.rung == "replace" and rec.reason.startswith("lemon:")


def tier_of(rec: NodeRecord, now: float, fleet: Fleet, lemon: Lemon) -> Tier:
    """reliable: no incident within the tier window and not a lemon; standard: one; suspect: two or more, or a lemon
    (held, or one more incident from being one)."""
    if not rec.incidents:
        return "reliable"
    if is_held_lemon(rec) or lemon_reason(rec, lemon, now) is not None:
        return "suspect"
    count = len(recent(rec, now, fleet.tier_window_s))
    return "reliable" if count == 0 else "standard" if count == 1 else "suspect"


def tier_changes(
    records: Iterable[NodeRecord], now: float, fleet: Fleet, lemon: Lemon
) -> list[tuple[NodeRecord, Tier, str]]:
    """The nodes whose tier differs from the one last published: (record, tier, why). A node never published
    (tier "") is as the scheduler's configuration has it, which docs/fleet.md asks to be `reliable`: it is published
    only once it is not (a fleet without incidents changes nothing in the scheduler). One pass; a node without
    incidents costs a comparison."""
    out: list[tuple[NodeRecord, Tier, str]] = []
    for rec in records:
        if not rec.incidents and rec.tier in ("", "reliable"):
            continue
        tier = tier_of(rec, now, fleet, lemon)
        if tier == (rec.tier or "reliable"):
            continue
        count = len(recent(rec, now, fleet.tier_window_s))
        why = f"{count} incident(s) in {fleet.tier_window_s / DAY_S:g} days" + (
            " (a lemon)" if is_held_lemon(rec) or lemon_reason(rec, lemon, now) else ""
        )
        out.append((rec, tier, why))
    return out


def observed_s(rec: NodeRecord, now: float, window_s: float, since: float = 0.0) -> float:
    """How long the node was observed within the window: from the window's start, or from when its kept history
    begins (rec.seen_since: when it appeared, or the latest incident the bounds dropped; else `since`, when the
    history began: ControllerState.history_since), whichever is later."""
    begins = rec.seen_since or since or (rec.incidents[0].at if rec.incidents else now)
    return max(0.0, now - max(now - window_s, begins))


def in_window(rec: NodeRecord, now: float, window_s: float) -> int:
    return sum(1 for i in rec.incidents if i.at > now - window_s)


def node_mtbi(rec: NodeRecord, now: float, window_s: float, since: float = 0.0) -> float | None:
    count = in_window(rec, now, window_s)
    return observed_s(rec, now, window_s, since) / count if count else None


def pool_mtbi(
    records: Iterable[NodeRecord], now: float, window_s: float, since: float = 0.0
) -> dict[str, dict[str, Any]]:
    """pool -> {nodes, incidents (in the window), node_seconds, mtbi_s (None without an incident)}."""
    pools: dict[str, dict[str, Any]] = {}
    for rec in records:
        pool = pools.setdefault(rec.pool, {"nodes": 0, "incidents": 0, "node_seconds": 0.0})
        pool["nodes"] += 1
        pool["incidents"] += in_window(rec, now, window_s)
        pool["node_seconds"] += observed_s(rec, now, window_s, since)
    for pool in pools.values():
        pool["mtbi_s"] = pool["node_seconds"] / pool["incidents"] if pool["incidents"] else None
    return pools


def causes(records: Iterable[NodeRecord]) -> Counter[str]:
    """Incidents kept in the state, by cause."""
    return Counter(i.cause for rec in records for i in rec.incidents)


def report(state: ControllerState, now: float, fleet: Fleet, lemon: Lemon, node: str | None = None) -> dict[str, Any]:
    """What `ha-ops fleet history` shows: per node (or one), its incidents, MTBI, tier and lemon status; per pool
    its MTBI."""
    window = fleet.mtbi_window_s
    nodes: dict[str, Any] = {}
    for rec in state.nodes.values():
        if node is not None and rec.name != node:
            continue
        held = is_held_lemon(rec)
        nodes[rec.name] = {
            "pool": rec.pool,
            "phase": rec.phase.value,
            "tier": tier_of(rec, now, fleet, lemon),
            "published_tier": rec.tier or None,
            "mtbi_s": node_mtbi(rec, now, window, state.history_since),
            "observed_s": observed_s(rec, now, window, state.history_since),
            "incidents_in_window": in_window(rec, now, window),
            "lemon": {
                "held": held,
                "reason": rec.reason if held else lemon_reason(rec, lemon, now),
                "recent": len(recent(rec, now, lemon.window_s)),
                "limit": lemon.incidents,
                "window_s": lemon.window_s,
                "enabled": lemon.enabled,
            },
            "incidents": [i.model_dump(mode="json") for i in rec.incidents],
        }
    return {
        "at": now,
        "mtbi_window_s": window,
        "tier_window_s": fleet.tier_window_s,
        "nodes": nodes,
        "pools": pool_mtbi(state.nodes.values(), now, window, state.history_since),
    }
