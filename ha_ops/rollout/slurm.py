"""The rollout's Scheduler over Slurm (ha_ops.schedulers.slurm: every call with a timeout and retries).

The rollout drains with a reason starting "ha-ops: rollout" and resumes only nodes drained with such a reason: a
node someone else drained (the agent, the remediation controller, a person) is never returned to service by it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ha_ops.rollout.executor import DRAIN_REASON_PREFIX
from ha_ops.schedulers.slurm import Slurm
from ha_ops.util.wait import wait_for

# Jobs that still hold the node (squeue %T).
BUSY = frozenset({"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT"})
# sinfo %T words of a node out of service ("down*", "drained", "draining", "fail", "maint", "idle*" ...).
_OUT = ("down", "drain", "fail", "maint", "unknown", "not_responding", "power", "reboot", "*")


def out_of_service(sinfo_state: str) -> bool:
    state = sinfo_state.lower()
    return any(word in state for word in _OUT)


class SlurmScheduler:
    def __init__(
        self,
        slurm: Slurm,
        *,
        poll_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.slurm = slurm
        self.poll_s = poll_s
        self.clock = clock
        self.sleep = sleep

    def drain(self, node: str, reason: str) -> None:
        if self.slurm.node(node).drained:
            return  # ours already (a repeated call), or someone else's: theirs to undo, not ours
        self.slurm.drain(node, reason)

    def _busy(self, node: str) -> list[str]:
        return [job.id for job in self.slurm.jobs_on(node) if job.state in BUSY]

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
        for job in self.slurm.jobs_on(node):
            if job.state in ("RUNNING", "CONFIGURING") and self.slurm.job_requeueable(job.id):
                self.slurm.requeue(job.id)
                requeued.append(job.id)
        return requeued

    def resume(self, node: str) -> None:
        state = self.slurm.node(node)
        # The Slurm adapter writes reasons as "ha-ops: ..."; ours go on with "rollout".
        if state.drained and state.reason.startswith(DRAIN_REASON_PREFIX):
            self.slurm.resume(node)

    def node_healthy(self, node: str) -> bool:
        state = self.slurm.node(node).state.upper()
        return not any(word in state for word in ("DRAIN", "DOWN", "FAIL", "NOT_RESPONDING", "MAINT", "*"))

    def unavailable(self) -> set[str]:
        return {name for name, state in self.slurm.node_states().items() if out_of_service(state)}
