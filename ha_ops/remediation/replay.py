"""Best effort: a state rebuilt from an older one and the audit entries written after it (`ha-ops controller state
restore --rebuild-from-audit`, restore.py), for when no snapshot is at the audit log's head.

The log records what was done, not the whole state: each node's phase is set from the last action audited on it, and
a repair under way starts again from its rung (a GPU reset or a reboot of a node out of service is run again, never
skipped). What the log does not hold comes from the base state or is lost: reports, the circuit breaker's window,
bursts, pending intents decided but not yet audited (their nodes' agents report again). Never wrong in the unsafe
direction: a node whose last audited action took it out of service stays out of service, and every intent number
the log names is used up (a new intent never takes the id of one already audited, which would hide it from the log).
"""

from __future__ import annotations

import re
from typing import Any

from ha_ops.remediation.model import ControllerState, Intent, Maintenance, NodePhase, NodeRecord, Rung

INTENT_KINDS = frozenset(
    {"drain", "requeue_jobs", "spare_in", "spare_out", "reset_gpu", "reboot_node", "validate", "resume", "alert"}
)
REPAIRS = {"reset_gpu": Rung.RESET_GPU, "reboot_node": Rung.REBOOT_NODE}
_UNTIL = re.compile(r"^until (\d+(?:\.\d+)?): (.*)$", re.S)


def intent_number(intent_id: str) -> int:
    head = intent_id.partition("-")[0]
    return int(head) if head.isdigit() else 0


def replay(state: ControllerState, entries: list[dict[str, Any]]) -> list[str]:
    """Apply audit entries (in order, those after the state's head) to `state`; returns what could not be applied."""
    skipped: list[str] = []
    for entry in entries:
        what, node_name = str(entry.get("what") or ""), entry.get("node")
        intent_id = entry.get("intent")
        if intent_id:
            state.next_intent = max(state.next_intent, intent_number(str(intent_id)) + 1)
        if what == "breaker_reset":
            state.breaker.open, state.breaker.reason, state.breaker.cordons = False, "", []
            continue
        rec = state.nodes.get(node_name) if isinstance(node_name, str) else None
        if what not in INTENT_KINDS and not what.startswith("maintenance_"):
            continue  # the controller's own entries (lease_step_down, fence_slurmctld, ...): no node's phase
        if rec is None:
            skipped.append(f"seq {entry.get('seq')}: {what} on {node_name!r}, a node the base state does not know")
            continue
        if what.startswith("maintenance_"):
            _maintenance(rec, what, entry)
            continue
        _action(state, rec, what, entry, str(intent_id) if intent_id else None)
    return skipped


def _action(state: ControllerState, rec: NodeRecord, what: str, entry: dict[str, Any], intent_id: str | None) -> None:
    at = float(entry.get("at") or 0.0)
    why = str(entry.get("why") or "")
    if what == "drain" and not rec.phase.out_of_service:
        rec.episode += 1  # a new episode, as take_out_of_service begins one
        rec.phase, rec.since, rec.reason, rec.rung = NodePhase.CORDONED, at, why, None
    elif what == "reboot_node" and why.startswith("fence:"):
        pass  # a lost node's fence: its drain (audited too) took it out
    elif what in REPAIRS:
        # Drained, the rung to run again: the policy starts it (and its validation) at its next tick.
        rec.phase, rec.since, rec.rung, rec.rung_started = NodePhase.DRAINED, at, REPAIRS[what], 0.0
    elif what == "resume":
        rec.phase, rec.since, rec.reason, rec.rung = NodePhase.RETURNED, at, "", None
        rec.returns = [*rec.returns, at]
    elif what == "spare_in":
        rec.in_main = True
    elif what == "spare_out":
        rec.in_main, rec.spare_for = False, None
    if intent_id is None:
        return
    result = str(entry.get("after") or "").rpartition("; ")[2]
    known = next((i for i in state.intents if i.id == intent_id), None)
    if known is not None:
        known.status, known.result = "done", result
    elif what in ("drain", "requeue_jobs"):  # the drain's and the requeue's: what moves a cordoned node on
        done = Intent(id=intent_id, node=rec.name, kind=what, why=why, args={"episode": rec.episode},  # type: ignore[arg-type]
                      status="done", created_at=at, result=result)  # fmt: skip
        state.intents.append(done)


def _maintenance(rec: NodeRecord, what: str, entry: dict[str, Any]) -> None:
    if what == "maintenance_end":
        rec.maintenance = None
        return
    found = _UNTIL.match(str(entry.get("after") or ""))
    if what == "maintenance_start" and found:
        at = float(entry.get("at") or 0.0)
        by = str(entry.get("why") or "").rpartition("(by ")[2].rstrip(")") or "an operator"
        rec.maintenance = Maintenance(until=float(found[1]), reason=found[2], by=by, since=at)
