"""The leader's watchers, each a runnable in a thread of its own: the scheduler's node states (a hung slurmctld must
not stall the decisions) and the monitoring's dead man's switch. (The Slurm fence and its heal: fencing.py.)"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from ha_ops.remediation import monitoring_watch
from ha_ops.remediation.config import MonitoringWatch
from ha_ops.remediation.reconcile import Reconciler
from ha_ops.remediation.runnable import Runnable
from ha_ops.schedulers.base import Scheduler

log = logging.getLogger(__name__)


@dataclass(eq=False)
class NodeStates(Runnable):
    """Slurm's (or Kubernetes') node states, read apart from the tick, for the next tick."""

    reconciler: Reconciler
    scheduler: Scheduler
    on_poll: Callable[[], None]  # the decision loop ticks at once

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(self.config.node_states_poll_s):
            began = self.clock()
            try:
                states = self.scheduler.node_states_and_reasons()
            except Exception as exc:
                log.warning("cannot read the scheduler's node states: %s", exc)
                continue
            with self.term.lock:
                self.leadership.slurm_ok_at = self.clock()  # the standby reads too: its view must be current
                if not self.leadership.is_leader:
                    continue
                self.reconciler.states_polled(states, began)
            self.on_poll()


@dataclass(eq=False)
class MonitoringWatcher(Runnable):
    """A dead man's switch for the monitoring: while Prometheus does not answer, the leader records it (state,
    metric, status) and raises HaOpsPrometheusDown on Alertmanager, which Prometheus can no longer do."""

    watch: MonitoringWatch
    fails: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        # Built here, so that a certificate that does not load stops the controller at start, naming the files.
        self.via = monitoring_watch.session(self.watch)

    def run(self, stop: threading.Event) -> None:
        watch, via, term = self.watch, self.via, self.term
        while not stop.wait(watch.poll_s):
            healthy = monitoring_watch.prometheus_healthy(watch, via=via)
            self.fails = 0 if healthy else self.fails + 1
            if not self.leadership.is_leader:
                continue
            down = self.fails >= watch.fail_after
            with term.lock:
                if term.state is None or term.token is None:
                    continue
                was = term.state.monitoring_down_since
                if down and was is None:
                    term.state.monitoring_down_since = self.clock()
                    log.error("Prometheus has not answered %d polls: monitoring is down", self.fails)
                elif not down and was is not None:
                    term.state.monitoring_down_since = None
                    log.warning("Prometheus answers again after %.0f s", self.clock() - was)
                term.save()
                since = term.state.monitoring_down_since
            if since is not None:
                monitoring_watch.raise_alert(watch, self.config.id, since, via=via)
