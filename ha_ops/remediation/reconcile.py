"""The decision loop's tick: what the leader knows of each node (the scheduler's latest states and jobs, when its
agent was last heard by either controller) handed to policy.on_tick, and the outcome written.

A tick only decides: the actions it makes are carried out by the action pipeline (actions.py), in a runnable of its
own, so that a repair waiting minutes for a boot never delays a tick.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from ha_ops.remediation import policy
from ha_ops.remediation.inputs import audit_maintenance
from ha_ops.remediation.model import NodePhase
from ha_ops.remediation.runnable import Runnable
from ha_ops.remediation.view import last_heard
from ha_ops.schedulers.base import Scheduler

log = logging.getLogger(__name__)

ACTIVE_JOBS = ("RUNNING", "CONFIGURING", "COMPLETING")


@dataclass(eq=False)
class Reconciler(Runnable):
    scheduler: Scheduler
    # From the node-state poller (watchers.py), consumed by the next tick: {node: (state, reason)} and when that poll
    # began
    fresh_states: dict[str, tuple[str, str]] = field(default_factory=dict, init=False)
    polled_at: float = field(default=0.0, init=False)
    jobs_seen: dict[str, tuple[str, ...]] = field(default_factory=dict, init=False)  # (NodeView.jobs_before)
    # Whether the last tick read the scheduler: while it cannot, no new action starts (actions.py), as the decisions
    # behind them cannot be checked against what runs.
    scheduler_read: bool = field(default=True, init=False)

    def states_polled(self, states: dict[str, tuple[str, str]], began: float) -> None:
        """Under the lock: a poll of the scheduler's node states, for the next tick (each poll acted on once)."""
        self.fresh_states, self.polled_at = states, began

    def _views(self) -> dict[str, policy.NodeView]:
        state = self.term.state
        assert state is not None
        jobs: dict[str, list[str]] = {}
        # A cordoned node may become draining (and then drained) within this very tick: it needs its jobs too.
        # Fresh node states come with the jobs too: a node found lost names the jobs Slurm will requeue from it.
        out = (NodePhase.CORDONED, NodePhase.DRAINING)
        with self.term.lock:
            states, self.fresh_states = self.fresh_states, {}  # each poll's states are acted on once
            polled_at = self.polled_at
        before = self.jobs_seen
        if states or any(r.phase in out or (r.spare and r.in_main) for r in state.nodes.values()):
            for job in self.scheduler.jobs():
                if job.state in ACTIVE_JOBS:
                    for node in job.nodes:
                        jobs.setdefault(node, []).append(job.id)
            self.jobs_seen = {n: tuple(ids) for n, ids in jobs.items()}
        names = set(jobs) | set(states)
        heard = [self.leadership.own_view(), *self.leadership.peer_views]  # an agent heard by either is not silent
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

    def tick(self) -> bool:
        """Decide on what the leader sees now, and write the outcome (its actions wake the pipeline). False when
        there was nothing to decide on: not the leader, or the scheduler unread."""
        if not self.leadership.is_leader:
            return False
        try:
            views = self._views()
        except Exception as exc:
            log.warning("cannot read Slurm's jobs this tick: %s", exc)
            self.scheduler_read = False
            return False
        term = self.term
        with term.lock:
            if term.state is None or term.token is None:
                return False
            outcome = policy.on_tick(term.state, views, self.config, self.clock(), term.token)
            for note in outcome.notes:
                log.info("%s", note)
            for node, window in outcome.ended_maintenance:
                audit_maintenance(term, term.token, node, "maintenance_end", "expired", window, None)
            policy.compact(term.state)
        term.persist()  # (outside the lock: reports are decided while it is written)
        term.snapshot_if_due()
        self.scheduler_read = True
        term.wake_pipeline()  # (its new intents, and those ready now: as a tick once ran them)
        return True
