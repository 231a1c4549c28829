"""`ha-ops rollout`: plan, start, watch, pause, resume and abort GPU driver rollouts.

Live node data the plan needs (driver versions, nodes down, running jobs) comes from flags and a node-data file for
now; the executor also reads each node's driver facts before touching it, so a stale input never changes a node
that is already on the target.
"""

from __future__ import annotations

import time
from pathlib import Path

import typer
from rich.table import Table

from ha_ops.cli import output
from ha_ops.cli import rollout_options as opt
from ha_ops.rollout.plan import Plan
from ha_ops.rollout.policy import RolloutPolicy
from ha_ops.rollout.progress import describe
from ha_ops.rollout.request import PlanRequest, controller_inputs, plan_for, rollout_inputs
from ha_ops.rollout.run import execute, progress_now, start
from ha_ops.rollout.run import summary as rollout_summary
from ha_ops.rollout.state import (
    FAILURE_STEPS,
    TERMINAL_PHASES,
    TERMINAL_STEPS,
    NodeStep,
    Phase,
    RolloutError,
    RolloutState,
    RolloutStore,
)

app = typer.Typer(help="GPU driver rollouts: canaries, waves, gates, automatic rollback.", no_args_is_help=True)
plan_app = typer.Typer(help="Print a rollout plan (table or --json); changes nothing.", no_args_is_help=True)
app.add_typer(plan_app, name="plan")


def _short(names: list[str] | tuple[str, ...], limit: int = 8) -> str:
    return ", ".join(names[:limit]) + (f", ... (+{len(names) - limit})" if len(names) > limit else "")


def _show_plan(plan: Plan, policy: RolloutPolicy) -> None:
    output.result(
        f"driver {plan.target_version}: {plan.planned} of {plan.fleet} nodes in {len(plan.waves)} waves; "
        f"max_unavailable {plan.max_unavailable} with {len(plan.down)} down -> batches of up to {plan.batch_size}; "
        f"soak {policy.soak_s:g} s; drain {policy.drain.mode} ({policy.drain.timeout_s:g} s)"
    )
    table = Table(title="waves")
    for col in ("wave", "size", "nodes", "batches", "members (in order)"):
        table.add_column(col)
    for wave in plan.waves:
        table.add_row(wave.name, wave.size, str(len(wave.nodes)), str(len(wave.batches)), _short(wave.nodes))
    output.result(table)
    if plan.skipped:
        reasons: dict[str, list[str]] = {}
        for name, why in plan.skipped.items():
            reasons.setdefault(why, []).append(name)
        for why, names in reasons.items():
            output.result(f"skipped ({why}): {_short(names)}")


@plan_app.command("driver")
@opt.with_plan_options
def plan_driver(
    *,
    plan_request: PlanRequest,
    to: str = opt.ToOpt,
    spec_file: Path = opt.SpecOpt,
    json_out: bool = opt.JsonOpt,
) -> None:
    """Print the plan for moving the spec's GPU nodes to a driver version: canary, waves, batches, skipped nodes.
    Changes nothing."""
    plan, policy, _ = plan_for(to, spec_file, plan_request)
    if json_out:
        output.emit_json({**plan.to_json(), "policy": policy.model_dump(mode="json")})
    else:
        _show_plan(plan, policy)


# --- running ------------------------------------------------------------------------------------------------------


def _execute(store: RolloutStore) -> RolloutState:
    return execute(store, output.info)


def _report(state: RolloutState, json_out: bool, *, fail_unless_completed: bool = True) -> None:
    summary = rollout_summary(state)
    if json_out:
        output.emit_json(summary)
    else:
        counts = ", ".join(f"{v} {k}" for k, v in sorted(summary["counts"].items()))
        output.result(f"rollout {state.id} to {state.target_version}: {state.phase.value}"
                      + (f" ({state.reason})" if state.reason and state.phase != Phase.COMPLETED else "")
                      + f"; nodes: {counts}")  # fmt: skip
        for name, why in summary["failed"].items():
            output.result(f"  {name}: {why}")
        if summary["needs_a_person"]:
            output.error(f"left out of service, needs a person: {', '.join(summary['needs_a_person'])}")
    if fail_unless_completed and state.phase in (Phase.HALTED, Phase.ABORTED):
        raise typer.Exit(1)


@app.command("driver")
@opt.with_plan_options
def driver(
    *,
    plan_request: PlanRequest,
    to: str = opt.ToOpt,
    spec_file: Path = opt.SpecOpt,
    inventory: Path = opt.InventoryOpt,
    playbook: Path = opt.PlaybookOpt,
    health_command: str = opt.HealthCommandOpt,
    version_command: str = opt.VersionCommandOpt,
    state_dir: Path = opt.StateDirOpt,
    controllers: list[str] = opt.ControllerOpt,
    no_controller: bool = opt.NoControllerOpt,
    controller_cert: Path | None = opt.ControllerCertOpt,
    controller_key: Path | None = opt.ControllerKeyOpt,
    controller_ca: Path | None = opt.ControllerCaOpt,
    dry_run: bool = opt.DryRunOpt,
    json_out: bool = opt.JsonOpt,
) -> None:
    """Start a driver rollout: canary, then waves; every node drained, upgraded through the gpu_driver role,
    validated and returned. Each batch is announced to the remediation controllers as a maintenance window, and no
    wave starts while their breaker is open or a pool is under its minimum healthy share (docs/architecture.md).
    Exit 0 when completed (or paused), 1 when halted, aborted or refused."""
    plan, policy, fleet = plan_for(to, spec_file, plan_request)
    coordination = controller_inputs(spec_file, controllers, no_controller, controller_cert, controller_key,
                                     controller_ca)  # fmt: skip
    inputs = rollout_inputs(spec_file, inventory, playbook, health_command, version_command, coordination)
    store = RolloutStore(state_dir)
    if dry_run:
        if store.exists() and store.load().phase not in TERMINAL_PHASES:
            output.info(f"note: a rollout in {state_dir} is not finished; a real start would be refused")
        if json_out:
            output.emit_json({**plan.to_json(), "policy": policy.model_dump(mode="json"), "dry_run": True})
            return
        _show_plan(plan, policy)
        output.result(
            f"dry run: nothing changed. Each node would be drained ({policy.drain.mode}), upgraded with "
            f"{playbook} --limit NODE -e gpu_driver_version={to}, validated and returned to service."
        )
        return
    with store.lock():
        state = start(store, plan, policy, fleet, inputs)
        output.info(f"rollout {state.id}: state in {store.state_path}")
        final = _execute(store)
    _report(final, json_out)


@app.command()
def resume(state_dir: Path = opt.StateDirOpt, json_out: bool = opt.JsonOpt) -> None:
    """Continue a paused or interrupted rollout (also after a kill -9) from its state; no node is touched twice."""
    store = RolloutStore(state_dir)
    with store.lock():
        state = store.load()
        if state.phase in TERMINAL_PHASES:
            raise RolloutError(f"rollout {state.id} is {state.phase.value}: nothing to resume")
        if store.read_control().pause:
            store.request(pause=False, requested_at=time.time())
        final = _execute(store)
    _report(final, json_out)


@app.command()
def pause(
    state_dir: Path = opt.StateDirOpt,
    note: str = typer.Option("", "--note", help="Why (recorded in the state)."),
    json_out: bool = opt.JsonOpt,
) -> None:
    """Ask the running rollout to pause: it finishes the node it is changing, returns untouched drained nodes to
    service and stops. `resume` continues."""
    store = RolloutStore(state_dir)
    state = store.load()
    if state.phase in TERMINAL_PHASES:
        raise RolloutError(f"rollout {state.id} is {state.phase.value}: nothing to pause")
    store.request(pause=True, requested_at=time.time(), note=note)
    running = store.running_elsewhere()
    if json_out:
        output.emit_json({"id": state.id, "pause_requested": True, "running": running})
    elif running:
        output.result(f"pause requested: rollout {state.id} stops after its current node")
    else:
        output.result(f"pause recorded; rollout {state.id} is not running now ({state.phase.value})")


@app.command()
def abort(
    state_dir: Path = opt.StateDirOpt,
    rollback: bool = typer.Option(False, "--rollback", help="Also roll back every node the rollout changed."),
    note: str = typer.Option("", "--note", help="Why (recorded in the state)."),
    json_out: bool = opt.JsonOpt,
) -> None:
    """Stop the rollout for good: nodes being changed are finished (or, with --rollback, switched back), untouched
    ones returned to service. With no rollout running, this command carries the abort out itself."""
    store = RolloutStore(state_dir)
    state = store.load()
    if state.phase in TERMINAL_PHASES:
        raise RolloutError(f"rollout {state.id} is {state.phase.value}: nothing to abort")
    store.request(abort=True, abort_rollback=rollback, requested_at=time.time(), note=note)
    if store.running_elsewhere():
        if json_out:
            output.emit_json({"id": state.id, "abort_requested": True, "running": True})
        else:
            output.result(f"abort requested: rollout {state.id} stops at its next step")
        return
    _report(_execute(store), json_out, fail_unless_completed=False)


@app.command()
def status(state_dir: Path = opt.StateDirOpt, json_out: bool = opt.JsonOpt) -> None:
    """Phase, reason, every wave's progress, and the nodes in flight or failed."""
    store = RolloutStore(state_dir)
    state = store.load()
    control = store.read_control()
    running = store.running_elsewhere()
    if json_out:
        output.emit_json({"summary": rollout_summary(state, running), "running": running,
                          "control": control.model_dump(), "state": state.model_dump(mode="json")})  # fmt: skip
        return
    output.result(
        f"rollout {state.id}: driver {state.target_version}, {state.phase.value}"
        + (f" ({state.reason})" if state.reason else "")
        + ("; a process is driving it" if running else "; no process is driving it")
    )
    output.result(describe(progress_now(state, running)))
    if control.pause or control.abort:
        asked = "abort" + (" with rollback" if control.abort_rollback else "") if control.abort else "pause"
        output.result(f"requested: {asked}" + (f" ({control.note})" if control.note else ""))
    table = Table(title="waves")
    for col in ("wave", "size", "nodes", "done", "failed", "skipped", "in flight", "status", "gate"):
        table.add_column(col)
    for wave in state.waves:
        steps = [state.nodes[n].step for n in wave.nodes()]
        in_flight = sum(1 for s in steps if s not in TERMINAL_STEPS and s != NodeStep.PENDING)
        failed = sum(1 for s in steps if s in FAILURE_STEPS)
        counts = [len(steps), steps.count(NodeStep.DONE), failed, steps.count(NodeStep.SKIPPED), in_flight]
        table.add_row(wave.name, wave.size, *map(str, counts), wave.status, wave.gate)
    output.result(table)
    for node in state.nodes.values():  # what an operator must look at: in flight or failed
        if node.step not in (NodeStep.PENDING, NodeStep.DONE, NodeStep.SKIPPED, NodeStep.ROLLED_BACK):
            output.result(f"  {node.name}: {node.step.value}" + (f" ({node.failure})" if node.failure else ""))
