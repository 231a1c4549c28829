"""The rollout's Scheduler over any scheduler adapter (ha_ops.schedulers: Slurm, every call with a timeout and
retries; or Kubernetes, where a drain is a cordon with ha-ops' taint and a requeue an eviction).

The rollout drains with a reason starting "ha-ops: rollout" and resumes only nodes drained with such a reason: a
node someone else drained (the agent, the remediation controller, a person) is never returned to service by it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ha_ops.rollout.executor import DRAIN_REASON_PREFIX
from ha_ops.schedulers.base import Scheduler
from ha_ops.util.wait import wait_for

# Jobs that still hold the node (squeue %T; the Kubernetes adapter reads pods into the same words).
BUSY = frozenset({"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT"})
# sinfo %T words of a node out of service ("down*", "drained", "draining", "fail", "maint", "idle*" ...).
_OUT = ("down", "drain", "fail", "maint", "unknown", "not_responding", "power", "reboot", "*")


def out_of_service(sinfo_state: str) -> bool:
    state = sinfo_state.lower()
    return any(word in state for word in _OUT)


class RolloutScheduler:
    def __init__(
        self,
        scheduler: Scheduler,
        *,
        poll_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.scheduler = scheduler
        self.poll_s = poll_s
        self.clock = clock
        self.sleep = sleep

    def drain(self, node: str, reason: str) -> None:
        if self.scheduler.node(node).drained:
            return  # ours already (a repeated call), or someone else's: theirs to undo, not ours
        self.scheduler.drain(node, reason)

    def _busy(self, node: str) -> list[str]:
        return [job.id for job in self.scheduler.jobs_on(node) if job.state in BUSY]

    def wait_idle(self, node: str, timeout: float) -> None:
        wait_for(
            f"the jobs on {node} to end",
            lambda: not self._busy(node),
            timeout=timeout,
            interval=self.poll_s,
            clock=self.clock,
            sleep=self.sleep,
        )

    def requeue_jobs(self, node: str) -> list[str]:
        requeued = []
        for job in self.scheduler.jobs_on(node):
            if job.state in ("RUNNING", "CONFIGURING") and self.scheduler.job_requeueable(job.id):
                self.scheduler.requeue(job.id)
                requeued.append(job.id)
        return requeued

    def resume(self, node: str) -> None:
        state = self.scheduler.node(node)
        # The adapters write reasons as "ha-ops: ..."; ours go on with "rollout".
        if state.drained and state.reason.startswith(DRAIN_REASON_PREFIX):
            self.scheduler.resume(node)

    def node_healthy(self, node: str) -> bool:
        state = self.scheduler.node(node).state.upper()
        return not any(word in state for word in ("DRAIN", "DOWN", "FAIL", "NOT_RESPONDING", "MAINT", "*"))

    def unavailable(self) -> set[str]:
        states = self.scheduler.node_states_and_reasons()
        return {name for name, (state, _) in states.items() if out_of_service(state)}
