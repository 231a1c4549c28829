"""The leader's term: its state and lease token under the one state lock, the audit entries of the term, and the
group-commit writer that puts both on the shared storage.

The rules every other part relies on, kept here and nowhere else:
- one lock (`lock`) for the state: decisions are made under it, writes run outside it;
- audit entries are chained under the lock (the state records the log's head) and written before the state that
  records them;
- every write is fenced by the lease token it was taken under (a deposed leader writes nothing);
- an intent is acted on only once the state holding it is written (`durable`): a successor knows of every action
  begun.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, NamedTuple

from ha_ops.remediation import policy
from ha_ops.remediation.audit import AuditLog, Prepared, head_mac
from ha_ops.remediation.lease import LeaderLease, LeaseLost, RecordedHead
from ha_ops.remediation.model import ControllerState, Intent
from ha_ops.remediation.node_records import NodeWriter, Stored
from ha_ops.remediation.snapshots import SnapshotRing
from ha_ops.remediation.store import StateStore, core_text

log = logging.getLogger(__name__)


class Snapshot(NamedTuple):
    """A state to write: its sequence number, its text (the core with its journal: node_records.py), the lease
    token it was taken under, the decisions it holds, the intent numbers it holds (every one below
    `intents_below`), and the journal to compact into the shards once it is written (None: not due)."""

    seq: int
    text: str
    token: int
    decisions: int
    intents_below: int
    compact: dict[str, str] | None = None
    preload: dict[str, str] | None = None  # records stored nowhere yet: into their shards before this core
    head: RecordedHead | None = None  # the audit head this state records, for the lease once the state is written


def intent_number(intent: Intent) -> int:
    """The intent's number (state.next_intent when it was made), from its id \"00000042-gpu3-drain\"."""
    head = intent.id.partition("-")[0]
    return int(head) if head.isdigit() else 0


class Term:
    def __init__(
        self,
        owner: str,
        lease: LeaderLease,
        store: StateStore,
        audit: AuditLog,
        snapshots: SnapshotRing,
        clock: Callable[[], float],
    ) -> None:
        self.owner = owner  # this controller's id, in every audit entry's `who`
        self.lease = lease
        self.store = store
        self.audit_log = audit
        self.snapshots = snapshots
        self.clock = clock
        self.lock = threading.RLock()
        self.state: ControllerState | None = None
        self.token: int | None = None
        self._saved = ""  # the state as last written by this controller
        self._unaudited: list[dict[str, Any]] = []  # this term's audit entries, for the next write
        # Audit entries chained under the state lock (the state records their head) and written outside it, in
        # order, before the state that records them (write).
        self._audit_queue: deque[Prepared] = deque()
        self._flushing = threading.Lock()  # held by a background flush of the actions' results
        self._commit_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._snapshots = 0  # snapshots taken, and the last written (a write never goes back to an older one)
        self._written = 0
        self._decisions = 0  # decisions made (counted under the lock), and how many of them are written
        self._committed = 0
        # Intents numbered below this are in the shared state as written: only those may be acted on (a successor
        # must know of every action begun). Intent numbers only grow (state.next_intent).
        self._durable_below = 0
        self._arrival: Future[None] = Future()  # resolved by wake (new intents); replaced once seen
        self._arrival_lock = threading.Lock()
        self.on_intents: Callable[[], None] = lambda: None  # the decision loop's own wake-up (app.py)
        self.nodes = NodeWriter()  # which node records are stored where (node_records.py)
        self._unsnapshotted = False  # the last state written is in no snapshot yet

    # --- the term's bounds ------------------------------------------------------------------------------------
    def begin(self, token: int, state: ControllerState, stored: Stored) -> None:
        """Under the lock: lead with `state` (its node records `stored` so) under `token`. What a past term left
        unwritten is not carried over: the log was read afresh, and the predecessor's unwritten actions are checked
        again by running them."""
        self.token, self.state, self._saved = token, state, ""
        self.nodes.begin(state, stored)
        self._durable_below = 0
        self._audit_queue.clear()
        self._unaudited = []

    def end(self) -> None:
        self.token, self.state = None, None

    def leading(self) -> tuple[ControllerState, int]:
        """Under the lock: the state and token, or LeaseLost when this controller does not lead."""
        if self.state is None or self.token is None:
            raise LeaseLost("not the leader")
        return self.state, self.token

    def who(self, token: int) -> str:
        return f"{self.owner} (token {token})"

    def audit(
        self,
        token: int,
        what: str,
        node: str | None,
        why: str,
        before: Any,
        after: Any,
        *,
        intent: str | None = None,
        at: float | None = None,
    ) -> None:
        """An audit entry of this term, written with the next state (the one builder of entries)."""
        entry = {"at": self.clock() if at is None else at, "who": self.who(token), "what": what, "node": node,
                 "why": why, "before": before, "after": after, "intent": intent}  # fmt: skip
        with self.lock:
            self._unaudited.append(entry)

    def audited_intents(self) -> set[str]:
        """Under the lock: the intents audited, as read at the start of the term and kept for the next write."""
        return self.audit_log.intents_as_written() | {e["intent"] for e in self._unaudited if e.get("intent")}

    # --- writing ---------------------------------------------------------------------------------------------
    def save(self, defer_preload: bool = False) -> None:
        """Write the state now (under the lock); `defer_preload`: the core alone, the records stored nowhere yet
        left to the next write (a new leader of 25,000 nodes on Kubernetes: 256 shards of fresh records take the
        API server many seconds, longer than the lease allows a takeover)."""
        self._write(self._snapshot(defer_preload))

    def _snapshot(self, defer_preload: bool = False) -> Snapshot | None:
        """Under the lock: the state to write, or None when it is written already. Finished intents are audited
        first: the state records the log's head."""
        assert self.state is not None and self.token is not None
        if self._unaudited:
            batch = self.audit_log.prepare(self._unaudited)  # chained here; written by _write, before this state
            self._unaudited = []
            if batch is not None:
                self._audit_queue.append(batch)
        # The log as this leader writes it: it read the log when its term began, and nobody else writes while it
        # leads (every write is fenced); asking the documents would read the whole log at every save.
        head = self.audit_log.prepared_head()
        self.state.audit_seq, self.state.audit_hash = head.seq, head.hash
        key = self.audit_log.key
        self.state.audit_head_mac = head_mac(head, key) if key is not None else ""
        recorded = RecordedHead(head.seq, head.hash, self.state.audit_head_mac)
        self.nodes.collect(self.state)  # (only the records that changed: a heartbeat's freshness is not written)
        snapshot = core_text(self.state, self.nodes.journal_json())
        compact = dict(self.nodes.journal) if self.nodes.due() else None
        preload = dict(self.nodes.preload) if (self.nodes.preload or self.nodes.stale) and not defer_preload else None
        if snapshot == self._saved and compact is None and preload is None:  # (an idle tick: no write, no fsync)
            self._committed = max(self._committed, self._decisions)
            self._durable_below = max(self._durable_below, self.state.next_intent)
            return None
        self._snapshots += 1
        return Snapshot(self._snapshots, snapshot, self.token, self._decisions, self.state.next_intent, compact,
                        preload, recorded)  # fmt: skip

    def _write(self, snap: Snapshot | None) -> None:
        """Write the audit entries chained so far, then the snapshot unless a later one was written meanwhile
        (writes run outside the state lock: decisions go on while the API or the shared storage answers); then,
        when its journal is due, the compaction and the core after it."""
        with self._write_lock:
            while True:
                self._write_audit(snap)
                if snap is None or snap.seq <= self._written:
                    return
                if snap.preload is not None:
                    self._preload(snap)
                self.store.save_text(snap.text, snap.token)
                if snap.head is not None:  # (the lease's next renewal carries it: a record outside the log and state)
                    self.lease.audit_head = snap.head
                self._written, self._saved = snap.seq, snap.text
                self._committed = max(self._committed, snap.decisions)
                self._durable_below = max(self._durable_below, snap.intents_below)
                # When one is due: the core as written, and the shards as stored (both only change under this lock).
                taken = self.snapshots.taken
                self.snapshots.after_write(snap.text, snap.token, self.who(snap.token), self.nodes.stored_shards)
                self._unsnapshotted = self.snapshots.taken == taken
                if snap.compact is None:
                    return
                snap = self._compact(snap)

    def snapshot_if_due(self) -> None:
        """The last state written, snapshotted once a snapshot is due, if its own write came too early for one: a
        quiet fleet writes seldom (a heartbeat writes nothing), and its latest state must still be in the ring."""
        if not self._unsnapshotted or not self.snapshots.due():
            return
        with self._write_lock:
            token = self.token
            if token is None or not self._saved or not self._unsnapshotted:
                return
            taken = self.snapshots.taken
            self.snapshots.after_write(self._saved, token, self.who(token), self.nodes.stored_shards)
            self._unsnapshotted = self.snapshots.taken == taken

    def _write_audit(self, snap: Snapshot | None) -> None:
        """Under the write lock: the audit entries chained so far, in order (before any state that records them)."""
        if not self._audit_queue:
            return
        token = snap.token if snap is not None else self.token
        if token is None:
            raise LeaseLost("not the leader")
        self.lease.check(token)  # a deposed leader writes no audit entry either
        while self._audit_queue:  # (in the order chained; a batch that fails stays first, for the next)
            self.audit_log.write_prepared(self._audit_queue[0])
            self._audit_queue.popleft()

    def _preload(self, snap: Snapshot) -> None:
        """Under the write lock, before `snap`'s core: records stored nowhere yet into their shards (and shards
        found beside no state rewritten). Safe before the core: a state of version 1 keeps every record in its own
        document, and a fresh record is made again by the next takeover."""
        assert snap.preload is not None
        for document, text in self.nodes.compaction(snap.preload):
            self.store.save_document(document, text, snap.token)
        with self.lock:
            self.nodes.preloaded(snap.preload)

    def _compact(self, snap: Snapshot) -> Snapshot | None:
        """Under the write lock, after `snap` was written: its journal's records copied into their shards; then the
        next snapshot, whose journal no longer holds them (a leader that dies between the two finds the records in
        both, alike)."""
        assert snap.compact is not None
        for document, text in self.nodes.compaction(snap.compact):
            self.store.save_document(document, text, snap.token)
        with self.lock:
            if self.state is None or self.token != snap.token:
                return None
            self.nodes.compacted(snap.compact)
            return self._snapshot()

    def decide(self, decide: Callable[[ControllerState, int], policy.Outcome]) -> dict[str, Any]:
        """Apply a decision under the state lock, and answer once the state holding it is written."""
        with self.lock:
            state, token = self.leading()
            outcome = decide(state, token)
            for note in outcome.notes:
                log.info("%s", note)
            if outcome.ignored:
                log.info("ignored: %s", outcome.ignored)
            self._decisions += 1
            mine = self._decisions
        self._commit(mine)
        if outcome.intents:
            self.wake()
        return {
            "accepted": not outcome.ignored,
            "ignored": outcome.ignored,
            "notes": outcome.notes,
            "intents": [f"{i.kind} {i.node}" for i in outcome.intents],
        }

    def _commit(self, decision: int) -> None:
        """Group commit: the state is written once for every decision made while the last write was under way (the
        write runs outside the state lock, so decisions go on meanwhile): 150 agents reporting at once cost a few
        writes, not 150, and each is still answered only once its decision is written."""
        with self._commit_lock:
            if self._committed >= decision:
                return  # another request's write held this decision too
            with self.lock:
                self.leading()
                snap = self._snapshot()
            self._write(snap)

    def persist(self) -> None:
        """Write the state as it is now, the write outside the state lock (a group commit with the reports')."""
        with self.lock:
            self._decisions += 1
            mine = self._decisions
        self._commit(mine)

    def flush_in_background(self) -> None:
        """persist in a thread of its own, so that the action pipeline goes on starting actions while the results
        so far are written (one such write at a time; the next flush or the pipeline's end writes what it missed)."""
        if self._flushing.acquire(blocking=False):
            in_background(self._flushing, "flush", "writing the actions' results", self.persist)

    def durable(self, intent: Intent) -> bool:
        return intent_number(intent) < self._durable_below

    # --- new intents -----------------------------------------------------------------------------------------
    def arrivals(self) -> Future[None]:
        """A future that wake resolves: the action pipeline waits on it beside its actions, so that a report's
        intents start at once, not when an action under way ends."""
        with self._arrival_lock:
            if self._arrival.done():
                self._arrival = Future()
            return self._arrival

    def wake(self) -> None:
        """New intents from outside the decision loop: it ticks, and the action pipeline starts them."""
        self.on_intents()
        self.wake_pipeline()

    def wake_pipeline(self) -> None:
        """New intents: the action pipeline starts them now, not at its next look."""
        with self._arrival_lock:
            if not self._arrival.done():
                self._arrival.set_result(None)


def in_background(held: threading.Lock, name: str, what: str, work: Callable[[], object]) -> threading.Thread:
    """`work` in a daemon thread of its own, releasing `held` (acquired by the caller: one such thread at a time)
    when it ends; a failure is logged (deposed, or the storage or scheduler away: the next round tries again)."""

    def run() -> None:
        try:
            work()
        except Exception as exc:
            log.warning("%s: %s", what, exc)
        finally:
            held.release()

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread
