"""Running a rollout from its state: the real doors built from its inputs (Slurm on this host, the gpu_driver role
and node checks through ansible-runner, the remediation controllers to coordinate with), the executor driven under
the store's lock, and the summary a caller reports."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ha_ops.rollout.ansible import AnsibleDriverApplier, AnsibleRunner, AnsibleValidator
from ha_ops.rollout.executor import RolloutExecutor
from ha_ops.rollout.inputs import RolloutInputs
from ha_ops.rollout.plan import FleetNode, Plan
from ha_ops.rollout.policy import RolloutPolicy
from ha_ops.rollout.progress import Progress, progress
from ha_ops.rollout.protocols import Coordinator, DriverApplier, Scheduler, Validator
from ha_ops.rollout.state import FAILURE_STEPS, NodeStep, RolloutError, RolloutState, RolloutStore, new_state


def start(
    store: RolloutStore, plan: Plan, policy: RolloutPolicy, fleet: list[FleetNode], inputs: RolloutInputs
) -> RolloutState:
    """Under the store's lock: a new rollout's state written (refused while another is not finished; the last
    finished one archived)."""
    rollout_id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(2)
    store.refuse_if_active()
    store.archive()
    state = new_state(plan, policy, rollout_id, time.time(), inputs, {n.name: n.domain for n in fleet})
    store.save(state)
    return state


def make_adapters(state: RolloutState, state_dir: Path) -> tuple[Scheduler, DriverApplier, Validator]:
    """The real doors: Slurm on this host, the gpu_driver role and node checks through ansible-runner."""
    from ha_ops.rollout.scheduler import RolloutScheduler
    from ha_ops.schedulers.open import local_slurm

    inputs = state.inputs
    if inputs.inventory is None or inputs.playbook is None:
        raise RolloutError(f"rollout {state.id}: its state names no inventory or playbook to run with")
    runner = AnsibleRunner(inputs.inventory, state_dir / "ansible", roles_path=inputs.playbook.parent.parent / "roles")
    applier = AnsibleDriverApplier(runner, inputs.playbook)
    validator = AnsibleValidator(
        runner,
        health_command=inputs.health_command,
        version_command=inputs.version_command,
        burn_in_command=state.policy.burn_in_command,
        burn_in_timeout_s=state.policy.burn_in_timeout_s,
    )
    return RolloutScheduler(local_slurm()), applier, validator


def make_coordinator(state: RolloutState) -> Coordinator | None:
    """The remediation controllers the rollout announces its batches to, or None."""
    from ha_ops.rollout.coordination import ControllerCoordinator

    if not state.inputs.controllers:
        return None
    return ControllerCoordinator(state.inputs.controllers, state.inputs.controller_tls())


def execute(store: RolloutStore, report: Callable[[str], None]) -> RolloutState:
    """Drive the rollout in `store` until it ends or pauses, under the store's lock; `report` gets each step."""
    with store.lock():
        state = store.load()
        scheduler, applier, validator = make_adapters(state, store.directory)
        executor = RolloutExecutor(store, scheduler, applier, validator, progress=report,
                                   coordinator=make_coordinator(state))  # fmt: skip
        return executor.run()


def progress_now(state: RolloutState, driven: bool) -> Progress:
    """Its progress now; an ETA only counts down while a process drives it (else as of its last write)."""
    return progress(state, time.time() if driven else state.updated_at)


def summary(state: RolloutState, driven: bool = False) -> dict[str, Any]:
    failed = {n.name: n.failure for n in state.nodes.values() if n.step in FAILURE_STEPS}
    return {
        "progress": asdict(progress_now(state, driven)),
        "id": state.id,
        "target_version": state.target_version,
        "phase": state.phase.value,
        "reason": state.reason,
        "counts": state.counts(),
        "failed": failed,
        "needs_a_person": sorted(n.name for n in state.nodes.values() if n.step == NodeStep.FAILED),
    }
