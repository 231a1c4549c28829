"""The action pipeline: the leader's ready intents carried out through the executor, several nodes' at once, each
behind the fencing check, with their results recorded in the term (term.py) and audited once.

A runnable of its own (`run`): the decision loop (reconcile.py) never waits for an action, so a reboot that waits
minutes for a node to boot holds up no lost-node verdict, timeout or report.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from contextlib import suppress
from dataclasses import dataclass
from functools import partial

from ha_ops.remediation.config import ControllerConfig
from ha_ops.remediation.executor import ActionFailed, Executor
from ha_ops.remediation.lease import LeaseLost
from ha_ops.remediation.model import Intent
from ha_ops.remediation.term import Term

log = logging.getLogger(__name__)

FLUSH_S = 0.5  # while actions run, their results are written at least this often
STOP_GRACE_S = 10.0  # how long a stopping controller waits for the actions under way
# Actions that look at the real state first and do nothing twice (executor.py): their results may wait for their
# wave's write. Any other (a GPU reset, a reboot, a validation) is written as soon as it ends.
IDEMPOTENT = frozenset({"drain", "resume", "requeue_jobs", "spare_in", "spare_out"})
RETRIED = frozenset({"drain", "resume", "spare_in", "spare_out"})  # a failure is tried again, up to 5 attempts


@dataclass(frozen=True)
class ActionResult:
    """One action carried out: how it ended, what the executor said, and the node before and after."""

    intent: Intent
    token: int
    status: str  # done, failed, skipped
    result: str
    before: str
    after: str


class ActionPipeline:
    def __init__(
        self,
        term: Term,
        config: ControllerConfig,
        executor: Executor,
        stop: threading.Event,
        clock: Callable[[], float],
        may_start: Callable[[], bool] = lambda: True,
    ) -> None:
        self.term = term
        self.may_start = may_start  # False while the decision loop cannot read the scheduler (reconcile.py)
        self.config = config
        self.executor = executor
        self.stop = stop
        self.clock = clock

    def run(self) -> None:
        """The runnable: carry out what is ready, then wait for new intents (or a retry's time, within a tick)."""
        while not self.stop.is_set():
            arrived = self.term.arrivals()  # (before the pending are read: an intent made meanwhile wakes it)
            try:
                if self.may_start():  # (as a tick that cannot read the scheduler ran no action)
                    self.run_pending()
            except LeaseLost as exc:
                log.warning("stopped acting: %s", exc)
            except Exception:
                log.exception("the action pipeline failed; it goes on")
            wait([arrived], timeout=self.config.tick_s)

    def run_pending(self) -> None:
        """Carry out the ready intents, on different nodes at once (one node's intents in order: its jobs are not
        requeued before its drain succeeded), within the limits of within_limits, until none is ready or running.

        A pipeline, not waves: an action that ends frees its slot for the next ready one at once. Writes are batched,
        with two rules kept: an intent is in the shared state before it is acted on (a successor knows of every
        action begun: Term.durable), and a finished intent is audited before the state that records it is written.
        Results are written together (one audit append, one state write) at most FLUSH_S apart while actions run,
        and when the last one ends; an action that is not idempotent (a GPU reset, a reboot) is written as soon as
        it ends. Every write runs outside the state lock, so reports are decided meanwhile. A storm of 150 drains
        costs a few writes, not 300. A leader that dies between a drain and its write leaves the intent pending: its
        successor runs it again, and the executor finds the node drained and audits it once."""
        term = self.term
        running: dict[Future[list[ActionResult]], list[Intent]] = {}  # each a batch (drains, resumes or requeues
        # of many nodes in one scheduler call, where the scheduler takes a list), or one intent
        unwritten = False  # results recorded since the last write
        flush_at = time.monotonic() + FLUSH_S
        try:
            while not self.stop.is_set():
                arrived = term.arrivals()  # (before the pending are read: an intent made after is not missed)
                with term.lock:
                    if term.state is None or term.token is None:
                        return
                    token, now = term.token, self.clock()
                    ready, blocked = [], {intent.node for batch in running.values() for intent in batch}
                    for i in term.state.pending():
                        if i.node not in blocked and i.not_before <= now:
                            ready.append(i)
                        blocked.add(i.node)
                    batches = self.within_limits(ready, list(running.values()))
                    new = any(not term.durable(i) for batch in batches for i in batch)
                if new or (unwritten and not running):
                    term.persist()  # the new intents (durable before they start), the results so far
                    unwritten, flush_at = False, time.monotonic() + FLUSH_S
                elif unwritten and time.monotonic() >= flush_at:
                    term.flush_in_background()  # (the results of actions that look before they act: no hurry)
                    unwritten, flush_at = False, time.monotonic() + FLUSH_S
                with term.lock:  # (in the state: the policy's timeouts wait for an action under way)
                    for batch in batches:
                        for intent in batch:
                            intent.running = token
                for batch in batches:
                    running[self._start(batch, token)] = batch
                if not running:
                    return
                # Until an action ends, new intents arrive (a report), or the results so far are due to be written.
                timeout = max(0.0, flush_at - time.monotonic()) if unwritten else FLUSH_S
                done, _ = wait([*running, arrived], timeout=timeout, return_when=FIRST_COMPLETED)
                finished = [future for future in running if future in done]
                for future in finished:
                    del running[future]
                results, raised = [], None
                for future in finished:  # (each on its own: one that raised loses none of the others)
                    try:
                        results.extend(future.result())
                    except BaseException as exc:
                        raised = raised or exc
                self.record(results)
                if raised is not None:
                    raise raised
                unwritten = unwritten or bool(results)
                if any(r.intent.kind not in IDEMPOTENT for r in results):
                    term.persist()
                    unwritten, flush_at = False, time.monotonic() + FLUSH_S
        finally:
            # Stopping: the actions under way get a grace to end and be recorded (a validation waiting for a node
            # to boot may not end for minutes: its thread is left behind, and the intent stays pending).
            if running:
                done, _ = wait(running, timeout=STOP_GRACE_S)
                with suppress(Exception):
                    self.record([r for f in done if f.exception() is None for r in f.result()])

    def _start(self, batch: list[Intent], token: int) -> Future[list[ActionResult]]:
        """An action (or a batch) in a thread of its own (a daemon: a stopping controller does not wait for a node
        to boot)."""
        future: Future[list[ActionResult]] = Future()

        def work() -> None:
            try:
                future.set_result(self.act_batch(batch, token))
            except BaseException as exc:
                future.set_exception(exc)

        name = f"action-{batch[0].kind}-{batch[0].node}" + (f"-and-{len(batch) - 1}" if len(batch) > 1 else "")
        threading.Thread(target=work, name=name, daemon=True).start()
        return future

    def within_limits(self, ready: list[Intent], running: list[list[Intent]]) -> list[list[Intent]]:
        """The scheduler's actions (a cordon is what a storm waits for) first, up to `parallel_actions`; repairs
        on the nodes (resets, reboots, validations that may wait minutes for a boot) up to `parallel_repairs`, in
        their own slots, so that they never hold up a drain. Drains, resumes and requeues go as batches where the
        scheduler takes a list (Slurm; up to its batch_limit), each batch one slot: one call, however many nodes."""
        room = {
            True: self.config.parallel_actions - sum(b[0].kind in IDEMPOTENT for b in running),
            False: self.config.parallel_repairs - sum(b[0].kind not in IDEMPOTENT for b in running),
        }
        out = []
        # Drains first (a cordon is what a storm waits for: it stops new work landing on a failing node), then the
        # other scheduler actions, then repairs; stable, so in order within each.
        for batch in self.batched(sorted(ready, key=lambda i: (i.kind not in IDEMPOTENT, i.kind != "drain"))):
            if room[batch[0].kind in IDEMPOTENT] > 0:
                room[batch[0].kind in IDEMPOTENT] -= 1
                out.append(batch)
        return out

    def batched(self, ready: list[Intent]) -> list[list[Intent]]:
        """The ready intents as batches, in order: those of a kind the executor batches (batch_limit above 1), in
        chunks of up to that limit where they first appear; every other intent on its own."""
        out: list[list[Intent]] = []
        open_batch: dict[str, list[Intent]] = {}
        for intent in ready:
            limit = self.executor.batch_limit(intent)
            batch = open_batch.get(intent.kind)
            if limit > 1 and batch is not None and len(batch) < limit:
                batch.append(intent)
                continue
            out.append([intent])
            if limit > 1:
                open_batch[intent.kind] = out[-1]
        return out

    def act_batch(self, batch: list[Intent], token: int) -> list[ActionResult]:
        """A batch's intents through one executor call, behind one fencing check; one intent through act()."""
        if len(batch) == 1:
            return [self.act(batch[0], token)]
        self.term.lease.check(token)  # a frozen or deposed leader stops here
        names = [i.node for i in batch]
        read = self.executor.read(names)  # (the audit's "before", and what the batch decides on)
        before = self.executor.describe(names, read)
        if self.config.safety.dry_run:
            skipped = "dry-run: not carried out"
            return [ActionResult(i, token, "skipped", skipped, before[i.node], before[i.node]) for i in batch]
        fenced = partial(self.term.lease.check, token)  # (before each, if the batch goes one by one)
        outcomes = self.executor.run_batch(batch, None if isinstance(read, Exception) else read, fenced)
        after = self.executor.describe(names)
        results = []
        for intent in batch:
            outcome = outcomes.get(intent.id, ActionFailed("the batch gave no result for it"))
            status, result = ("failed", str(outcome)) if isinstance(outcome, Exception) else ("done", outcome)
            log.info("%s %s: %s (%s; in a batch of %d)", intent.kind, intent.node, status, result, len(batch))
            results.append(ActionResult(intent, token, status, result, before[intent.node], after[intent.node]))
        return results

    def act(self, intent: Intent, token: int) -> ActionResult:
        """One action, behind the fencing check."""
        dry = self.config.safety.dry_run
        if intent.args.get("release") and not self._succeeded(intent.args.get("fence")):
            # Unfenced, the lost node may still run these jobs: leave them to Slurm's own hold (cred_expire).
            intent = intent.model_copy(update={"args": {**intent.args, "release": []}})
        self.term.lease.check(token)  # a frozen or deposed leader stops here
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
        return ActionResult(intent, token, status, result, before, after)

    def record(self, results: list[ActionResult]) -> None:
        """Results into the state, in memory; each finished intent's audit entry kept for the next write (once:
        not again after a failover)."""
        term = self.term
        with term.lock:
            audited = term.audited_intents()
            for done in results:
                intent = done.intent
                if term.state is None or term.token != done.token:
                    return
                stored = next((i for i in term.state.intents if i.id == intent.id), None)
                if stored is None:
                    continue
                stored.running = 0
                stored.attempts += 1
                if done.status == "failed" and intent.kind in RETRIED and stored.attempts < 5:
                    stored.not_before = self.clock() + min(30.0, 0.5 * 2**stored.attempts)
                    stored.result = f"attempt {stored.attempts} failed: {done.result}"
                    continue
                stored.status, stored.result = done.status, done.result  # type: ignore[assignment]
                if intent.id not in audited:
                    audited.add(intent.id)
                    what = f"dry-run {intent.kind}" if self.config.safety.dry_run else intent.kind
                    term.audit(done.token, what, intent.node, intent.why, done.before,
                               f"{done.after}; {done.result}", intent=intent.id)  # fmt: skip

    def _succeeded(self, intent_id: str | None) -> bool:
        with self.term.lock:
            state = self.term.state
            found = next((i for i in (state.intents if state else []) if i.id == intent_id), None)
        return found is not None and found.status == "done"
