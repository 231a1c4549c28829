"""Why a controller that won the lease could not lead: kept, exported and shown, not only logged.

A takeover that cannot load the shared state (damaged from outside: store.py refuses it rather than forget what was
done) releases the lease and tries again at its next lease step, so a state put back (`ha-ops controller state
restore`) is taken up without a restart. Meanwhile no controller leads, and only the log said why. This keeps the
latest failure: `ha_ops_controller_blocked{id,reason,document} 1` (the HaOpsRemediationBlocked alert), the
`blocked` of the controller's description (`ha-ops controller status`), and a log line when it begins or changes,
not at every retry.

A controller stops retrying when another one leads (it no longer wins the lease): a failure older than `fresh_s`
is no longer reported, so a standby does not go on saying it is blocked once its peer leads.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from prometheus_client.core import GaugeMetricFamily

from ha_ops.remediation.lease import LeaseLost
from ha_ops.remediation.store import StateError

METRIC = "ha_ops_controller_blocked"


@dataclass(frozen=True)
class Blocked:
    reason: str  # "state": the shared state cannot be loaded; "takeover": anything else the takeover failed on
    document: str  # where (a file's path, a ConfigMap's namespace/name); "" when the failure names none
    error: str
    since: float  # the first failure of this kind in a row
    last: float  # the latest
    attempts: int

    def describe(self) -> dict[str, Any]:
        return {"reason": self.reason, "document": self.document, "error": self.error, "since": self.since,
                "last": self.last, "attempts": self.attempts}  # fmt: skip


def classify(exc: BaseException, state_document: str) -> tuple[str, str]:
    """(reason, document) for a failed takeover."""
    if isinstance(exc, StateError):
        return "state", state_document
    return "takeover", ""


class BlockedTracker:
    def __init__(self, fresh_s: float) -> None:
        self.fresh_s = fresh_s
        self._lock = threading.Lock()
        self._current: Blocked | None = None

    def failed(self, exc: BaseException, state_document: str, now: float) -> bool:
        """Record a failed takeover; True when it is new (the first, or another reason or error than the last):
        worth a log line, where a retry of the same is not. A lease lost during the takeover blocks nothing (another
        controller took it: it leads)."""
        if isinstance(exc, LeaseLost):
            return True
        reason, document = classify(exc, state_document)
        error = str(exc)
        with self._lock:
            was = self._current
            if was is not None and (was.reason, was.document, was.error) == (reason, document, error):
                self._current = replace(was, last=now, attempts=was.attempts + 1)
                return False
            self._current = Blocked(reason, document, error, now, now, 1)
            return True

    def cleared(self) -> Blocked | None:
        """A takeover succeeded: no longer blocked. Returns what it was blocked by (for a log line), if anything."""
        with self._lock:
            was, self._current = self._current, None
        return was

    def current(self, now: float) -> Blocked | None:
        """The failure, while it is recent (this controller still wins the lease and fails to lead)."""
        with self._lock:
            found = self._current
        return found if found is not None and now - found.last <= self.fresh_s else None

    def describe(self, now: float) -> dict[str, Any] | None:
        found = self.current(now)
        return None if found is None else found.describe()


def blocked_metrics(tracker: BlockedTracker, controller_id: str, now: float) -> Iterator[GaugeMetricFamily]:
    family = GaugeMetricFamily(
        METRIC,
        "1 while this controller wins the lease but cannot lead: reason 'state' (the shared state named by "
        "`document` cannot be loaded) or 'takeover'",
        labels=["id", "reason", "document"],
    )
    blocked = tracker.current(now)
    if blocked is not None:
        family.add_metric([controller_id, blocked.reason, blocked.document], 1.0)
    yield family


def fresh_window(lease_ttl_s: float, lease_renew_s: float) -> float:
    """How long a failure counts as current: a blocked controller retries at every lease step (at least every
    lease_renew_s, or the lease TTL when a peer held it for a moment), so a few of those without one mean it no longer
    tries: another controller leads."""
    return 3.0 * max(lease_ttl_s, lease_renew_s)
