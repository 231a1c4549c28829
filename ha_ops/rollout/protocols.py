"""The three doors through which a rollout touches the world. The executor knows nothing else, so unit tests drive
it with fakes and the lab and production plug in real ones (ha_ops/rollout/scheduler.py, ha_ops/rollout/ansible.py).

Contract for every implementation: each call is safe to repeat. The executor persists a node's step *before* it
acts, so after a crash it calls the same method again for that node; `drain` of a drained node, `resume` of a node
in service, `requeue_jobs` of an idle node must do nothing. `apply` and `rollback` are the exceptions (a rollback
flips slots): the executor reads `facts` first and only calls them when the node's facts say the step is still to do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from pydantic import BaseModel, ConfigDict


class DriverFacts(BaseModel):
    """What the gpu_driver role recorded on a node (its local fact gpu_driver.fact); all None on a node the role
    never ran on."""

    model_config = ConfigDict(frozen=True)

    active_version: str | None = None
    previous_version: str | None = None
    last_failure_version: str | None = None
    last_failure_reason: str | None = None


@dataclass(frozen=True)
class ApplyResult:
    ok: bool  # the node runs the requested version and the role's own validation passed
    rolled_back: bool  # the role found the new version broken and switched back by itself
    active_version: str | None
    message: str


@dataclass(frozen=True)
class Validation:
    ok: bool
    message: str
    driver_version: str | None = None  # as read from the GPUs


class Scheduler(Protocol):
    def drain(self, node: str, reason: str) -> None:
        """Stop new work on the node (a node drained by someone else is left as it is)."""

    def wait_idle(self, node: str, timeout: float) -> None:
        """Return when no job runs on the node; raise WaitTimeout after `timeout` seconds."""

    def requeue_jobs(self, node: str) -> list[str]:
        """Requeue the node's running jobs that allow it; return their ids (the others are left to finish)."""
        ...

    def resume(self, node: str) -> None:
        """Return the node to service, only if the rollout drained it (never a node drained for another reason)."""

    def node_healthy(self, node: str) -> bool:
        """In service and healthy: what the gate between waves asks of every node of the wave."""
        ...

    def unavailable(self) -> set[str]:
        """Every node out of service right now (down, drained, failing): counted against max_unavailable."""
        ...


class DriverApplier(Protocol):
    def facts(self, node: str) -> DriverFacts:
        """Read the node's driver slots (read-only). Raises TransportError when the node cannot be reached."""
        ...

    def apply(self, node: str, version: str) -> ApplyResult:
        """Move the node to `version` (the role installs into the free slot, validates, rolls back on failure)."""
        ...

    def rollback(self, node: str) -> ApplyResult:
        """Switch the node back to its previous slot. Not idempotent: it flips slots (see the module docstring)."""
        ...


class Validator(Protocol):
    def validate(self, node: str, version: str | None, *, burn_in: bool) -> Validation:
        """Health check clean, the version read from every GPU equals `version` (unless None: a node going back to
        a driver the role never recorded), and, if asked, the burn-in command passes."""
        ...


class Coordinator(Protocol):
    """The remediation controllers, as a rollout sees them (rollout/coordination.py): asked before each wave whether
    one may start, and told which nodes are being changed, so that their expected symptoms are not remediated."""

    def blocked(self) -> str | None:
        """Why no wave may start or continue now (the breaker open, a pool under its minimum healthy share), or
        None. Raises when the controllers cannot be asked."""
        ...

    def begin(self, nodes: list[str], reason: str, ttl_s: float) -> None:
        """Open (or extend) a maintenance window on the nodes. Raises when it could not be opened."""

    def end(self, nodes: list[str]) -> None:
        """Close their windows (nodes without one: nothing to do)."""
