"""The remediation controller: leader election, the decision loop, the executor, the API and metrics.

Threads: the lease thread publishes this controller's view (view.py) and renews (or tries to take) the lease every
`lease_renew_s`, unless a peer hears the agents this one no longer hears (then it steps down); HTTP threads turn reports
into decisions under the state lock and answer once they are written (one write for all the decisions made while the
last write was under way); the main loop ticks the policy and runs pending intents, several nodes' at once, each
behind the fencing check. State lives on shared storage, so the next leader continues where the last one stopped.
Reliability tiers (history.py) are published to the scheduler in a thread of their own, a few at a time, when a node's
tier changes: a scheduler call that fails is logged and tried again later, and never holds up or fails an episode.

Why this module is over 400 lines: it is the one shape issue 43 rebuilds as a manager of small runnables (term,
leadership, inputs, reconcile, actions, watchers); until then new decisions go to pure modules of their own
(observers.py, lost.py, fence_heal.py, blocked.py, snapshots.py) and only their wiring lands here.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, wait
from contextlib import suppress
from dataclasses import replace
from typing import TYPE_CHECKING, Any, NamedTuple

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from ha_ops.errors import SpecError, TransportError
from ha_ops.health.report import AgentReport
from ha_ops.remediation import fence_heal, history, monitoring_watch, policy, safety
from ha_ops.remediation.audit import AuditHead, AuditLog, Prepared, read_key
from ha_ops.remediation.audit_sink import AuditShipper
from ha_ops.remediation.blocked import BlockedTracker, blocked_metrics, fresh_window
from ha_ops.remediation.certificates import CertificateService
from ha_ops.remediation.config import ControllerConfig
from ha_ops.remediation.documents import DirectoryDocuments, Documents
from ha_ops.remediation.executor import Executor
from ha_ops.remediation.fence_heal import Entry, FenceRecord
from ha_ops.remediation.lease import LeaderLease, Lease, LeaseLost
from ha_ops.remediation.model import ControllerState, Intent, NodePhase
from ha_ops.remediation.slurm_fence import FenceWatch, fence_primary, last_line
from ha_ops.remediation.snapshots import SnapshotRing
from ha_ops.remediation.store import StateError, StateStore, state_text
from ha_ops.remediation.view import View, ViewStore, last_heard, should_yield
from ha_ops.schedulers.base import SchedulerJob
from ha_ops.util.proc import CommandResult

if TYPE_CHECKING:  # (lightkube only where the config asks for Kubernetes)
    from ha_ops.remediation.k8s_lease import LeaderLabel

log = logging.getLogger(__name__)

FLUSH_S = 0.5  # while actions run, their results are written at least this often
STOP_GRACE_S = 10.0  # how long a stopping controller waits for the actions under way
# Actions that look at the real state first and do nothing twice (executor.py): their results may wait for their
# wave's write. Any other (a GPU reset, a reboot, a validation) is written as soon as it ends.
IDEMPOTENT = frozenset({"drain", "resume", "requeue_jobs", "spare_in", "spare_out"})
TIERS_PER_ROUND = 32  # reliability tiers published per round (never a storm of scheduler writes)
TIER_RETRY_S = 60.0  # a tier the scheduler refused is tried again after this
# The MTBI histogram's buckets: hours to months.
MTBI_BUCKETS_S = tuple(h * 3600.0 for h in (1, 6, 12, 24, 48, 96, 168, 336, 720, 1440, 2160))


class Snapshot(NamedTuple):
    """A state to write: its sequence number, its text, the lease token it was taken under, the decisions it holds,
    and the intent numbers it holds (every one below `intents_below`)."""

    seq: int
    text: str
    token: int
    decisions: int
    intents_below: int


def intent_number(intent: Intent) -> int:
    """The intent's number (state.next_intent when it was made), from its id \"00000042-gpu3-drain\"."""
    head = intent.id.partition("-")[0]
    return int(head) if head.isdigit() else 0


class Controller:
    def __init__(self, config: ControllerConfig, executor: Executor, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.executor = executor
        self.clock = clock
        if config.state_dir is not None:
            config.state_dir.mkdir(parents=True, exist_ok=True)
        self.lease = make_lease(config, clock)
        self.leader_label = make_leader_label(config, self.lease)
        self.documents = make_documents(config)
        self.store = StateStore(self.documents, self.lease)
        self.snapshots = SnapshotRing(self.documents, config.state_snapshots, self.lease, clock)  # (snapshots.py)
        self.blocked = BlockedTracker(fresh_window(config.lease_ttl_s, config.lease_renew_s))  # (blocked.py)
        self._known = {n for pool in config.pools.values() for n in (*pool.nodes, *pool.spares)}
        # Its own certificate issued before anything loads it (the API's server, the audit shipper).
        self.certificates = make_certificates(config, self._known)
        self.shipper = AuditShipper(config.audit_sink, config.id) if config.audit_sink is not None else None
        key = read_key(config.audit_key_file) if config.audit_key_file else None
        self.audit = AuditLog(self.documents, key=key, sink=self.shipper)
        self.views = ViewStore(self.documents, config.id)
        self.peer_views: list[View] = []  # as read at the last lease step
        self.slurm_ok_at = 0.0  # the last successful read of Slurm's node states
        self.heard: dict[str, float] = {}  # node -> when its agent's report last arrived here (leader or standby)
        self.state: ControllerState | None = None
        self.token: int | None = None
        self._saved = ""  # the state as last written by this controller
        self._unaudited: list[dict[str, Any]] = []  # finished intents' audit entries, for the next flush
        # Audit entries chained under the state lock (the state records their head) and written outside it, in
        # order, before the state that records them (_write).
        self._audit_queue: deque[Prepared] = deque()
        self._flushing = threading.Lock()  # held by the background flush of run_pending's results
        self._lock = threading.RLock()
        self._commit_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._snapshots = 0  # snapshots taken, and the last written (a write never goes back to an older one)
        self._written = 0
        self._decisions = 0  # decisions made (counted under the lock), and how many of them are written
        self._committed = 0
        # Intents numbered below this are in the shared state as written: only those may be acted on (a successor
        # must know of every action begun). Intent numbers only grow (state.next_intent).
        self._durable_below = 0
        self._stop = threading.Event()
        self._work = threading.Event()
        self._arrival: Future[None] = Future()  # resolved by _wake (new intents); replaced once seen
        self._arrival_lock = threading.Lock()
        # From the node-state poller, consumed by the next tick: {node: (state, reason)} and when that poll began
        self._fresh_states: dict[str, tuple[str, str]] = {}
        self._jobs_seen: dict[str, tuple[str, ...]] = {}  # node -> its jobs at the last read (NodeView.jobs_before)
        self._polled_at = 0.0
        self.monitoring_fails = 0
        # Built here, so that a certificate that does not load stops the controller at start, naming the files.
        self._monitoring = monitoring_watch.session(config.monitoring) if config.monitoring else None
        self.fence = FenceWatch(config.slurm_fence.after_s)
        # The last `scontrol ping` the fence watch read, [(host, "UP" | "DOWN")], exported as ha_ops_slurm_controller_up
        self.slurm_controllers: list[tuple[str, str]] = []
        self._publishing = threading.Lock()  # held by the round of tier publications under way
        self._tier_thread: threading.Thread | None = None
        self._tier_retry: dict[str, float] = {}  # node -> when its refused tier is tried again (this leader's memory)
        self.registry = CollectorRegistry()
        self.registry.register(_Metrics(self))

    # --- leadership -----------------------------------------------------------------------------------------
    @property
    def is_leader(self) -> bool:
        # Past its last renewal's expiry it says so at once, even while a renewal hangs on storage it cannot reach.
        return self.token is not None and self.state is not None and self.lease.current()

    def leader_name(self) -> str:
        record = self.lease.read()
        return record.holder if record and record.expires_at > self.clock() else ""

    def own_view(self) -> View:
        with self._lock:
            return View(id=self.config.id, at=self.clock(), slurm_ok_at=self.slurm_ok_at, agents=dict(self.heard))

    def _compare_views(self) -> View | None:
        """Publish this controller's view; return a peer that hears agents while this one hears none, if any."""
        own = self.own_view()
        try:
            self.views.write(own)
            self.peer_views = self.views.peers()
        except OSError as exc:
            log.error("views: shared storage error: %s", exc)
            self.peer_views = []
        return should_yield(own, self.peer_views, own.at, self.config.blind_after_s)

    def lease_step(self) -> None:
        self._lease_step()
        if self.leader_label is not None:
            self.leader_label.mark(self.is_leader)

    def _lease_step(self) -> None:
        better = self._compare_views()
        if better is not None:
            # Blind next to a peer that is not: lead nothing, so that the peer takes the lease.
            if self.is_leader:
                self._step_down(better)
            return
        try:
            leading = self.lease.acquire_or_renew()
        except OSError as exc:
            log.error("lease: shared storage error: %s", exc)
            leading = False
        with self._lock:
            if leading and self.token != self.lease.token:
                try:
                    self._become_leader()
                except Exception as exc:
                    # Unreadable state: lead nothing rather than act on a guess; the other controller may do better.
                    # Kept for the metric and the description (blocked.py), and tried again at the next lease step:
                    # a state put back is taken up without a restart.
                    if self.blocked.failed(exc, self.documents.describe(self.store.name), self.clock()):
                        log.error("%s cannot take over: %s; releasing the lease (tried again at each lease step)",
                                  self.config.id, exc)  # fmt: skip
                    self.token, self.state = None, None
                    self.lease.release()
            elif not leading and self.token is not None:
                log.warning("%s lost the lease; standing by", self.config.id)
                self.token, self.state = None, None

    def _step_down(self, better: View) -> None:
        now = self.clock()
        window = self.config.blind_after_s
        why = f"{self.own_view().describe(now, window)}, while {better.describe(now, window)}"
        with self._lock:
            token = self.token
            if token is None:
                return
            try:
                self.lease.check(token)
                self._unaudited.append({"at": now, "who": self._who(token), "what": "lease_step_down", "node": None,
                                        "why": why, "before": "leader",
                                        "after": f"released the lease for {better.id}"})  # fmt: skip
                self._save()
            except (LeaseLost, OSError) as exc:
                log.warning("stepping down without an audit entry: %s", exc)
            log.error("%s steps down: %s", self.config.id, why)
            self.token, self.state = None, None
            self.lease.release()

    def heard_from(self, node: str) -> None:
        """An agent's report arrived (accepted, or refused by a standby): the agent reaches this controller."""
        if node in self._known:  # (a report naming a node not configured is refused later; it must not grow the view)
            with self._lock:
                self.heard[node] = self.clock()

    def _become_leader(self) -> None:
        token = self.lease.token
        assert token is not None
        state = self.store.load()
        policy.init_state(state, self.config, self.clock())
        state.leading_since = self.clock()
        # The log read afresh (its predecessor may have written after its last save) and its chain checked against
        # the head the state recorded: a cut or edited log is found here, at every takeover, not adopted.
        problems = self.audit.resume(AuditHead(state.audit_seq, state.audit_hash))
        if state.audit_seq == 0 and (logged := self.audit.head_as_written().seq) > 0 and not self.store.exists():
            # No state, but a log of past actions: the state was removed, not never written. Forgetting what was
            # done (nodes out of service, a fence under way) is worse than leading nothing until it is restored.
            # (A state at seq 0 beside a longer log is only a leader killed between its first audit and its next
            # save: the log read afresh above carries it on.)
            raise StateError(f"controller state {self.documents.describe(self.store.name)} is missing while the audit "
                             f"log holds {logged} entries; restore it (ha-ops controller state restore)")  # fmt: skip
        state.audit_problems = problems[:20]
        self.token, self.state, self._saved = token, state, ""
        self._durable_below = 0
        self._audit_queue.clear()  # (the log was read afresh: what a past term left unwritten is not in it)
        self._unaudited = []  # a term's own: its predecessor's unwritten actions are checked again, by running them
        if problems:
            log.error("the audit log is not intact: %s", "; ".join(problems[:5]))
            self._unaudited.append({"at": self.clock(), "who": self._who(token), "what": "audit_chain_broken",
                                    "node": None, "why": "; ".join(problems[:5])[:2000],
                                    "before": f"seq {state.audit_seq}",
                                    "after": "the chain goes on from the state's head"})  # fmt: skip
        self.snapshots.begin_term()  # (the term's first write is snapshotted: a state that loaded)
        self._save()
        pending = len(state.pending())
        if (was := self.blocked.cleared()) is not None:
            log.warning("%s took over after %d failed attempt(s) since %.0f: %s", self.config.id, was.attempts,
                        was.since, was.error)  # fmt: skip
        log.warning("%s is the leader (token %d); %d pending intent(s) to finish", self.config.id, token, pending)
        self._work.set()

    def _save(self) -> None:
        """Write the state now (under the lock)."""
        self._write(self._snapshot())

    def _snapshot(self) -> Snapshot | None:
        """Under the lock: the state to write, or None when it is written already. Finished intents are audited
        first: the state records the log's head."""
        assert self.state is not None and self.token is not None
        if self._unaudited:
            batch = self.audit.prepare(self._unaudited)  # chained here; written by _write, before this state
            self._unaudited = []
            if batch is not None:
                self._audit_queue.append(batch)
        # The log as this leader writes it: it read the log when its term began, and nobody else writes while it
        # leads (every write is fenced); asking the documents would read the whole log at every save.
        head = self.audit.prepared_head()
        self.state.audit_seq, self.state.audit_hash = head.seq, head.hash
        snapshot = state_text(self.state)
        if snapshot == self._saved:  # (an idle tick changes nothing: no write, no fsync)
            self._committed = max(self._committed, self._decisions)
            self._durable_below = max(self._durable_below, self.state.next_intent)
            return None
        self._snapshots += 1
        return Snapshot(self._snapshots, snapshot, self.token, self._decisions, self.state.next_intent)

    def _write(self, snap: Snapshot | None) -> None:
        """Write the audit entries chained so far, then the snapshot unless a later one was written meanwhile
        (writes run outside the state lock: decisions go on while the API or the shared storage answers)."""
        with self._write_lock:
            if self._audit_queue:
                token = snap.token if snap is not None else self.token
                if token is None:
                    raise LeaseLost("not the leader")
                self.lease.check(token)  # a deposed leader writes no audit entry either
                while self._audit_queue:  # (in the order chained; a batch that fails stays first, for the next)
                    self.audit.write_prepared(self._audit_queue[0])
                    self._audit_queue.popleft()
            if snap is None or snap.seq <= self._written:
                return
            self.store.save_text(snap.text, snap.token)
            self._written, self._saved = snap.seq, snap.text
            self._committed = max(self._committed, snap.decisions)
            self._durable_below = max(self._durable_below, snap.intents_below)
            self.snapshots.after_write(snap.text, snap.token, self._who(snap.token))  # when one is due

    # --- inputs ---------------------------------------------------------------------------------------------
    def _decide(self, decide: Callable[[ControllerState, int], policy.Outcome]) -> dict[str, Any]:
        """Apply a decision under the state lock, and answer once the state holding it is written."""
        with self._lock:
            if self.state is None or self.token is None:
                raise LeaseLost("not the leader")
            outcome = decide(self.state, self.token)
            for note in outcome.notes:
                log.info("%s", note)
            if outcome.ignored:
                log.info("ignored: %s", outcome.ignored)
            self._decisions += 1
            mine = self._decisions
        self._commit(mine)
        if outcome.intents:
            self._wake()
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
            with self._lock:
                if self.state is None or self.token is None:
                    raise LeaseLost("not the leader")
                snap = self._snapshot()
            self._write(snap)

    def _persist(self) -> None:
        """Write the state as it is now, the write outside the state lock (a group commit with the reports')."""
        with self._lock:
            self._decisions += 1
            mine = self._decisions
        self._commit(mine)

    def _flush_in_background(self) -> None:
        """_persist in a thread of its own, so that run_pending goes on starting actions while the results so far
        are written (one such write at a time; the next flush or the end of run_pending writes what it missed)."""
        if self._flushing.acquire(blocking=False):
            _in_background(self._flushing, "flush", "writing the actions' results", self._persist)

    def _arrivals(self) -> Future[None]:
        """A future that _wake resolves: run_pending waits on it beside its actions, so that a report's intents start
        at once, not when an action under way ends."""
        with self._arrival_lock:
            if self._arrival.done():
                self._arrival = Future()
            return self._arrival

    def _wake(self) -> None:
        """New intents: the main loop ticks, and a run_pending under way starts them."""
        self._work.set()
        with self._arrival_lock:
            if not self._arrival.done():
                self._arrival.set_result(None)

    def _durable(self, intent: Intent) -> bool:
        return intent_number(intent) < self._durable_below

    def handle_report(self, report: AgentReport) -> dict[str, Any]:
        now = self.clock()
        began: list[str] = []

        def decide(state: ControllerState, token: int) -> policy.Outcome:
            outcome = policy.on_report(state, report, self.config, now, token)
            if outcome.burst:
                began.append(outcome.burst)
            return outcome

        answer = self._decide(decide)
        if began:
            self._name_burst_job(began[0])
        return answer

    def _name_burst_job(self, burst_id: str) -> None:
        """A burst of application XIDs began: ask the scheduler once which job runs on its nodes (a crashed job may
        be gone already: then the jobs of the last read)."""
        try:
            jobs: list[Any] = list(self.executor.scheduler.jobs())
        except Exception as exc:
            log.warning("cannot read the scheduler's jobs to name the burst's job: %s", exc)
            jobs = []
        seen: dict[str, list[str]] = {}
        for node, ids in self._jobs_seen.items():
            for job_id in ids:
                seen.setdefault(job_id, []).append(node)
        jobs += [SchedulerJob(job_id, "", tuple(nodes)) for job_id, nodes in seen.items()]
        with self._lock:
            if self.state is None:
                return
            found = policy.name_burst_job(self.state, burst_id, jobs)
        if found:
            log.warning("%s", found)
            with suppress(LeaseLost):  # (deposed meanwhile: the report's own decision is written already)
                self._persist()

    def handle_alerts(self, alerts: list[dict[str, Any]]) -> dict[str, Any]:
        now = self.clock()

        def decide(state: ControllerState, token: int) -> policy.Outcome:
            total = policy.Outcome()
            for alert in alerts:
                one = policy.on_alert(state, alert, self.config, now, token)
                total.intents += one.intents
                total.notes += one.notes + ([f"ignored: {one.ignored}"] if one.ignored else [])
            return total

        return self._decide(decide)

    def handle_repaired(self, node: str, by: str = "an operator") -> dict[str, Any]:
        now = self.clock()
        return self._decide(lambda state, token: policy.repaired(state, node, now, token, by))

    def reset_breaker(self, by: str = "an operator") -> dict[str, Any]:
        def decide(state: ControllerState, token: int) -> policy.Outcome:
            self.lease.check(token)  # a deposed leader neither closes the breaker nor audits that it did
            was = state.breaker.reason
            state.breaker.open, state.breaker.reason, state.breaker.cordons = False, "", []
            self._unaudited.append({"at": self.clock(), "who": self._who(token), "what": "breaker_reset",
                                    "node": None, "why": f"reset by {by}", "before": was,
                                    "after": "closed"})  # fmt: skip
            return policy.Outcome(notes=["circuit breaker closed"])

        return self._decide(decide)

    # --- maintenance windows (a driver rollout's batches; docs/architecture.md) --------------------------------------
    def start_maintenance(self, nodes: list[str], reason: str, ttl_s: float, by: str = "an operator") -> dict[str, Any]:
        now = self.clock()

        def decide(state: ControllerState, token: int) -> policy.Outcome:
            self.lease.check(token)  # a deposed leader opens no window and audits none
            before = policy.start_maintenance(state, nodes, reason, ttl_s, by, now)  # ValueError: nothing changed
            for node, was in before.items():
                if was is None:  # an extension (the rollout's next step on the node) is not audited again
                    self._audit_maintenance(node, "maintenance_start", f"{reason} (by {by})", None,
                                            state.nodes[node].maintenance, token)  # fmt: skip
            return policy.Outcome(notes=[f"maintenance window on {', '.join(nodes)} for {ttl_s:g} s: {reason}"])

        return self._decide(decide)

    def end_maintenance(self, nodes: list[str], by: str = "an operator") -> dict[str, Any]:
        def decide(state: ControllerState, token: int) -> policy.Outcome:
            self.lease.check(token)
            closed = policy.end_maintenance(state, nodes)
            for node, window in closed.items():
                self._audit_maintenance(node, "maintenance_end", f"ended by {by}", window, None, token)
            return policy.Outcome(notes=[f"maintenance window ended on {', '.join(closed) or 'no node'}"])

        return self._decide(decide)

    def _audit_maintenance(self, node: str, what: str, why: str, before: Any, after: Any, token: int) -> None:
        def text(window: Any) -> str:
            return "none" if window is None else f"until {window.until:.0f}: {window.reason}"

        self._unaudited.append({"at": self.clock(), "who": self._who(token), "what": what, "node": node, "why": why,
                                "before": text(before), "after": text(after)})  # fmt: skip

    def hold_host(
        self, node: str, release: bool, reason: str, by: str = "an operator", dry_run: bool = False
    ) -> dict[str, Any]:
        """A person holds a host, or releases it (`ha-ops controller hold`): a fenced host held is neither powered on
        nor restarted (fence_heal.py). ValueError for a node that is neither a controller's host nor configured."""
        now = self.clock()

        def decide(state: ControllerState, token: int) -> policy.Outcome:
            # The hosts the controllers fence: the Slurm controllers, the remediation controllers, any fenced or held.
            known = ({h for h, _ in self.slurm_controllers} | {self.config.id} | set(state.fences) | set(state.held)
                     | {v.id for v in self.peer_views})  # fmt: skip
            if node in self._known and node not in known:
                raise ValueError(f"{node} is a GPU node, which the controllers never fence: a hold keeps a fenced "
                                 f"controller host as it is; to keep the controllers off {node}, use "
                                 "`ha-ops controller maintenance start`")  # fmt: skip
            change = fence_heal.change_hold(state.held, node, release, reason, by, now, known)
            if dry_run or change.entry is None:
                return policy.Outcome(notes=[f"dry run, nothing changed: {change.note}" if dry_run else change.note])
            self.lease.check(token)  # a deposed leader holds nothing and audits nothing
            state.held = change.held
            self._unaudited.append(self._entry(token, change.entry, now))
            return policy.Outcome(notes=[change.note])

        return self._decide(decide)

    # --- the loop -------------------------------------------------------------------------------------------
    def _who(self, token: int) -> str:
        return f"{self.config.id} (token {token})"

    def _views(self) -> dict[str, policy.NodeView]:
        assert self.state is not None
        jobs: dict[str, list[str]] = {}
        # A cordoned node may become draining (and then drained) within this very tick: it needs its jobs too.
        # Fresh node states come with the jobs too: a node found lost names the jobs Slurm will requeue from it.
        out = (NodePhase.CORDONED, NodePhase.DRAINING)
        with self._lock:
            states, self._fresh_states = self._fresh_states, {}  # each poll's states are acted on once
            polled_at = self._polled_at
        before = self._jobs_seen
        if states or any(r.phase in out or (r.spare and r.in_main) for r in self.state.nodes.values()):
            for job in self.executor.scheduler.jobs():
                if job.state in ("RUNNING", "CONFIGURING", "COMPLETING"):
                    for node in job.nodes:
                        jobs.setdefault(node, []).append(job.id)
            self._jobs_seen = {n: tuple(ids) for n, ids in jobs.items()}
        names = set(jobs) | set(states)
        heard = [self.own_view(), *self.peer_views]  # an agent heard by either controller is not silent
        return {
            n: policy.NodeView(
                state=states.get(n, ("", ""))[0],
                reason=states.get(n, ("", ""))[1],
                jobs=tuple(jobs.get(n, ())),
                jobs_before=before.get(n, ()),
                heard_at=last_heard(heard, n),
                polled_at=polled_at,
            )
            for n in names
        }

    def tick(self) -> None:
        if not self.is_leader:
            return
        try:
            views = self._views()
        except Exception as exc:
            log.warning("cannot read Slurm's jobs this tick: %s", exc)
            return
        with self._lock:
            if self.state is None or self.token is None:
                return
            outcome = policy.on_tick(self.state, views, self.config, self.clock(), self.token)
            for note in outcome.notes:
                log.info("%s", note)
            for node, window in outcome.ended_maintenance:
                self._audit_maintenance(node, "maintenance_end", "expired", window, None, self.token)
            policy.compact(self.state)
        self._persist()  # (outside the lock: reports are decided while it is written)
        self.run_pending()
        self._publish_tiers_in_background()

    # --- reliability tiers (history.py) -----------------------------------------------------------------------
    def _tier_publisher(self) -> Callable[[str, str], None] | None:
        """The scheduler's set_reliability, unless tiers are not published (the config, shadow mode, or a scheduler
        without it)."""
        if not self.config.fleet.publish_tiers or self.config.safety.dry_run:
            return None
        return getattr(self.executor.scheduler, "set_reliability", None)

    def _due_tiers(self) -> list[tuple[str, str, str, str, int]]:
        """(node, tier, why, tier before, token) for the nodes whose tier changed, a round's worth (one pass)."""
        with self._lock:
            if self.state is None or self.token is None:
                return []
            now, token = self.clock(), self.token
            changes = history.tier_changes(self.state.nodes.values(), now, self.config.fleet, self.config.lemon)
            due = [(rec.name, tier, why, rec.tier, token) for rec, tier, why in changes
                   if self._tier_retry.get(rec.name, 0.0) <= now]  # fmt: skip
        return due[:TIERS_PER_ROUND]

    def _publish_tiers_in_background(self) -> None:
        """A round of tier publications in a thread of its own (one round at a time): a slow or hung scheduler
        delays tiers, never the decisions or the actions."""
        publish = self._tier_publisher()
        if publish is None or not self._publishing.acquire(blocking=False):
            return
        try:
            due = self._due_tiers()
        except BaseException:
            self._publishing.release()
            raise
        if not due:
            self._publishing.release()
            return
        self._tier_thread = _in_background(self._publishing, "tiers", "publishing reliability tiers",
                                           lambda: self._publish_tiers(publish, due))  # fmt: skip

    def publish_tiers(self) -> int:
        """One round of tier publications in this thread (tests; the loop uses the background round). Returns how
        many were published."""
        publish = self._tier_publisher()
        return self._publish_tiers(publish, self._due_tiers()) if publish is not None else 0

    def _publish_tiers(self, publish: Callable[[str, str], None], due: list[tuple[str, str, str, str, int]]) -> int:
        done = []
        for name, tier, why, before, token in due:
            try:
                self.lease.check(token)  # a deposed leader publishes nothing
            except LeaseLost:
                return 0
            try:
                publish(name, tier)
            except Exception as exc:
                log.warning("reliability tier %s of %s not published (again in %g s): %s", tier, name,
                            TIER_RETRY_S, exc)  # fmt: skip
                with self._lock:
                    self._tier_retry[name] = self.clock() + TIER_RETRY_S
                continue
            log.info("%s: reliability tier %s (%s)", name, tier, why)
            done.append((name, tier, why, before, token))
        if not done:
            return 0
        with self._lock:
            for name, tier, why, before, token in done:
                rec = self.state.nodes.get(name) if self.state is not None and self.token == token else None
                if rec is None:
                    continue
                rec.tier = tier
                self._tier_retry.pop(name, None)
                self._unaudited.append({"at": self.clock(), "who": self._who(token), "what": "set_tier",
                                        "node": name, "why": why, "before": before or "as configured",
                                        "after": tier})  # fmt: skip
        try:
            self._persist()
        except Exception as exc:  # (deposed, or the storage away: the next write holds it)
            log.warning("writing the published tiers: %s", exc)
        return len(done)

    def run_pending(self) -> None:
        """Carry out the ready intents, on different nodes at once (one node's intents in order: its jobs are not
        requeued before its drain succeeded), within the limits of _within_limits, until none is ready or running.

        A pipeline, not waves: an action that ends frees its slot for the next ready one at once. Writes are batched,
        with two rules kept: an intent is in the shared state before it is acted on (a successor knows of every
        action begun: _durable), and a finished intent is audited before the state that records it is written.
        Results are written together (one audit append, one state write) at most FLUSH_S apart while actions run,
        and when the last one ends; an action that is not idempotent (a GPU reset, a reboot) is written as soon as
        it ends. Every write runs outside the state lock, so reports are decided meanwhile. A storm of 150 drains
        costs a few writes, not 300. A leader that dies between a drain and its write leaves the intent pending: its
        successor runs it again, and the executor finds the node drained and audits it once."""
        running: dict[Future[tuple[str, str, str, str]], tuple[Intent, int]] = {}
        unwritten = False  # results recorded since the last write
        flush_at = time.monotonic() + FLUSH_S
        try:
            while not self._stop.is_set():
                arrived = self._arrivals()  # (before the pending are read: an intent made after is not missed)
                with self._lock:
                    if self.state is None or self.token is None:
                        return
                    token, now = self.token, self.clock()
                    ready, blocked = [], {intent.node for intent, _ in running.values()}
                    for i in self.state.pending():
                        if i.node not in blocked and i.not_before <= now:
                            ready.append(i)
                        blocked.add(i.node)
                    ready = self._within_limits(ready, [intent for intent, _ in running.values()])
                    new = any(not self._durable(i) for i in ready)
                if new or (unwritten and not running):
                    self._persist()  # the new intents (durable before they start), the results so far
                    unwritten, flush_at = False, time.monotonic() + FLUSH_S
                elif unwritten and time.monotonic() >= flush_at:
                    self._flush_in_background()  # (the results of actions that look before they act: no hurry)
                    unwritten, flush_at = False, time.monotonic() + FLUSH_S
                for intent in ready:
                    running[self._start(intent, token)] = (intent, token)
                if not running:
                    return
                # Until an action ends, new intents arrive (a report), or the results so far are due to be written.
                timeout = max(0.0, flush_at - time.monotonic()) if unwritten else FLUSH_S
                done, _ = wait([*running, arrived], timeout=timeout, return_when=FIRST_COMPLETED)
                outcomes = [(*running.pop(future), *future.result()) for future in done if future is not arrived]
                self._record(outcomes)
                unwritten = unwritten or bool(outcomes)
                if any(intent.kind not in IDEMPOTENT for intent, *_ in outcomes):
                    self._persist()
                    unwritten, flush_at = False, time.monotonic() + FLUSH_S
        finally:
            # Stopping: the actions under way get a grace to end and be recorded (a validation waiting for a node
            # to boot may not end for minutes: its thread is left behind, and the intent stays pending).
            if running:
                done, _ = wait(running, timeout=STOP_GRACE_S)
                with suppress(Exception):
                    self._record([(*running[f], *f.result()) for f in done])

    def _start(self, intent: Intent, token: int) -> Future[tuple[str, str, str, str]]:
        """An action in a thread of its own (a daemon: a stopping controller does not wait for a node to boot)."""
        future: Future[tuple[str, str, str, str]] = Future()

        def work() -> None:
            try:
                future.set_result(self._act(intent, token))
            except BaseException as exc:
                future.set_exception(exc)

        threading.Thread(target=work, name=f"action-{intent.kind}-{intent.node}", daemon=True).start()
        return future

    def _within_limits(self, ready: list[Intent], running: list[Intent]) -> list[Intent]:
        """The scheduler's actions (a cordon is what a storm waits for) first, up to `parallel_actions`; repairs
        on the nodes (resets, reboots, validations that may wait minutes for a boot) up to `parallel_repairs`, in
        their own slots, so that they never hold up a drain."""
        room = {
            True: self.config.parallel_actions - sum(i.kind in IDEMPOTENT for i in running),
            False: self.config.parallel_repairs - sum(i.kind not in IDEMPOTENT for i in running),
        }
        out = []
        # Drains first (a cordon is what a storm waits for: it stops new work landing on a failing node), then the
        # other scheduler actions, then repairs; stable, so in order within each.
        for intent in sorted(ready, key=lambda i: (i.kind not in IDEMPOTENT, i.kind != "drain")):
            if room[intent.kind in IDEMPOTENT] > 0:
                room[intent.kind in IDEMPOTENT] -= 1
                out.append(intent)
        return out

    def _act(self, intent: Intent, token: int) -> tuple[str, str, str, str]:
        """One action, behind the fencing check: (status, result, the node before, the node after)."""
        dry = self.config.safety.dry_run
        if intent.args.get("release") and not self._succeeded(intent.args.get("fence")):
            # Unfenced, the lost node may still run these jobs: leave them to Slurm's own hold (cred_expire).
            intent = intent.model_copy(update={"args": {**intent.args, "release": []}})
        self.lease.check(token)  # a frozen or deposed leader stops here
        before = self.executor.before(intent)
        try:
            if dry:
                status, result = "skipped", "pass" if intent.kind == "validate" else "dry-run: not carried out"
            else:
                status, result = "done", self.executor.run(intent)
        except LeaseLost:
            raise
        except Exception as exc:
            status, result = "failed", str(exc)
            log.warning("%s %s failed: %s", intent.kind, intent.node, exc)
        after = self.executor.before(intent) if not dry else before
        log.info("%s %s: %s (%s)", intent.kind, intent.node, status, result)
        return status, result, before, after

    def _record(self, outcomes: list[tuple[Intent, int, str, str, str, str]]) -> None:
        """Results into the state, in memory; each finished intent's audit entry kept for the next flush (once:
        not again after a failover)."""
        with self._lock:
            # (read at the start of the term, as in _snapshot; and those kept for the next flush)
            audited = self.audit.intents_as_written() | {e["intent"] for e in self._unaudited}
            for intent, token, status, result, before, after in outcomes:
                if self.state is None or self.token != token:
                    return
                stored = next((i for i in self.state.intents if i.id == intent.id), None)
                if stored is None:
                    continue
                stored.attempts += 1
                retry = (
                    status == "failed"
                    and intent.kind in ("drain", "resume", "spare_in", "spare_out")
                    and stored.attempts < 5
                )
                if retry:
                    stored.not_before = self.clock() + min(30.0, 0.5 * 2**stored.attempts)
                    stored.result = f"attempt {stored.attempts} failed: {result}"
                    continue
                stored.status, stored.result = status, result  # type: ignore[assignment]
                if intent.id not in audited:
                    audited.add(intent.id)
                    what = f"dry-run {intent.kind}" if self.config.safety.dry_run else intent.kind
                    self._unaudited.append({"at": self.clock(), "who": self._who(token), "what": what,
                                            "node": intent.node, "why": intent.why, "before": before,
                                            "after": f"{after}; {result}", "intent": intent.id})  # fmt: skip

    def _succeeded(self, intent_id: str | None) -> bool:
        with self._lock:
            found = next((i for i in (self.state.intents if self.state else []) if i.id == intent_id), None)
        return found is not None and found.status == "done"

    def _lease_loop(self) -> None:
        while not self._stop.is_set():
            self.lease_step()
            self._stop.wait(self.config.lease_renew_s if self.is_leader else min(0.5, self.config.lease_renew_s))

    def _node_state_loop(self) -> None:
        """Slurm's node states, read apart from the tick: a hung slurmctld must not stall the decisions."""
        while not self._stop.wait(self.config.node_poll_s):
            began = self.clock()
            try:
                states = self.executor.scheduler.node_states_and_reasons()
            except Exception as exc:
                log.warning("cannot read the scheduler's node states: %s", exc)
                continue
            with self._lock:
                self.slurm_ok_at = self.clock()  # the standby reads too: its view must be current to take over
                if not self.is_leader:
                    continue
                self._fresh_states, self._polled_at = states, began
            self._work.set()

    def _fence_loop(self) -> None:
        """Watch the Slurm controllers (each ping may take a MessageTimeout per hung controller: its own thread)."""
        while not self._stop.wait(self.config.node_poll_s):
            if not self.is_leader:
                continue
            asked_at = self.clock()
            try:
                self._fence_step(self.executor.scheduler.controllers(), asked_at)  # type: ignore[attr-defined]
            except LeaseLost:
                continue
            except Exception as exc:
                log.warning("cannot check the Slurm controllers: %s", exc)
                self.slurm_controllers = []  # unknown now: no stale UP may hide an outage

    def _fence_step(self, controllers: list[tuple[str, str]], asked_at: float | None = None) -> None:
        self.slurm_controllers = list(controllers)
        with self._lock:
            heard_at = max(self.heard.values(), default=0.0)  # this controller's own reports: a peer's prove nothing
            fences = dict(self.state.fences) if self.state is not None else {}
        host = self.fence.observe(controllers, self.clock(), asked_at, heard_at)
        token = self.token
        if host is None or token is None:
            return
        previous = fences.get(host)
        if previous is not None and previous.active:
            return  # its heal owns it (off, or booting: a new leader must not fence a primary coming back)
        self.lease.check(token)  # only the leader fences, and a deposed one must not
        fence = self.config.slurm_fence
        why = f"slurmctld on {host} has not answered for {fence.after_s:g} s while a backup is UP"
        log.error("fencing the hung Slurm primary: %s", why)
        ops = self.executor.node_ops

        def run_on(node: str, command: str) -> CommandResult:  # cut off, it costs this long before its BMC
            return ops.run_command(node, command, connect_timeout_s=fence.ssh_connect_timeout_s)

        outcome = fence_primary(host, fence.command, fence.power_off_command, run_on, ops.run_here,
                                fence.none_found_exit)  # fmt: skip
        backup = next((h for h, state in controllers[1:] if state == "UP"), None)
        entries = [Entry("fence_slurmctld", host, why, "DOWN (hung or cut off)", outcome.said)]
        heal = None
        if outcome.fenced:  # from now on its heal (fence_heal.py) brings it back, whichever controller leads
            ran_controller = host == self.config.id or any(v.id == host for v in self.peer_views)
            heal = fence_heal.start(host, outcome.how, backup or "", ran_controller, self.clock(), previous,  # type: ignore[arg-type]
                                    fence)  # fmt: skip
            entries += heal.audit
        self._fence_write(token, entries, heal.record if heal else None)
        if heal is not None and fence.takeover_command and backup is not None:
            # At once, not after SlurmctldTimeout: while no controller is in control, a job that ends cannot report
            # it (slurmstepd gives up after 1.5 x SlurmctldTimeout), and Slurm later requeues the finished job.
            result = ops.run_here(fence.takeover_command)
            said = "told to take control" if result.ok else f"takeover failed: exit {result.returncode}"
            hows = {"bmc": "powered off through its BMC", "down": "found with no slurmctld running"}
            how = hows.get(outcome.how, "fenced over ssh")
            # (the hand-back waits from here, whether or not the takeover was accepted: the later, the safer)
            took = fence_heal.took_over(heal.record, self.clock())
            self._fence_write(token, [Entry("slurm_takeover", backup, f"{host} was {how}", "standby", said)], took)

    def _fence_write(self, token: int, entries: Iterable[Entry], record: FenceRecord | None = None) -> None:
        """Audit the entries and keep the fenced host's record with them, in one write of the state."""
        with self._lock:
            if self.token != token or self.state is None:
                return
            if record is not None:
                self.state.fences[record.host] = record
            self._unaudited += [self._entry(token, e, self.clock()) for e in entries]
            self._save()

    def _entry(self, token: int, e: Entry, at: float) -> dict[str, Any]:
        """An audit entry of this term, from a fence_heal Entry."""
        return {"at": at, "who": self._who(token), "what": e.what, "node": e.node, "why": e.why, "before": e.before,
                "after": e.after}  # fmt: skip

    def _heal_loop(self) -> None:
        """Bring fenced hosts back (fence_heal.py): a thread of its own, since a power on waits for the BMC."""
        while not self._stop.wait(self.config.node_poll_s):
            if not self.is_leader:
                continue
            try:
                self._heal_step()
            except LeaseLost:
                continue
            except Exception as exc:
                log.warning("cannot bring the fenced hosts back: %s", exc)

    def _heal_step(self) -> None:
        """What the leader sees, handed to fence_heal for each host it is bringing back; the commands it names run
        here, and their results are audited with the host's record."""
        fence, now, window = self.config.slurm_fence, self.clock(), self.config.blind_after_s
        with self._lock:
            if self.state is None or self.token is None:
                return
            token, records, held = self.token, list(self.state.fences.values()), set(self.state.held)
        own = self.own_view()
        views = {v.id: v.at for v in self.peer_views} | {own.id: own.at}
        whole = own.hears_agents(now, window) and own.reaches_slurm(now, window)
        for record in (r for r in records if r.active):
            seen = fence_heal.Seen(dict(self.slurm_controllers), views, whole, record.host in held)
            decision = fence_heal.decide(record, seen, now, fence)
            if decision.run is not None and decision.run.kind == "power_status":
                answered = self.executor.node_ops.run_here(decision.run.command).ok
                decision = fence_heal.decide(record, replace(seen, bmc=answered), now, fence)
            if decision.run is not None:
                with self._lock:  # a hold that came meanwhile, or a deposed leader: nothing runs
                    if self.state is None or self.token != token or record.host in self.state.held:
                        return
                self.lease.check(token)
                result = self._heal_run(decision.run)
                decision = fence_heal.ran(decision.record, decision.run, result.ok, last_line(result), self.clock(),
                                          fence)  # fmt: skip
            if decision.record != record or decision.audit:
                self._fence_write(token, decision.audit, decision.record)
            if decision.record.phase == "failed" and not fence_heal.left_to_person(decision.record, fence):
                self.fence.fenced.discard(record.host)  # not back: fenced again if it is DOWN while the backup is UP

    def _heal_run(self, run: fence_heal.Run) -> CommandResult:
        ops = self.executor.node_ops
        log.warning("bringing %s back: %s", run.node, run.command)
        if not run.ssh:
            return ops.run_here(run.command)
        try:
            return ops.run_command(run.node, run.command, self.config.slurm_fence.ssh_connect_timeout_s)
        except TransportError as exc:
            return CommandResult(["ssh", run.node, run.command], 255, "", str(exc))

    def _monitoring_loop(self) -> None:
        """A dead man's switch for the monitoring: while Prometheus does not answer, the leader records it (state,
        metric, status) and raises HaOpsPrometheusDown on Alertmanager, which Prometheus can no longer do."""
        watch, via = self.config.monitoring, self._monitoring
        assert watch is not None and via is not None
        while not self._stop.wait(watch.poll_s):
            healthy = monitoring_watch.prometheus_healthy(watch, via=via)
            self.monitoring_fails = 0 if healthy else self.monitoring_fails + 1
            if not self.is_leader:
                continue
            down = self.monitoring_fails >= watch.fail_after
            with self._lock:
                if self.state is None or self.token is None:
                    continue
                was = self.state.monitoring_down_since
                if down and was is None:
                    self.state.monitoring_down_since = self.clock()
                    log.error("Prometheus has not answered %d polls: monitoring is down", self.monitoring_fails)
                elif not down and was is not None:
                    self.state.monitoring_down_since = None
                    log.warning("Prometheus answers again after %.0f s", self.clock() - was)
                self._save()
                since = self.state.monitoring_down_since
            if since is not None:
                monitoring_watch.raise_alert(watch, self.config.id, since, via=via)

    def stop(self) -> None:
        self._stop.set()
        self._wake()

    def run(self) -> None:
        from ha_ops.remediation.server import serve, serve_public

        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: self.stop())
        servers = [serve(self, self.config.listen_address, self.config.port)]
        if self.certificates is not None:
            threading.Thread(target=self.certificates.run, args=(self._stop,), name="certificates",
                             daemon=True).start()  # fmt: skip
            if (enrollment := self.certificates.config.enrollment) is not None:
                servers.append(serve_public(self, self.config.listen_address, enrollment.port))
        for server in servers:
            threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
        lease_thread = threading.Thread(target=self._lease_loop, name="lease", daemon=True)
        lease_thread.start()
        threading.Thread(target=self._node_state_loop, name="node-states", daemon=True).start()
        if self.shipper is not None:
            self.shipper.start()
        if self.config.slurm_fence.enabled and self.config.scheduler == "slurm":  # (Slurm's controllers only)
            threading.Thread(target=self._fence_loop, name="slurm-fence", daemon=True).start()
            threading.Thread(target=self._heal_loop, name="slurm-fence-heal", daemon=True).start()
        if self.config.monitoring is not None:
            threading.Thread(target=self._monitoring_loop, name="monitoring", daemon=True).start()
        log.warning("controller %s listening on %s:%d", self.config.id, self.config.listen_address, self.config.port)
        try:
            while not self._stop.is_set():
                self._work.wait(self.config.tick_s)
                self._work.clear()
                try:
                    self.tick()
                except LeaseLost as exc:
                    log.warning("stopped acting: %s", exc)
                except Exception:
                    log.exception("tick failed; the controller keeps running")
        finally:
            for server in servers:
                server.shutdown()
            if self.shipper is not None:
                self.shipper.stop()
            if self.is_leader:
                self.lease.release()
            if self.leader_label is not None:
                self.leader_label.mark(False)

    # --- views ----------------------------------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        with self._lock:
            state = self.state
            data: dict[str, Any] = {
                "id": self.config.id,
                "leader": self.is_leader,
                "leader_name": self.leader_name(),
                "token": self.token,
                "views": [v.model_dump(mode="json") for v in (self.own_view(), *self.peer_views)],
                "blocked": self.blocked.describe(self.clock()),  # why it won the lease but could not lead
            }
            if state is not None:
                data["state"] = state.model_dump(mode="json")
                data["safety"] = safety.summary(state, self.config.safety)
                data["observers"] = state.contact.summary(state.leading_since)  # (observers.py: silence trusted?)
        return data


def _in_background(held: threading.Lock, name: str, what: str, work: Callable[[], object]) -> threading.Thread:
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


def make_lease(config: ControllerConfig, clock: Callable[[], float]) -> LeaderLease:
    """The lease the config names: a Kubernetes Lease, or a file in the shared state folder."""
    if config.kubernetes is not None and config.kubernetes.lease is not None:
        from ha_ops.remediation.k8s_lease import KubernetesLease
        from ha_ops.schedulers.kubernetes import client_from_kubeconfig

        where = config.kubernetes.lease
        # Its own client, with a timeout under the lease's life: a renewal must not outlast the term it renews.
        client = client_from_kubeconfig(config.kubernetes.kubeconfig, timeout_s=max(1.0, config.lease_ttl_s / 2))
        return KubernetesLease(client, where.name, where.namespace, config.id, config.lease_ttl_s,
                               config.lease_margin_s, clock, watch=True)  # fmt: skip
    assert config.state_dir is not None  # (the config's validator)
    return Lease(config.state_dir, config.id, config.lease_ttl_s, config.lease_margin_s, clock)


def make_leader_label(config: ControllerConfig, lease: LeaderLease) -> LeaderLabel | None:
    """The leader label on this controller's own pod, where the config asks for it (the Kubernetes layer's),
    written through the Kubernetes lease's client: from the lease's loop, with its short timeout."""
    k8s = config.kubernetes
    if k8s is None or k8s.lease is None or not k8s.lease.label_pod:
        return None
    from ha_ops.remediation.k8s_lease import KubernetesLease, LeaderLabel

    assert isinstance(lease, KubernetesLease)  # (kubernetes.lease makes one: make_lease)
    return LeaderLabel(lease.client, k8s.lease.namespace, config.id)


def make_certificates(config: ControllerConfig, nodes: set[str]) -> CertificateService | None:
    """The issuing side, with the API server's token review when agents enroll, and this controller's own
    certificate issued if it has none; None without `certificates`."""
    if config.certificates is None:
        return None
    assert config.tls is not None  # (the config's validator)
    review = None
    if config.certificates.enrollment is not None and config.kubernetes is not None:
        from ha_ops.remediation.certificates import token_reviewer
        from ha_ops.schedulers.kubernetes import client_from_kubeconfig

        review = token_reviewer(client_from_kubeconfig(config.kubernetes.kubeconfig),
                                config.certificates.enrollment.audience)  # fmt: skip
    try:
        service = CertificateService(config.certificates, config.tls, config.id, nodes, review)
    except ValueError as exc:  # the issuer's files missing or not a certificate and key: named, at start
        raise SpecError("certificates.issuer", [str(exc)]) from None
    try:
        service.keep_own()  # its own certificate, when it serves at names of its own and has none yet
    except (OSError, ValueError) as exc:
        raise SpecError("tls.cert_file", [f"cannot write this controller's own certificate: {exc}"]) from None
    return service


def make_documents(config: ControllerConfig) -> Documents:
    """Where the state, the audit log and the views are kept: ConfigMaps, or files in the shared state folder."""
    if config.kubernetes is not None and config.kubernetes.state is not None:
        from ha_ops.remediation.k8s_documents import ConfigMapDocuments
        from ha_ops.schedulers.kubernetes import client_from_kubeconfig

        where = config.kubernetes.state
        return ConfigMapDocuments(client_from_kubeconfig(config.kubernetes.kubeconfig), where.namespace, where.prefix)
    assert config.state_dir is not None  # (the config's validator)
    return DirectoryDocuments(config.state_dir)


class _Metrics(Collector):
    def __init__(self, controller: Controller) -> None:
        self.c = controller

    def collect(self) -> Iterator[Metric]:
        c = self.c
        yield _single("ha_ops_controller_leader", "1 on the leader", {"id": c.config.id}, float(c.is_leader))
        if c.certificates is not None:  # (a standby issues too)
            issued = CounterMetricFamily("ha_ops_certificates_issued", "Certificates this controller issued",
                                         labels=["id", "how"])  # fmt: skip
            for how in ("renewal", "enrollment", "own"):
                issued.add_metric([c.config.id, how], float(c.certificates.issued[how]))
            yield issued
        watches = getattr(c.executor.scheduler, "watches_synced", None)  # (the Kubernetes scheduler's caches)
        if watches is not None:
            synced = GaugeMetricFamily(
                "ha_ops_controller_watch_synced", "1 once the watch of a resource has its first list in",
                labels=["id", "resource"],
            )  # fmt: skip
            for resource, done in watches().items():
                synced.add_metric([c.config.id, resource], float(done))
            yield synced
        yield from blocked_metrics(c.blocked, c.config.id, c.clock())  # (a standby's, too)
        state = c.state
        if state is None:
            return
        yield _single(
            "ha_ops_controller_breaker_open",
            "1 while the circuit breaker is open",
            {"id": c.config.id},
            float(state.breaker.open),
        )
        ids = {"id": c.config.id}
        yield _single("ha_ops_controller_view_whole", "1 while the leader's view of the fleet is whole",
                      ids, float(bool(state.contact.sound)))  # fmt: skip
        yield _single("ha_ops_controller_suspects_held", "Nodes silent and down not found lost (a silent domain, a "
                      "mass verdict: observers.py)", ids, float(len(state.contact.held)))  # fmt: skip
        phases = GaugeMetricFamily("ha_ops_controller_node_phase", "1 for each node's phase", labels=["node", "phase"])
        for rec in state.nodes.values():
            phases.add_metric([rec.name, rec.phase.value], 1.0)
        yield phases
        counts = Counter(i.status for i in state.intents)
        intents = GaugeMetricFamily("ha_ops_controller_intents", "Intents by status", labels=["status"])
        for status in ("pending", "done", "failed", "skipped"):
            intents.add_metric([status], float(counts.get(status, 0)))
        yield intents
        yield _single(
            "ha_ops_controller_deferred", "Cordons held back", {"id": c.config.id}, float(len(state.deferred))
        )
        storage_alerts = GaugeMetricFamily(
            "ha_ops_controller_storage_alert",
            "1 for each storage alert the controller has seen firing",
            labels=["alert"],
        )
        for alert in state.storage_alerts:
            storage_alerts.add_metric([alert], 1.0)
        yield storage_alerts
        head = c.audit.head_as_written()
        yield _single("ha_ops_audit_head_seq", "The audit log's last entry", {"id": c.config.id}, float(head.seq))
        if c.shipper is not None:
            yield _single("ha_ops_audit_shipped_seq", "The last entry shipped to the sink", ids, c.shipper.shipped_seq)
            yield _single("ha_ops_audit_ship_pending", "Entries waiting for the sink", ids, c.shipper.pending())
            yield _single("ha_ops_audit_ship_dropped", "Entries lost while the sink was away", ids, c.shipper.dropped)
        yield _single(
            "ha_ops_audit_intact",
            "0 when this leader's takeover found the audit log cut or changed",
            {"id": c.config.id},
            float(not state.audit_problems),
        )
        yield _single(
            "ha_ops_controller_monitoring_down",
            "1 while the controller finds Prometheus down",
            {"id": c.config.id},
            float(state.monitoring_down_since is not None),
        )
        replace = GaugeMetricFamily(
            "ha_ops_controller_needs_replacement", "1 for nodes held for replacement", labels=["node"]
        )
        for rec in state.nodes.values():
            if rec.phase == NodePhase.AWAITING_REPAIR and rec.rung is not None and rec.rung.value == "replace":
                replace.add_metric([rec.name], 1.0)
        yield replace
        slurm = GaugeMetricFamily(
            "ha_ops_slurm_controller_up", "1 while slurmctld on the host answers scontrol ping", labels=["host"]
        )
        for host, answer in c.slurm_controllers:
            slurm.add_metric([host], float(answer == "UP"))
        yield slurm
        yield from _fleet_metrics(list(state.nodes.values()), c.clock(), c.config, state.history_since)


def _fleet_metrics(records: list[Any], now: float, config: ControllerConfig, since: float) -> Iterator[Metric]:
    """The fleet's history (history.py): incidents by cause, the nodes' MTBI, each pool's MTBI, nodes by tier."""
    by_cause = history.causes(records)
    incidents = GaugeMetricFamily(
        "ha_ops_fleet_incidents",
        "Incidents in the controller's history by cause (the latest fleet.max_incidents; survives failovers)",
        labels=["cause"],
    )
    for cause in sorted(set(history.CAUSES) | set(by_cause)):
        incidents.add_metric([cause], float(by_cause.get(cause, 0)))
    yield incidents
    window = config.fleet.mtbi_window_s
    mtbis = [m for m in (history.node_mtbi(r, now, window, since) for r in records) if m is not None]
    buckets = [(f"{le:g}", float(sum(m <= le for m in mtbis))) for le in MTBI_BUCKETS_S]
    yield HistogramMetricFamily(
        "ha_ops_fleet_mtbi_seconds",
        "Nodes' mean time between incidents over fleet.mtbi_window_s (nodes with an incident in it)",
        buckets=[*buckets, ("+Inf", float(len(mtbis)))],
        sum_value=sum(mtbis),
    )
    pools = GaugeMetricFamily(
        "ha_ops_fleet_pool_mtbi_seconds", "A pool's node-time observed over its incidents", labels=["pool"]
    )
    for name, pool in sorted(history.pool_mtbi(records, now, window, since).items()):
        if pool["mtbi_s"] is not None:
            pools.add_metric([name], pool["mtbi_s"])
    yield pools
    tiers = Counter(history.tier_of(r, now, config.fleet, config.lemon) for r in records)
    by_tier = GaugeMetricFamily("ha_ops_fleet_nodes", "Nodes by reliability tier", labels=["tier"])
    for tier in history.TIERS:
        by_tier.add_metric([tier], float(tiers.get(tier, 0)))
    yield by_tier


def _single(name: str, doc: str, labels: dict[str, str], value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=list(labels))
    family.add_metric(list(labels.values()), value)
    return family
