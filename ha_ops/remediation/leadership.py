"""Leadership: the lease step (renew, or try to take the lease), this controller's view of the cluster published
beside its peers' (view.py), the step down of a blind leader, and the takeover that begins a term (term.py).

Two runnables. `run`: a step every `lease_renew_s` while leading, more often while standing by. `renew_run`: the
leader's renewals on their own cadence, every `lease_renew_s` from the last one's start, never behind the step (its
views on a loaded API server, the term's lock held by a tick over 25,000 nodes): behind them a 3 s lease ran out 16 s
after a takeover at 25,000 nodes. It only renews, never takes the lease, and stops renewing when the step has not
finished for STEP_STALL_S (a deadlock, storage that hangs): then the lease runs out and a peer takes over, as before.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from ha_ops.remediation import policy
from ha_ops.remediation.audit import AuditHead, AuditLog
from ha_ops.remediation.blocked import BlockedTracker, fresh_window
from ha_ops.remediation.config import ControllerConfig
from ha_ops.remediation.documents import Documents
from ha_ops.remediation.lease import LeaderLease, LeaseLost
from ha_ops.remediation.store import StateError
from ha_ops.remediation.term import Term
from ha_ops.remediation.view import View, ViewStore, should_yield

if TYPE_CHECKING:
    from ha_ops.remediation.k8s_lease import LeaderLabel

log = logging.getLogger(__name__)

# Records new to the state (stored nowhere yet) that a takeover still writes before its core; more are written just
# after it (a fleet of 25,000 first led: 256 shards, longer than a lease term on a busy API server).
PRELOAD_AT_TAKEOVER = 5_000
# A leader whose lease step has not finished for this long is stuck, not slow: its renewals stop (a 25,000-node
# tick holds the term's lock for seconds, not a minute).
STEP_STALL_S = 60.0


class Leadership:
    def __init__(
        self,
        config: ControllerConfig,
        term: Term,
        lease: LeaderLease,
        documents: Documents,
        audit: AuditLog,
        leader_label: LeaderLabel | None,
        clock: Callable[[], float],
    ) -> None:
        self.config = config
        self.term = term
        self.lease = lease
        self.documents = documents
        self.audit = audit
        self.leader_label = leader_label
        self.clock = clock
        self.views = ViewStore(documents, config.id)
        self.blocked = BlockedTracker(fresh_window(config.lease_ttl_s, config.lease_renew_s))  # (blocked.py)
        self.known = config.node_names()
        self.peer_views: list[View] = []  # as read at the last lease step
        self.slurm_ok_at = 0.0  # the last successful read of Slurm's node states
        self.heard: dict[str, float] = {}  # node -> when its agent's report last arrived here (leader or standby)
        # Its own lock, not the term's: a report is heard at once, never behind a tick that holds the term's lock
        # over 25,000 nodes (issue 43: a fifth of the busy time at 25,000 nodes was reports waiting there).
        self.heard_lock = threading.Lock()
        self.on_term: Callable[[], None] = lambda: None  # a term began (app.py: the loops start at once)
        self.renewed_at = 0.0  # when the lease was last renewed or taken (the step renews only when one is due)
        self.stepped_at = clock()  # when the lease step last finished (renew_run stops renewing for a stuck one)

    # --- what this controller sees ------------------------------------------------------------------------------
    @property
    def is_leader(self) -> bool:
        # Past its last renewal's expiry it says so at once, even while a renewal hangs on storage it cannot reach.
        return self.term.token is not None and self.term.state is not None and self.lease.current()

    def leader_name(self) -> str:
        record = self.lease.read()
        return record.holder if record and record.expires_at > self.clock() else ""

    def own_view(self) -> View:
        with self.heard_lock:
            agents = dict(self.heard)
        return View(id=self.config.id, at=self.clock(), slurm_ok_at=self.slurm_ok_at, agents=agents)

    def last_heard(self) -> float:
        """When this controller last heard an agent itself (0 if never)."""
        with self.heard_lock:
            return max(self.heard.values(), default=0.0)

    def heard_from(self, node: str) -> None:
        """An agent's report arrived (accepted, or refused by a standby): the agent reaches this controller."""
        if node in self.known:  # (a report naming a node not configured is refused later; it must not grow the view)
            with self.heard_lock:
                self.heard[node] = self.clock()

    def _compare_views(self) -> View | None:
        """Publish this controller's view; return a peer that hears agents while this one hears none, if any."""
        own = self.own_view()
        try:
            # (a standby's agents as long as a reader can count them heard: twice the silence window, which the
            # config keeps over blind_after_s)
            self.views.write(own.published(self.is_leader, 2 * self.config.agent_silence_s))
            self.peer_views = self.views.peers()
        except OSError as exc:
            log.error("views: shared storage error: %s", exc)
            self.peer_views = []
        return should_yield(own, self.peer_views, own.at, self.config.blind_after_s)

    # --- the lease ----------------------------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.step()
            stop.wait(self.config.lease_renew_s if self.is_leader else min(0.5, self.config.lease_renew_s))

    def renew_run(self, stop: threading.Event) -> None:
        """The leader's renewals, every `lease_renew_s` from the start of the last, whatever the step is doing."""
        while not stop.is_set():
            started = self.clock()
            self.renew_if_due()
            stop.wait(max(0.05, self.config.lease_renew_s - (self.clock() - started)))

    def renew_if_due(self) -> bool | None:
        """Renew the held lease when a renewal is due: True renewed (or not due yet and still current), False lost,
        None when no lease is held (then the step decides whether to take it) or the step is stuck."""
        token = self.lease.token
        if token is None or self.clock() - self.stepped_at > STEP_STALL_S:
            return None
        if self.clock() - self.renewed_at < self.config.lease_renew_s:
            return self.lease.current()
        return self._leads(lambda: self.lease.renew(token))

    def step(self) -> None:
        self._step()
        self.stepped_at = self.clock()
        if self.leader_label is not None:
            self.leader_label.mark(self.is_leader)

    def _step(self) -> None:
        # A leader renews first (when renew_run has not just done so): its view is written and its peers' read
        # through the same storage or API, and behind them, on an API server loaded by 25,000 nodes, the renewal of a
        # 3 s lease came too late. (A standby looks at the views first: a blind one must not take the lease.)
        renewed = self.renew_if_due() if self.is_leader else None
        better = self._compare_views()
        if better is not None:
            # Blind next to a peer that is not: lead nothing, so that the peer takes the lease.
            if self.is_leader:
                self._step_down(better)
            return
        leading = renewed if renewed is not None else self._acquire_or_renew()
        term = self.term
        with term.lock:
            if leading and term.token != self.lease.token:
                try:
                    self._take_over()
                except Exception as exc:
                    # Unreadable state: lead nothing rather than act on a guess; the other controller may do better.
                    # Kept for the metric and the description (blocked.py), and tried again at the next lease step:
                    # a state put back is taken up without a restart.
                    if self.blocked.failed(exc, self.documents.describe(term.store.name), self.clock()):
                        log.error("%s cannot take over: %s; releasing the lease (tried again at each lease step)",
                                  self.config.id, exc)  # fmt: skip
                    term.end()
                    self.lease.release()
            elif not leading and term.token is not None:
                log.warning("%s lost the lease; standing by", self.config.id)
                term.end()

    def _acquire_or_renew(self) -> bool:
        return self._leads(self.lease.acquire_or_renew)

    def _leads(self, attempt: Callable[[], bool]) -> bool:
        """A call on the lease: True while this controller leads (the renewal noted); a storage error is a lost
        renewal, logged."""
        try:
            leading = attempt()
        except OSError as exc:
            log.error("lease: shared storage error: %s", exc)
            return False
        if leading:
            self.renewed_at = self.clock()
        return leading

    def _step_down(self, better: View) -> None:
        now = self.clock()
        window = self.config.blind_after_s
        why = f"{self.own_view().describe(now, window)}, while {better.describe(now, window)}"
        term = self.term
        with term.lock:
            token = term.token
            if token is None:
                return
            try:
                self.lease.check(token)
                term.audit(token, "lease_step_down", None, why, "leader", f"released the lease for {better.id}", at=now)
                term.save()
            except (LeaseLost, OSError) as exc:
                log.warning("stepping down without an audit entry: %s", exc)
            log.error("%s steps down: %s", self.config.id, why)
            term.end()
            self.lease.release()

    def _take_over(self) -> None:
        """Under the lock: begin a term with the state as stored, its audit chain checked."""
        term = self.term
        token = self.lease.token
        assert token is not None
        state, stored = term.store.load_stored()
        policy.init_state(state, self.config, self.clock())
        state.leading_since = self.clock()
        # The log read afresh (its predecessor may have written after its last save) and its chain checked against
        # the head the state recorded: a cut or edited log is found here, at every takeover, not adopted.
        # And against the head the lease records, as the last leader saved it (carried over when this controller
        # took the lease): a record outside the log and the state, so that deleting or cutting both is seen too.
        anchor = self.lease.audit_head
        recorded = AuditHead(state.audit_seq, state.audit_hash)
        problems, cut_below_lease = self.audit.resume(recorded, state.audit_head_mac, anchor)
        if cut_below_lease and anchor is not None and state.audit_seq == 0 and not term.store.exists():
            # The log and the state both gone (or the log cut and the state removed): what was done is lost with
            # them. Lead nothing until a person restores the state (or accepts the loss: a restore from nothing).
            where = self.documents.describe(term.store.name)
            raise StateError(f"controller state {where} is missing and the audit log does not hold the head the "
                             f"lease records (seq {anchor.seq}): both were removed or cut; check the log (ha-ops "
                             "audit verify), then restore the state (ha-ops controller state restore)")  # fmt: skip
        if state.audit_seq == 0 and (logged := self.audit.head_as_written().seq) > 0 and not term.store.exists():
            # No state, but a log of past actions: the state was removed, not never written. Forgetting what was
            # done (nodes out of service, a fence under way) is worse than leading nothing until it is restored.
            # (A state at seq 0 beside a longer log is only a leader killed between its first audit and its next
            # save: the log read afresh above carries it on.)
            where = self.documents.describe(term.store.name)
            raise StateError(f"controller state {where} is missing while the audit log holds {logged} entries; "
                             "restore it (ha-ops controller state restore)")  # fmt: skip
        state.audit_problems = problems[:20]
        term.begin(token, state, stored)
        if problems:
            log.error("the audit log is not intact: %s", "; ".join(problems[:5]))
            term.audit(token, "audit_chain_broken", None, "; ".join(problems[:5])[:2000], f"seq {state.audit_seq}",
                       "the chain goes on from the state's head")  # fmt: skip
        # Loading a large state takes a new leader a while (25,000 nodes on Kubernetes: longer than a 3 s lease):
        # the lease is renewed before the term's first write, so that the write is not refused for a term the
        # loading used up. (Renewed as the holder, with the same token: nobody else took it meanwhile.)
        if not self.lease.renew(token):
            raise LeaseLost(f"{self.config.id} lost the lease while taking over")
        self.renewed_at = self.clock()
        term.snapshots.begin_term()  # (the term's first write is snapshotted: a state that loaded)
        # A large fleet new to the state (25,000 fresh records: 256 shards of them) has its records written right
        # after the takeover, in the background: on a busy API server they took longer than a lease term.
        defer = stored.may_defer_preload() and len(term.nodes.preload) > PRELOAD_AT_TAKEOVER
        term.save(defer_preload=defer)
        pending = len(state.pending())
        if (was := self.blocked.cleared()) is not None:
            log.warning("%s took over after %d failed attempt(s) since %.0f: %s", self.config.id, was.attempts,
                        was.since, was.error)  # fmt: skip
        log.warning("%s is the leader (token %d); %d pending intent(s) to finish", self.config.id, token, pending)
        if defer:
            term.flush_in_background()
        self.on_term()
