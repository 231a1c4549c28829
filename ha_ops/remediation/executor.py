"""Carries out intents through the scheduler and node adapters. Every action is preceded by the fencing check
and is idempotent: it looks at the real state first, so an intent re-run after a failover does nothing twice."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Protocol

from ha_ops.remediation.model import Intent
from ha_ops.schedulers.base import Scheduler
from ha_ops.util.proc import CommandResult

log = logging.getLogger(__name__)


class NodeOps(Protocol):
    def reset_gpu(self, node: str, gpu: int) -> CommandResult: ...

    def reboot(self, node: str) -> CommandResult: ...

    def validate(self, node: str) -> CommandResult: ...

    def run_command(self, node: str, command: str, connect_timeout_s: float | None = None) -> CommandResult: ...

    def run_here(self, command: str) -> CommandResult:
        """On the controller's own host (BMC and Slurm commands)."""
        ...


class ActionFailed(Exception):
    """The action ran and did not succeed; the message says why (kept in the intent's result)."""


def _tail(result: CommandResult) -> str:
    text = (result.stderr or result.stdout).strip().splitlines()
    return text[-1][:200] if text else f"exit {result.returncode}"


class Executor:
    def __init__(self, scheduler: Scheduler, node_ops: NodeOps, partition: str) -> None:
        self.scheduler = scheduler
        self.node_ops = node_ops
        self.partition = partition

    def before(self, intent: Intent) -> str:
        """A short description of the node's state before the action, for the audit log."""
        try:
            node = self.scheduler.node(intent.node)
            return f"{node.state}" + (f" ({node.reason})" if node.reason else "")
        except Exception as exc:
            return f"unknown ({exc})"

    def run(self, intent: Intent) -> str:
        """Carry out `intent`; return a result line. Raise ActionFailed (or a transport error) on failure."""
        handler = ACTIONS.get(intent.kind)
        if handler is None:  # ("alert" is decided, never carried out here: Alertmanager carries it)
            raise ActionFailed(f"no action carries out a {intent.kind!r} intent")
        return handler(self, intent)

    def _drain(self, intent: Intent) -> str:
        node = self.scheduler.node(intent.node)
        if intent.args.get("lost") and "DOWN" not in node.state:
            # A lost node cannot confirm that its jobs ended: Slurm would hold them COMPLETING for minutes.
            self.scheduler.mark_down(intent.node, intent.why)
            node = self.scheduler.node(intent.node)
        if node.drained:
            return f"already drained ({node.reason})"
        self.scheduler.drain(intent.node, intent.why)
        return "drained"

    def _resume(self, intent: Intent) -> str:
        node = self.scheduler.node(intent.node)
        if not node.drained:
            return "already in service"
        if not node.drained_by_ha_ops:
            raise ActionFailed(f"drained by someone else ({node.reason}); not resuming")
        self.scheduler.resume(intent.node)
        return "resumed"

    def _requeue_jobs(self, intent: Intent) -> str:
        requeued, kept, finished = [], [], []
        # A lost node's jobs were requeued by Slurm when it was marked DOWN; it has been fenced since.
        for job_id in intent.args.get("release", []):
            if self.scheduler.job_state(job_id) == "PENDING":
                self.scheduler.release_requeued(job_id)
                requeued.append(job_id)
        for job in self.scheduler.jobs_on(intent.node):
            if job.state not in ("RUNNING", "CONFIGURING", "COMPLETING"):
                continue
            if job.state == "COMPLETING" and job.exit_code == 0:
                # It ran to its end and only its clean-up is left: a requeue would run it all again. (One that
                # failed, likely of the node's fault, is requeued to resume from its checkpoint.)
                finished.append(job.id)
                continue
            if self.scheduler.job_requeueable(job.id):
                self.scheduler.requeue(job.id)
                requeued.append(job.id)
            else:
                kept.append(job.id)
        done = f"; finished, left [{', '.join(finished)}]" if finished else ""
        return f"requeued [{', '.join(requeued)}]; not requeueable, left to finish [{', '.join(kept)}]{done}"

    def _spare_in(self, intent: Intent) -> str:
        nodes = self.scheduler.partition_nodes(self.partition)
        if intent.node in nodes:
            return f"already in {self.partition}"
        self.scheduler.set_partition_nodes(self.partition, [*nodes, intent.node])
        return f"added to {self.partition} for {intent.args.get('replaces')}"

    def _spare_out(self, intent: Intent) -> str:
        nodes = self.scheduler.partition_nodes(self.partition)
        if intent.node not in nodes:
            return f"already out of {self.partition}"
        if self.scheduler.jobs_on(intent.node):
            raise ActionFailed("the spare still runs jobs")
        self.scheduler.set_partition_nodes(self.partition, [n for n in nodes if n != intent.node])
        return f"removed from {self.partition}"

    def _reset_gpu(self, intent: Intent) -> str:
        done = []
        for gpu in intent.args.get("gpus") or [0]:
            result = self.node_ops.reset_gpu(intent.node, int(gpu))
            if not result.ok:
                raise ActionFailed(f"GPU{gpu} reset failed: {_tail(result)}")
            done.append(f"GPU{gpu}")
        return f"reset {', '.join(done)}"

    def _reboot_node(self, intent: Intent) -> str:
        result = self.node_ops.reboot(intent.node)
        if not result.ok:
            raise ActionFailed(f"reboot failed: {_tail(result)}")
        return "rebooted"

    def _validate(self, intent: Intent) -> str:
        result = self.node_ops.validate(intent.node)
        if result.ok:
            return "pass"
        try:  # `ha-ops health check --json` says why in one field
            return f"fail: {json.loads(result.stdout)['reason']}"
        except (ValueError, KeyError, TypeError):
            return f"fail: {_tail(result)}"


# Every intent kind the executor carries out, by name: the table is the list (a kind missing here fails, named).
ACTIONS: dict[str, Callable[[Executor, Intent], str]] = {
    "drain": Executor._drain,
    "resume": Executor._resume,
    "requeue_jobs": Executor._requeue_jobs,
    "spare_in": Executor._spare_in,
    "spare_out": Executor._spare_out,
    "reset_gpu": Executor._reset_gpu,
    "reboot_node": Executor._reboot_node,
    "validate": Executor._validate,
}
