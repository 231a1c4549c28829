"""What arrives from outside, turned into decisions of the policy under the term (term.py): agents' reports,
Alertmanager's alerts, a person's word (repaired, breaker reset, maintenance windows, holds). Each is answered once
the state holding its decision is written.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from ha_ops.health.report import AgentReport
from ha_ops.remediation import fence_heal, policy
from ha_ops.remediation.lease import LeaseLost
from ha_ops.remediation.model import ControllerState, Maintenance
from ha_ops.remediation.runnable import Runnable
from ha_ops.remediation.term import Term
from ha_ops.schedulers.base import Scheduler, SchedulerJob

log = logging.getLogger(__name__)


def audit_maintenance(term: Term, token: int, node: str, what: str, why: str, before: Any, after: Any) -> None:
    """A maintenance window opened or closed, audited with its bounds."""

    def text(window: Maintenance | None) -> str:
        return "none" if window is None else f"until {window.until:.0f}: {window.reason}"

    term.audit(token, what, node, why, text(before), text(after))


@dataclass(eq=False)
class Inputs(Runnable):
    scheduler: Scheduler
    slurm_controllers: Callable[[], list[tuple[str, str]]]  # (the Slurm fence's last `scontrol ping`)
    jobs_seen: Callable[[], dict[str, tuple[str, ...]]]  # node -> its jobs at the decision loop's last read

    def report(self, report: AgentReport) -> dict[str, Any]:
        now = self.clock()
        began: list[str] = []

        def decide(state: ControllerState, token: int) -> policy.Outcome:
            outcome = policy.on_report(state, report, self.config, now, token)
            if outcome.burst:
                began.append(outcome.burst)
            return outcome

        answer = self.term.decide(decide)
        if began:
            self._name_burst_job(began[0])
        # The heartbeat this fleet's agents are asked for (remediation/heartbeats.py): a change is still sent at once.
        return {**answer, "heartbeat_s": self.config.agent_heartbeat_s}

    def _name_burst_job(self, burst_id: str) -> None:
        """A burst of application XIDs began: ask the scheduler once which job runs on its nodes (a crashed job may
        be gone already: then the jobs of the last read)."""
        try:
            jobs: list[Any] = list(self.scheduler.jobs())
        except Exception as exc:
            log.warning("cannot read the scheduler's jobs to name the burst's job: %s", exc)
            jobs = []
        seen: dict[str, list[str]] = {}
        for node, ids in self.jobs_seen().items():
            for job_id in ids:
                seen.setdefault(job_id, []).append(node)
        jobs += [SchedulerJob(job_id, "", tuple(nodes)) for job_id, nodes in seen.items()]
        with self.term.lock:
            if self.term.state is None:
                return
            found = policy.name_burst_job(self.term.state, burst_id, jobs)
        if found:
            log.warning("%s", found)
            with suppress(LeaseLost):  # (deposed meanwhile: the report's own decision is written already)
                self.term.persist()

    def alerts(self, alerts: list[dict[str, Any]]) -> dict[str, Any]:
        now = self.clock()

        def decide(state: ControllerState, token: int) -> policy.Outcome:
            total = policy.Outcome()
            for alert in alerts:
                one = policy.on_alert(state, alert, self.config, now, token)
                total.intents += one.intents
                total.notes += one.notes + ([f"ignored: {one.ignored}"] if one.ignored else [])
            return total

        return self.term.decide(decide)

    def repaired(self, node: str, by: str = "an operator") -> dict[str, Any]:
        now = self.clock()
        return self.term.decide(lambda state, token: policy.repaired(state, node, now, token, by))

    def reset_breaker(self, by: str = "an operator") -> dict[str, Any]:
        def decide(state: ControllerState, token: int) -> policy.Outcome:
            self.term.lease.check(token)  # a deposed leader neither closes the breaker nor audits that it did
            was = state.breaker.reason
            state.breaker.open, state.breaker.reason, state.breaker.cordons = False, "", []
            self.term.audit(token, "breaker_reset", None, f"reset by {by}", was, "closed")
            return policy.Outcome(notes=["circuit breaker closed"])

        return self.term.decide(decide)

    # --- maintenance windows (a driver rollout's batches; docs/architecture.md) --------------------------------
    def start_maintenance(self, nodes: list[str], reason: str, ttl_s: float, by: str = "an operator") -> dict[str, Any]:
        now = self.clock()

        def decide(state: ControllerState, token: int) -> policy.Outcome:
            self.term.lease.check(token)  # a deposed leader opens no window and audits none
            before = policy.start_maintenance(state, nodes, reason, ttl_s, by, now)  # ValueError: nothing changed
            for node, was in before.items():
                if was is None:  # an extension (the rollout's next step on the node) is not audited again
                    audit_maintenance(self.term, token, node, "maintenance_start", f"{reason} (by {by})", None,
                                      state.nodes[node].maintenance)  # fmt: skip
            return policy.Outcome(notes=[f"maintenance window on {', '.join(nodes)} for {ttl_s:g} s: {reason}"])

        return self.term.decide(decide)

    def end_maintenance(self, nodes: list[str], by: str = "an operator") -> dict[str, Any]:
        def decide(state: ControllerState, token: int) -> policy.Outcome:
            self.term.lease.check(token)
            closed = policy.end_maintenance(state, nodes)
            for node, window in closed.items():
                audit_maintenance(self.term, token, node, "maintenance_end", f"ended by {by}", window, None)
            return policy.Outcome(notes=[f"maintenance window ended on {', '.join(closed) or 'no node'}"])

        return self.term.decide(decide)

    def hold_host(
        self, node: str, release: bool, reason: str, by: str = "an operator", dry_run: bool = False
    ) -> dict[str, Any]:
        """A person holds a host, or releases it (`ha-ops controller hold`): a fenced host held is neither powered on
        nor restarted (fence_heal.py). ValueError for a node that is neither a controller's host nor configured."""
        now = self.clock()

        def decide(state: ControllerState, token: int) -> policy.Outcome:
            # The hosts the controllers fence: the Slurm controllers, the remediation controllers, any fenced or held.
            known = ({h for h, _ in self.slurm_controllers()} | {self.config.id} | set(state.fences) | set(state.held)
                     | {v.id for v in self.leadership.peer_views})  # fmt: skip
            if node in self.leadership.known and node not in known:
                raise ValueError(f"{node} is a GPU node, which the controllers never fence: a hold keeps a fenced "
                                 f"controller host as it is; to keep the controllers off {node}, use "
                                 "`ha-ops controller maintenance start`")  # fmt: skip
            change = fence_heal.change_hold(state.held, node, release, reason, by, now, known)
            if dry_run or change.entry is None:
                return policy.Outcome(notes=[f"dry run, nothing changed: {change.note}" if dry_run else change.note])
            self.term.lease.check(token)  # a deposed leader holds nothing and audits nothing
            state.held = change.held
            e = change.entry
            self.term.audit(token, e.what, e.node, e.why, e.before, e.after, at=now)
            return policy.Outcome(notes=[change.note])

        return self.term.decide(decide)
