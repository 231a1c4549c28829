"""Carries out intents through the scheduler and node adapters. Every action is preceded by the fencing check
and is idempotent: it looks at the real state first, so an intent re-run after a failover does nothing twice."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Protocol

from ha_ops.errors import CommandTimeout
from ha_ops.remediation.model import Intent
from ha_ops.schedulers.base import Scheduler, SchedulerJob, SchedulerNode
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


def _described(node: SchedulerNode) -> str:
    return f"{node.state}" + (f" ({node.reason})" if node.reason else "")


def _by_reason(intents: list[Intent]) -> dict[str, list[Intent]]:
    """Intents grouped by their reason, in order: one scheduler call per group (the reason is the node's)."""
    groups: dict[str, list[Intent]] = {}
    for intent in intents:
        groups.setdefault(intent.why, []).append(intent)
    return groups


def _one(out: dict[str, str | Exception], intent: Intent) -> str:
    """A batch of one's result: its line, or what failed it, raised."""
    result = out[intent.id]
    if isinstance(result, Exception):
        raise result
    return result


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
            return _described(self.scheduler.node(intent.node))
        except Exception as exc:
            return f"unknown ({exc})"

    def run(self, intent: Intent) -> str:
        """Carry out `intent`; return a result line. Raise ActionFailed (or a transport error) on failure."""
        handler = ACTIONS.get(intent.kind)
        if handler is None:  # ("alert" is decided, never carried out here: Alertmanager carries it)
            raise ActionFailed(f"no action carries out a {intent.kind!r} intent")
        return handler(self, intent)

    def batch_limit(self, intent: Intent) -> int:
        """How many intents of `intent`'s kind one batch (run_batch) may carry; 1: each is carried out on its own.
        A lost node's requeue releases its jobs one by one (each waits for Slurm's next second): on its own."""
        if intent.kind not in BATCHES or intent.args.get("release"):
            return 1
        return max(1, self.scheduler.batch_limit)

    def read(self, names: list[str]) -> dict[str, SchedulerNode] | Exception:
        """The nodes as the scheduler describes them, in one read (or why it failed): a batch's "before"."""
        try:
            return self.scheduler.nodes(names)
        except Exception as exc:
            return exc

    def describe(self, names: list[str], read: dict[str, SchedulerNode] | Exception | None = None) -> dict[str, str]:
        """before() of many nodes, from one read (`read`, or a new one)."""
        found = self.read(names) if read is None else read
        if isinstance(found, Exception):
            return {name: f"unknown ({found})" for name in names}
        return {name: _described(found[name]) if name in found else "unknown (not described)" for name in names}

    def run_batch(
        self,
        intents: list[Intent],
        read: dict[str, SchedulerNode] | None = None,
        before_each: Callable[[], None] = lambda: None,
    ) -> dict[str, str | Exception]:
        """Intents of one kind of BATCHES on different nodes, in one read of the nodes (`read`, when the caller has
        just made it) and one scheduler call per reason (a storm's drains share theirs): by intent id, its result
        line or what failed it. If a call of the batch fails, each intent is carried out on its own, behind
        `before_each` (the fencing check: a LeaseLost it raises ends the batch): each looks at its node first, so
        nothing is done twice and one bad node fails only its own intent. A scheduler that does not answer in time
        fails the rest at once (each would wait as long; the pipeline retries them)."""
        try:
            return BATCHES[intents[0].kind](self, intents, read)
        except Exception as exc:
            log.warning("a batch of %d %s failed (%s): one by one instead", len(intents), intents[0].kind, exc)
        out: dict[str, str | Exception] = {}
        for intent in intents:
            before_each()
            try:
                out[intent.id] = self.run(intent)
            except CommandTimeout as exc:
                out.update({i.id: exc for i in intents if i.id not in out})
                break
            except Exception as exc:
                out[intent.id] = exc
        return out

    def _drain(self, intent: Intent) -> str:
        return _one(self._drain_batch([intent]), intent)

    def _drain_batch(
        self, intents: list[Intent], read: dict[str, SchedulerNode] | None = None
    ) -> dict[str, str | Exception]:
        out: dict[str, str | Exception] = {}
        nodes = self._described_nodes(intents, out, read)
        known = [i for i in intents if i.node in nodes]
        # A lost node cannot confirm that its jobs ended: Slurm would hold them COMPLETING for minutes.
        lost = [i for i in known if i.args.get("lost") and "DOWN" not in nodes[i.node].state]
        for reason, group in _by_reason(lost).items():
            self.scheduler.mark_down_nodes([i.node for i in group], reason)
        if lost:
            nodes.update(self.scheduler.nodes([i.node for i in lost]))
        undrained = []
        for intent in known:
            if nodes[intent.node].drained:
                out[intent.id] = f"already drained ({nodes[intent.node].reason})"
            else:
                undrained.append(intent)
        for reason, group in _by_reason(undrained).items():
            self.scheduler.drain_nodes([i.node for i in group], reason)
            out.update({i.id: "drained" for i in group})
        return out

    def _resume(self, intent: Intent) -> str:
        return _one(self._resume_batch([intent]), intent)

    def _resume_batch(
        self, intents: list[Intent], read: dict[str, SchedulerNode] | None = None
    ) -> dict[str, str | Exception]:
        out: dict[str, str | Exception] = {}
        nodes = self._described_nodes(intents, out, read)
        ready = []
        for intent in (i for i in intents if i.node in nodes):
            node = nodes[intent.node]
            if not node.drained:
                out[intent.id] = "already in service"
            elif not node.drained_by_ha_ops:
                out[intent.id] = ActionFailed(f"drained by someone else ({node.reason}); not resuming")
            else:
                ready.append(intent)
        if ready:
            self.scheduler.resume_nodes([i.node for i in ready])
            out.update({i.id: "resumed" for i in ready})
        return out

    def _described_nodes(
        self, intents: list[Intent], out: dict[str, str | Exception], read: dict[str, SchedulerNode] | None
    ) -> dict[str, SchedulerNode]:
        """The intents' nodes from one read (the caller's, or a new one); an intent whose node the scheduler does not
        describe fails in `out`."""
        nodes = dict(read) if read is not None else self.scheduler.nodes([i.node for i in intents])
        for intent in intents:
            if intent.node not in nodes:
                out[intent.id] = ActionFailed(f"the scheduler does not describe node {intent.node!r}")
        return nodes

    def _requeue_jobs(self, intent: Intent) -> str:
        return self._requeue_on(intent, self.scheduler.jobs_on(intent.node), set())

    def _requeue_jobs_batch(
        self, intents: list[Intent], read: dict[str, SchedulerNode] | None = None
    ) -> dict[str, str | Exception]:
        """The nodes' jobs from one read of the jobs (not one per node); a job on several of them is requeued once."""
        jobs = self.scheduler.jobs()
        out: dict[str, str | Exception] = {}
        done: set[str] = set()
        for intent in intents:
            try:
                out[intent.id] = self._requeue_on(intent, [j for j in jobs if intent.node in j.nodes], done)
            except Exception as exc:
                out[intent.id] = exc
        return out

    def _requeue_on(self, intent: Intent, jobs: list[SchedulerJob], done: set[str]) -> str:
        """Requeue what runs of `jobs` (the node's) and allows it; `done`: the jobs requeued already (by this batch)."""
        requeued, kept, finished = [], [], []
        # A lost node's jobs were requeued by Slurm when it was marked DOWN; it has been fenced since.
        for job_id in intent.args.get("release", []):
            if self.scheduler.job_state(job_id) == "PENDING":
                self.scheduler.release_requeued(job_id)
                requeued.append(job_id)
        for job in jobs:
            if job.state not in ("RUNNING", "CONFIGURING", "COMPLETING") or job.id in done:
                continue
            if job.state == "COMPLETING" and job.exit_code == 0:
                # It ran to its end and only its clean-up is left: a requeue would run it all again. (One that
                # failed, likely of the node's fault, is requeued to resume from its checkpoint.)
                finished.append(job.id)
                continue
            if self.scheduler.job_requeueable(job.id):
                self.scheduler.requeue(job.id)
                requeued.append(job.id)
                done.add(job.id)
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

# The kinds a scheduler may carry out for many nodes in one call (Scheduler.batch_limit: Slurm's `scontrol update`
# takes a list of nodes), each as a batch of intents.
BatchAction = Callable[[Executor, list[Intent], dict[str, SchedulerNode] | None], dict[str, str | Exception]]
BATCHES: dict[str, BatchAction] = {
    "drain": Executor._drain_batch,
    "resume": Executor._resume_batch,
    "requeue_jobs": Executor._requeue_jobs_batch,
}
