"""What the remediation controller asks of a scheduler, whichever it is: Slurm (schedulers/slurm.py) or Kubernetes
(schedulers/kubernetes.py). The policy is pure and speaks one vocabulary of node states, sinfo's (lower case:
`idle`, `allocated`, `drained`, `draining`, `down`; a trailing `*` for a node that does not answer its scheduler);
each adapter maps its scheduler's own states onto it.

Contract for every implementation: each call is safe to repeat (the controller re-runs an intent after a failover),
and a node drained by someone else is never resumed (`drained_by_ha_ops`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

# Reasons ha-ops writes start with this, so that it only ever resumes nodes it drained itself.
REASON_PREFIX = "ha-ops:"
# ...and an agent's own drains with this: a remediation controller adopts them (see remediation.policy).
AGENT_REASON_PREFIX = f"{REASON_PREFIX} agent:"


@dataclass(frozen=True)
class SchedulerNode:
    name: str
    state: str  # upper case, Slurm's `scontrol show node` words: IDLE, ALLOCATED, IDLE+DRAIN, DOWN+DRAIN
    reason: str

    @property
    def drained(self) -> bool:
        return "DRAIN" in self.state

    @property
    def drained_by_ha_ops(self) -> bool:
        return self.drained and self.reason.startswith(REASON_PREFIX)


@dataclass(frozen=True)
class SchedulerJob:
    id: str  # Slurm: the job id; Kubernetes: namespace/pod
    state: str  # RUNNING, PENDING, COMPLETING, ...
    nodes: tuple[str, ...]
    name: str = ""
    # How a COMPLETING job ended (0: it ran to its end), where the scheduler says; None while it runs, or unknown.
    exit_code: int | None = None


class Scheduler(Protocol):
    # How many nodes one drain_nodes, mark_down_nodes or resume_nodes call may name: Slurm takes a list in one RPC;
    # Kubernetes writes each Node on its own (1: the executor sends them one by one, several at once).
    batch_limit: int

    def node(self, name: str) -> SchedulerNode: ...

    def nodes(self, names: list[str]) -> dict[str, SchedulerNode]:
        """The named nodes the scheduler describes (one that it does not is left out)."""
        ...

    def drain(self, name: str, reason: str) -> None:
        """No new work on the node; what runs may finish (requeue_jobs moves what can move)."""

    def drain_nodes(self, names: list[str], reason: str) -> None: ...

    def mark_down(self, name: str, reason: str) -> None:
        """A lost node: its work is ended at once, without waiting for the node to confirm it."""

    def mark_down_nodes(self, names: list[str], reason: str) -> None: ...

    def resume(self, name: str) -> None: ...

    def resume_nodes(self, names: list[str]) -> None: ...

    def jobs(self) -> list[SchedulerJob]: ...

    def jobs_on(self, node: str) -> list[SchedulerJob]: ...

    def node_states_and_reasons(self) -> dict[str, tuple[str, str]]:
        """Every node's (state, reason) in one call, states in sinfo's lower-case words."""
        ...

    def job_requeueable(self, job_id: str) -> bool: ...

    def requeue(self, job_id: str) -> None:
        """Stop the job where it runs so that it starts again elsewhere (from its latest checkpoint)."""

    def release_requeued(self, job_id: str) -> None:
        """Make a job the scheduler requeued by itself (a lost node's) eligible to start now."""

    def job_state(self, job_id: str) -> str: ...

    def partition_nodes(self, partition: str) -> list[str]:
        """The nodes that take work in the pool (Slurm: the partition; Kubernetes: the pool without the spares)."""
        ...

    def set_partition_nodes(self, partition: str, nodes: list[str]) -> None: ...

    def set_reliability(self, name: str, tier: str) -> None:
        """Publish the node's reliability tier (`reliable`, `standard`, `suspect`: remediation/history.py) where the
        scheduler places work by it (Slurm: Weight and the feature `reliable`; Kubernetes: a node label)."""

    def set_reliabilities(self, tiers: dict[str, str]) -> dict[str, Exception]:
        """set_reliability of many nodes (Slurm: one read, one update per group that ends alike); what failed."""
        ...


@runtime_checkable
class ControllerPing(Protocol):
    """A scheduler with controllers of its own to watch (Slurm's primary and backups: the Slurm fence)."""

    def controllers(self, timeout: float = 30.0) -> list[tuple[str, str]]:
        """[(host, "UP" | "DOWN")], the primary first."""
        ...
