"""The remediation controller: a manager of small runnables over one term.

wiring.py opens the parts (lease, documents, clients, certificates); the term (term.py) holds the leader's state,
token and lock and writes them; the runnables share it and own nothing else of it:

- leadership (leadership.py): the lease step and the views, every `lease_renew_s`, and the leader's renewals in a
  runnable of their own (never behind the step);
- the decision loop (reconcile.py): a tick every `tick_s`, or at once when something arrives;
- the action pipeline (actions.py): the ready intents carried out, several nodes' at once, never holding up a tick;
- the watchers (watchers.py, fencing.py): the scheduler's node states, the Slurm fence and its heal, the monitoring;
- reliability tiers (tiers.py), published in rounds of their own;
- the HTTP servers (server.py) over the inputs (inputs.py) and this facade.

State lives on shared storage, so the next leader continues where the last one stopped.
"""

from __future__ import annotations

import gc
import logging
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry

from ha_ops.health.report import AgentReport
from ha_ops.remediation import safety
from ha_ops.remediation.actions import STOP_GRACE_S, ActionPipeline
from ha_ops.remediation.config import ControllerConfig
from ha_ops.remediation.executor import Executor
from ha_ops.remediation.fencing import SlurmFencing
from ha_ops.remediation.inputs import Inputs
from ha_ops.remediation.leadership import Leadership
from ha_ops.remediation.lease import LeaseLost
from ha_ops.remediation.metrics import ControllerMetrics
from ha_ops.remediation.model import ControllerState
from ha_ops.remediation.reconcile import Reconciler
from ha_ops.remediation.term import Term
from ha_ops.remediation.tiers import TierPublisher
from ha_ops.remediation.view import View
from ha_ops.remediation.watchers import MonitoringWatcher, NodeStates
from ha_ops.remediation.wiring import Parts, open_parts
from ha_ops.schedulers.base import ControllerPing, Scheduler

log = logging.getLogger(__name__)


def open_controller(config: ControllerConfig, executor: Executor, clock: Callable[[], float] = time.time) -> Controller:
    """A controller over the parts its config names, opened (wiring.py: where the I/O of opening is)."""
    return Controller(config, executor, open_parts(config, clock), clock)


class Controller:
    def __init__(
        self, config: ControllerConfig, executor: Executor, parts: Parts, clock: Callable[[], float] = time.time
    ) -> None:
        self.config = config
        self.executor = executor
        self.clock = clock
        self.lease, self.documents, self.store = parts.lease, parts.documents, parts.store
        self.snapshots, self.audit = parts.snapshots, parts.audit
        self.certificates, self.shipper = parts.certificates, parts.shipper
        self._stop = threading.Event()
        self._work = threading.Event()  # the decision loop ticks at once
        self._serving = False  # (run: a process serving, not a test)
        self.term = Term(config.id, self.lease, self.store, self.audit, self.snapshots, clock)
        self.term.on_intents = self._work.set
        self.leadership = Leadership(config, self.term, self.lease, self.documents, self.audit, parts.leader_label,
                                     clock)  # fmt: skip
        self.leadership.on_term = self._term_began
        self.blocked = self.leadership.blocked
        scheduler = executor.scheduler
        shared = (config, self.term, self.leadership, clock)  # (runnable.py: what every runnable is given)
        self.reconciler = Reconciler(*shared, scheduler)
        self.fencing = SlurmFencing(*shared, self._ping(scheduler), executor)
        self.inputs = Inputs(*shared, scheduler, lambda: self.fencing.slurm_controllers,
                             lambda: self.reconciler.jobs_seen)  # fmt: skip
        self.actions = ActionPipeline(self.term, config, executor, self._stop, clock,
                                      lambda: self.reconciler.scheduler_read)  # fmt: skip
        self.tiers = TierPublisher(config, self.term, scheduler, clock)
        self.node_states = NodeStates(*shared, self.reconciler, scheduler, self._work.set)
        watch = config.monitoring
        self.monitoring = MonitoringWatcher(*shared, watch) if watch else None
        self.registry = CollectorRegistry()
        self.registry.register(ControllerMetrics(self))

    def _term_began(self) -> None:
        """A new term: no action starts before its first tick has read the scheduler (the predecessor's pending
        intents included), and that tick comes at once."""
        self.reconciler.scheduler_read = False
        self._work.set()
        if self._serving:
            # The term's state lives as long as the term: out of the collector's full scans, which at 5,000 nodes
            # held every thread for 26 ms (130 ms at 25,000) at random moments of the reports' path. (Not in tests:
            # a process that makes many controllers would keep each one's garbage cycles.)
            gc.freeze()

    def _ping(self, scheduler: Scheduler) -> Callable[[], list[tuple[str, str]]]:
        def ping() -> list[tuple[str, str]]:
            if not isinstance(scheduler, ControllerPing):
                raise TypeError(f"the {self.config.scheduler} scheduler has no controllers to ping")
            return scheduler.controllers()

        return ping

    # --- what the API, the metrics and the tests read --------------------------------------------------------
    @property
    def state(self) -> ControllerState | None:
        return self.term.state

    @property
    def token(self) -> int | None:
        return self.term.token

    @property
    def records_unwritten(self) -> int:
        """Node records a new leader read from an older state and has not yet written to their own place (written
        in the background after a takeover of more than leadership.PRELOAD_AT_TAKEOVER nodes)."""
        return len(self.term.nodes.preload)

    @property
    def scheduler(self) -> Scheduler:
        return self.executor.scheduler

    @property
    def is_leader(self) -> bool:
        return self.leadership.is_leader

    @property
    def slurm_controllers(self) -> list[tuple[str, str]]:
        return self.fencing.slurm_controllers

    @property
    def slurm_ok_at(self) -> float:
        return self.leadership.slurm_ok_at

    def leader_name(self) -> str:
        return self.leadership.leader_name()

    def own_view(self) -> View:
        return self.leadership.own_view()

    def lease_step(self) -> None:
        self.leadership.step()

    def heard_from(self, node: str) -> None:
        self.leadership.heard_from(node)

    # --- inputs (inputs.py) ------------------------------------------------------------------------------------
    def handle_report(self, report: AgentReport) -> dict[str, Any]:
        return self.inputs.report(report)

    def handle_alerts(self, alerts: list[dict[str, Any]]) -> dict[str, Any]:
        return self.inputs.alerts(alerts)

    def handle_repaired(self, node: str, by: str = "an operator") -> dict[str, Any]:
        return self.inputs.repaired(node, by)

    def reset_breaker(self, by: str = "an operator") -> dict[str, Any]:
        return self.inputs.reset_breaker(by)

    def start_maintenance(self, nodes: list[str], reason: str, ttl_s: float, by: str = "an operator") -> dict[str, Any]:
        return self.inputs.start_maintenance(nodes, reason, ttl_s, by)

    def end_maintenance(self, nodes: list[str], by: str = "an operator") -> dict[str, Any]:
        return self.inputs.end_maintenance(nodes, by)

    def hold_host(
        self, node: str, release: bool, reason: str, by: str = "an operator", dry_run: bool = False
    ) -> dict[str, Any]:
        return self.inputs.hold_host(node, release, reason, by, dry_run)

    # --- one step of everything, in this thread (tests, and one-shot use) --------------------------------------
    def tick(self) -> None:
        """Decide, carry out what is ready until nothing runs, and publish the tiers due. The running controller
        does these in runnables of their own (run), so that no action holds up a decision."""
        if not self.reconciler.tick():
            return
        self.actions.run_pending()
        self.tiers.in_background()

    def run_pending(self) -> None:
        self.actions.run_pending()

    def publish_tiers(self) -> int:
        return self.tiers.publish_round()

    # --- running ---------------------------------------------------------------------------------------------
    def stop(self) -> None:
        self._stop.set()
        self._work.set()
        self.term.wake_pipeline()

    def run(self) -> None:
        from ha_ops.remediation.server import serve, serve_public

        self._serving = True
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: self.stop())
        if self.config.tls is None:
            log.warning("%s serves its API over plain HTTP (insecure: true): anyone who reaches port %d may report, "
                        "mark nodes repaired or drain them", self.config.id, self.config.port)  # fmt: skip
        servers = [serve(self, self.config.listen_address, self.config.port)]
        if self.certificates is not None:
            self._runnable("certificates", self.certificates.run)
            if (enrollment := self.certificates.config.enrollment) is not None:
                servers.append(serve_public(self, self.config.listen_address, enrollment.port))
        for server in servers:
            threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
        self._runnable("lease", self.leadership.run)
        self._runnable("lease-renewal", self.leadership.renew_run)
        self._runnable("node-states", self.node_states.run)
        actions = self._runnable("actions", lambda _stop: self.actions.run())
        if self.shipper is not None:
            self.shipper.start()
        if self.config.slurm_fence.enabled and self.config.scheduler == "slurm":  # (Slurm's controllers only)
            self._runnable("slurm-fence", self.fencing.run)
            self._runnable("slurm-fence-heal", self.fencing.heal_run)
        if self.monitoring is not None:
            self._runnable("monitoring", self.monitoring.run)
        log.warning("controller %s listening on %s:%d", self.config.id, self.config.listen_address, self.config.port)
        try:
            self._decision_loop()
        finally:
            # The actions under way end (or their grace runs out) before the lease is released: a successor must not
            # start the same reset or reboot while this process still carries it out.
            actions.join(STOP_GRACE_S + 5.0)
            for server in servers:
                server.shutdown()
                server.server_close()
            if self.shipper is not None:
                self.shipper.stop()
            if self.is_leader:
                self.lease.release()
            if self.leadership.leader_label is not None:
                self.leadership.leader_label.mark(False)

    def _runnable(self, name: str, run: Callable[[threading.Event], object]) -> threading.Thread:
        thread = threading.Thread(target=run, args=(self._stop,), name=name, daemon=True)
        thread.start()
        return thread

    def _decision_loop(self) -> None:
        """A tick every tick_s, or at once when a report, a poll or a new term wakes it; never waiting for an action
        (the pipeline carries them out)."""
        while not self._stop.is_set():
            self._work.wait(self.config.tick_s)
            self._work.clear()
            try:
                if self.reconciler.tick():
                    self.tiers.in_background()
            except LeaseLost as exc:
                log.warning("stopped acting: %s", exc)
            except Exception:
                log.exception("tick failed; the controller keeps running")

    # --- views ----------------------------------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        leadership = self.leadership
        with self.term.lock:
            state = self.term.state
            data: dict[str, Any] = {
                "id": self.config.id,
                "leader": self.is_leader,
                "leader_name": self.leader_name(),
                "token": self.term.token,
                "views": [v.model_dump(mode="json") for v in (self.own_view(), *leadership.peer_views)],
                "blocked": self.blocked.describe(self.clock()),  # why it won the lease but could not lead
            }
            if state is not None:
                data["state"] = state.model_dump(mode="json")
                data["safety"] = safety.summary(state, self.config.safety)
                data["observers"] = state.contact.summary(state.leading_since)  # (observers.py: silence trusted?)
        return data
