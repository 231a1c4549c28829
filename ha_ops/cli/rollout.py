"""`ha-ops rollout`: plan, start, watch, pause, resume and abort GPU driver rollouts.

Live node data the plan needs (driver versions, nodes down, running jobs) comes from flags and a node-data file for
now; the executor also reads each node's driver facts before touching it, so a stale input never changes a node
that is already on the target.
"""

from __future__ import annotations

import functools
import inspect
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import typer
import yaml
from pydantic import BaseModel, ConfigDict, Field
from rich.table import Table

from ha_ops.cli import output
from ha_ops.errors import SpecError
from ha_ops.rollout.ansible import (
    DEFAULT_HEALTH_COMMAND,
    DEFAULT_PLAYBOOK,
    DEFAULT_VERSION_COMMAND,
    AnsibleDriverApplier,
    AnsibleRunner,
    AnsibleValidator,
)
from ha_ops.rollout.executor import RolloutExecutor
from ha_ops.rollout.plan import FleetNode, Plan, plan_rollout
from ha_ops.rollout.policy import RolloutPolicy, build_policy
from ha_ops.rollout.progress import Progress, describe, progress
from ha_ops.rollout.protocols import Coordinator, DriverApplier, Scheduler, Validator
from ha_ops.rollout.state import (
    DEFAULT_STATE_DIR,
    FAILURE_STEPS,
    TERMINAL_PHASES,
    TERMINAL_STEPS,
    NodeStep,
    Phase,
    RolloutError,
    RolloutState,
    RolloutStore,
    new_state,
)
from ha_ops.spec import compute_layout, load_spec
from ha_ops.util.yamlconfig import load_model

app = typer.Typer(help="GPU driver rollouts: canaries, waves, gates, automatic rollback.", no_args_is_help=True)
plan_app = typer.Typer(help="Print a rollout plan (table or --json); changes nothing.", no_args_is_help=True)
app.add_typer(plan_app, name="plan")

# Policy field -> the flag that sets it, so that a bad value is reported under the name the user typed.
FLAGS = {
    "to": "--to",
    "canary": "--canary",
    "waves": "--waves",
    "max_unavailable": "--max-unavailable",
    "skip": "--skip",
    "drain": "--drain",
    "canary_max_failures": "--canary-max-failures",
    "wave_max_failure_fraction": "--wave-max-failure-fraction",
    "soak_s": "--soak",
    "burn_in_command": "--burn-in",
    "burn_in_timeout_s": "--burn-in-timeout",
    "rollback_on_halt": "--rollback-on-halt",
}
_SUBFLAGS = {"drain.mode": "--drain", "drain.timeout_s": "--drain-timeout"}

StateDirOpt = typer.Option(
    DEFAULT_STATE_DIR, "--state-dir", envvar="HA_OPS_ROLLOUT_DIR", help="Where the rollout's state and lock live."
)
JsonOpt = typer.Option(False, "--json", help="Machine-readable result on stdout.")
ToOpt = typer.Option(..., "--to", help="Target driver version, e.g. 570.86.15.")
SpecOpt = typer.Option(..., "--spec", "-s", help="Cluster spec: its GPU nodes are the fleet.", dir_okay=False)
PolicyOpt = typer.Option(None, "--policy", help="A YAML file of policy fields; flags override it.", dir_okay=False)
CanaryOpt = typer.Option(None, "--canary", help="Count (2), percentage (5%) or node names (gpu1,gpu7). Default 1.")
WavesOpt = typer.Option(None, "--waves", help="Wave sizes after the canary. Default 1,5%,25%,rest.")
MaxUnavailableOpt = typer.Option(
    None, "--max-unavailable", help="Most nodes out of service at once, counting nodes down (N or N%). Default 1."
)
SkipOpt = typer.Option(None, "--skip", help="Nodes left out (comma-separated).")
DrainOpt = typer.Option(None, "--drain", help="wait (for jobs to end) or requeue. Default wait.")
DrainTimeoutOpt = typer.Option(None, "--drain-timeout", help="Seconds a node's jobs may take. Default 3600.")
CanaryFailOpt = typer.Option(None, "--canary-max-failures", help="Canary failures tolerated. Default 0.")
WaveFailOpt = typer.Option(
    None, "--wave-max-failure-fraction", help="A wave halts past this share of failed nodes. Default 0.1."
)
SoakOpt = typer.Option(None, "--soak", help="Seconds between waves before the gate. Default 300.")
BurnInOpt = typer.Option(None, "--burn-in", help="Command run on each node after the upgrade; exit 0 passes.")
BurnInTimeoutOpt = typer.Option(None, "--burn-in-timeout", help="Seconds the burn-in may take. Default 1800.")
RollbackOpt = typer.Option(
    None, "--rollback-on-halt/--no-rollback-on-halt", help="Roll back every changed node when halting. Default on."
)
DownOpt = typer.Option(None, "--down", help="Nodes down now (comma-separated); they count against max-unavailable.")
NodeDataOpt = typer.Option(
    None, "--node-data", help="YAML: nodes: {NAME: {driver_version, running_jobs, criticality, down}}.", dir_okay=False
)
FromVersionOpt = typer.Option(None, "--from-version", help="The driver version of nodes the node data does not list.")


class NodeData(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    driver_version: str | None = None
    running_jobs: int = Field(default=0, ge=0)
    criticality: int = 0
    down: bool = False


class NodeDataFile(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    nodes: dict[str, NodeData] = Field(default_factory=dict)


def _names(text: str | None) -> list[str]:
    return [name.strip() for name in (text or "").split(",") if name.strip()]


def _flagged(problems: list[str], given: set[str]) -> list[str]:
    """'max_unavailable: ...' -> '--max-unavailable: ...' for fields set by a flag."""
    out = []
    for problem in problems:
        key, sep, message = problem.partition(": ")
        base = re.split(r"[\[]", key, maxsplit=1)[0]
        flag = _SUBFLAGS.get(base) or FLAGS.get(base.split(".", 1)[0])
        if sep and flag and (base.split(".", 1)[0] in given or base == "to"):
            out.append(f"{flag}: {message}" if key == base else f"{flag} ({key}): {message}")
        else:
            out.append(problem)
    return out


def _policy(policy_file: Path | None, flags: dict[str, Any]) -> tuple[RolloutPolicy, set[str], str]:
    data: dict[str, Any] = {}
    if policy_file is not None:
        try:
            loaded = yaml.safe_load(policy_file.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise SpecError(str(policy_file), [f"cannot read the policy: {exc}"]) from None
        if not isinstance(loaded, dict):
            raise SpecError(str(policy_file), ["the top level must be a mapping of policy fields"])
        data = loaded
    given = {k for k, v in flags.items() if v is not None}
    for key in given:
        if key == "drain_timeout":
            data["drain"] = {**data.get("drain", {}), "timeout_s": flags[key]}
        elif key == "drain":
            data["drain"] = {**data.get("drain", {}), "mode": flags[key]}
        else:
            data[key] = flags[key]
    if "drain_timeout" in given:
        given.add("drain")
    source = str(policy_file) if policy_file is not None else "rollout flags"
    try:
        return build_policy(data, source), given, source
    except SpecError as exc:
        raise SpecError(source, _flagged(exc.problems, given)) from None


# The flags `plan driver` and `driver` share, declared once: parameter -> (type, option).
_PLAN_OPTIONS: dict[str, tuple[Any, Any]] = {
    "policy_file": (Path | None, PolicyOpt),
    "canary": (str | None, CanaryOpt),
    "waves": (str | None, WavesOpt),
    "max_unavailable": (str | None, MaxUnavailableOpt),
    "skip": (str | None, SkipOpt),
    "drain": (str | None, DrainOpt),
    "drain_timeout": (float | None, DrainTimeoutOpt),
    "canary_max_failures": (int | None, CanaryFailOpt),
    "wave_max_failure_fraction": (float | None, WaveFailOpt),
    "soak": (float | None, SoakOpt),
    "burn_in": (str | None, BurnInOpt),
    "burn_in_timeout": (float | None, BurnInTimeoutOpt),
    "rollback_on_halt": (bool | None, RollbackOpt),
    "down": (str | None, DownOpt),
    "node_data": (Path | None, NodeDataOpt),
    "from_version": (str | None, FromVersionOpt),
}


def _policy_flags(given: dict[str, Any]) -> dict[str, Any]:
    """Policy fields from the shared flags (None: not given, the policy file or the default decides)."""
    return {
        "canary": given["canary"],
        "waves": _names(given["waves"]) if given["waves"] is not None else None,
        "max_unavailable": given["max_unavailable"],
        "skip": _names(given["skip"]) if given["skip"] is not None else None,
        "drain": given["drain"],
        "drain_timeout": given["drain_timeout"],
        "canary_max_failures": given["canary_max_failures"],
        "wave_max_failure_fraction": given["wave_max_failure_fraction"],
        "soak_s": given["soak"],
        "burn_in_command": given["burn_in"],
        "burn_in_timeout_s": given["burn_in_timeout"],
        "rollback_on_halt": given["rollback_on_halt"],
    }


def with_plan_options(command: Callable[..., None]) -> Callable[..., None]:
    """Give a command the shared plan flags (Typer reads them from the signature); it receives them as one
    `plan_options` dict."""
    own = [p for p in inspect.signature(command).parameters.values() if p.name != "plan_options"]
    shared = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=kind)
              for name, (kind, option) in _PLAN_OPTIONS.items()]  # fmt: skip
    # json_out stays last, as in --help of every other command.
    last = [p for p in own if p.name == "json_out"]
    params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own if p.name != "json_out"] + shared + last

    @functools.wraps(command)
    def wrapper(**kwargs: Any) -> None:
        options = {name: kwargs.pop(name) for name in _PLAN_OPTIONS}
        command(plan_options=options, **kwargs)

    wrapper.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    return wrapper


def fleet_from_spec(
    spec_file: Path, down: list[str], node_data: Path | None, from_version: str | None
) -> list[FleetNode]:
    """The spec's GPU nodes with what is known about them now."""
    spec = load_spec(spec_file)
    gpu_nodes = [n for n in compute_layout(spec).nodes if "gpu" in n.roles]
    known = {n.name for n in gpu_nodes}
    data = load_model(node_data, NodeDataFile).nodes if node_data is not None else {}
    problems = [f"--down: {n!r} is not a GPU node of {spec_file}" for n in down if n not in known]
    problems += [f"--node-data: {n!r} is not a GPU node of {spec_file}" for n in data if n not in known]
    if problems:
        raise SpecError("rollout flags", problems)
    fleet = []
    for node in gpu_nodes:
        info = data.get(node.name, NodeData())
        fleet.append(
            FleetNode(
                name=node.name,
                domain=node.domain,
                zone=spec.domain(node.domain).zone,
                spare=node.spare,
                down=info.down or node.name in down,
                running_jobs=info.running_jobs,
                criticality=info.criticality,
                driver_version=info.driver_version or from_version,
            )
        )
    return fleet


def _plan(to: str, spec_file: Path, options: dict[str, Any]) -> tuple[Plan, RolloutPolicy, list[FleetNode]]:
    policy, given, source = _policy(options["policy_file"], _policy_flags(options))
    fleet = fleet_from_spec(spec_file, _names(options["down"]), options["node_data"], options["from_version"])
    try:
        return plan_rollout(fleet, policy, to), policy, fleet
    except SpecError as exc:
        raise SpecError(source, _flagged(exc.problems, given)) from None


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
@with_plan_options
def plan_driver(
    *,
    plan_options: dict[str, Any],
    to: str = ToOpt,
    spec_file: Path = SpecOpt,
    json_out: bool = JsonOpt,
) -> None:
    """Print the plan for moving the spec's GPU nodes to a driver version: canary, waves, batches, skipped nodes.
    Changes nothing."""
    plan, policy, _ = _plan(to, spec_file, plan_options)
    if json_out:
        output.emit_json({**plan.to_json(), "policy": policy.model_dump(mode="json")})
    else:
        _show_plan(plan, policy)


# --- running ------------------------------------------------------------------------------------------------------
def make_adapters(state: RolloutState, state_dir: Path) -> tuple[Scheduler, DriverApplier, Validator]:
    """The real doors: Slurm on this host, the gpu_driver role and node checks through ansible-runner."""
    from ha_ops.rollout.scheduler import RolloutScheduler
    from ha_ops.schedulers.open import local_slurm

    inputs = state.inputs
    playbook = Path(inputs["playbook"])
    runner = AnsibleRunner(
        Path(inputs["inventory"]), state_dir / "ansible", roles_path=playbook.parent.parent / "roles"
    )
    applier = AnsibleDriverApplier(runner, playbook)
    validator = AnsibleValidator(
        runner,
        health_command=inputs.get("health_command", DEFAULT_HEALTH_COMMAND),
        version_command=inputs.get("version_command", DEFAULT_VERSION_COMMAND),
        burn_in_command=state.policy.burn_in_command,
        burn_in_timeout_s=state.policy.burn_in_timeout_s,
    )
    return RolloutScheduler(local_slurm()), applier, validator


ControllerOpt = typer.Option(
    [], "--controller", help="A remediation controller's base URL (repeat for the pair; default: the spec's)."
)
NoControllerOpt = typer.Option(False, "--no-controller", help="Do not coordinate with remediation controllers.")
ControllerCertOpt = typer.Option(
    None, "--controller-cert", envvar="HA_OPS_TLS_CERT", help="An operator certificate for https controllers."
)
ControllerKeyOpt = typer.Option(None, "--controller-key", envvar="HA_OPS_TLS_KEY", help="Its private key.")
ControllerCaOpt = typer.Option(None, "--controller-ca", envvar="HA_OPS_TLS_CA", help="The cluster CA.")


def make_coordinator(state: RolloutState) -> Coordinator | None:
    """The remediation controllers the rollout announces its batches to (inputs["controllers"]), or None."""
    from ha_ops.rollout.coordination import ControllerCoordinator
    from ha_ops.security.tls import TlsFiles

    urls = [u for u in state.inputs.get("controllers", "").split(",") if u]
    if not urls:
        return None
    tls = [state.inputs.get(k) for k in ("controller_cert", "controller_key", "controller_ca")]
    files = TlsFiles(cert_file=Path(tls[0]), key_file=Path(tls[1]), ca_file=Path(tls[2])) if all(tls) else None
    return ControllerCoordinator(urls, files)


def _controller_inputs(
    spec_file: Path, urls: list[str], none: bool, cert: Path | None, key: Path | None, ca: Path | None
) -> dict[str, str]:
    """--controller URLs (default: the spec's controllers), and the operator certificate for https ones."""
    from ha_ops.remediation.client import urls_from_spec

    if none:
        return {}
    spec = load_spec(spec_file)
    urls = urls or urls_from_spec(spec, compute_layout(spec))
    problems = [f"--controller: {u!r} is not an http:// or https:// URL" for u in urls
                if not re.match(r"https?://[^/\s]+/?$", u)]  # fmt: skip
    given = {"--controller-cert": cert, "--controller-key": key, "--controller-ca": ca}
    if any(given.values()) and not all(given.values()):
        problems.append(f"{', '.join(k for k, v in given.items() if v is None)}: give all three, or none")
    problems += [f"{flag}: {path} does not exist" for flag, path in given.items() if path and not path.is_file()]
    if any(u.startswith("https://") for u in urls) and not all(given.values()):
        problems.append("--controller-cert: the controllers serve https: give an operator certificate, key and CA")
    if problems:
        raise SpecError("rollout flags", problems)
    inputs = {"controllers": ",".join(urls)}
    if cert and key and ca:
        inputs |= {"controller_cert": str(cert.resolve()), "controller_key": str(key.resolve()),
                   "controller_ca": str(ca.resolve())}  # fmt: skip
    return inputs


def _execute(store: RolloutStore) -> RolloutState:
    with store.lock():
        state = store.load()
        scheduler, applier, validator = make_adapters(state, store.directory)
        executor = RolloutExecutor(store, scheduler, applier, validator, progress=output.info,
                                   coordinator=make_coordinator(state))  # fmt: skip
        return executor.run()


def _progress(state: RolloutState, driven: bool) -> Progress:
    """Its progress now; an ETA only counts down while a process drives it (else as of its last write)."""
    return progress(state, time.time() if driven else state.updated_at)


def _summary(state: RolloutState, driven: bool = False) -> dict[str, Any]:
    failed = {n.name: n.failure for n in state.nodes.values() if n.step in FAILURE_STEPS}
    return {
        "progress": asdict(_progress(state, driven)),
        "id": state.id,
        "target_version": state.target_version,
        "phase": state.phase.value,
        "reason": state.reason,
        "counts": state.counts(),
        "failed": failed,
        "needs_a_person": sorted(n.name for n in state.nodes.values() if n.step == NodeStep.FAILED),
    }


def _report(state: RolloutState, json_out: bool, *, fail_unless_completed: bool = True) -> None:
    summary = _summary(state)
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
@with_plan_options
def driver(
    *,
    plan_options: dict[str, Any],
    to: str = ToOpt,
    spec_file: Path = SpecOpt,
    inventory: Path = typer.Option(..., "--inventory", "-i", help="Ansible inventory (`ha-ops inventory --spec`)."),
    playbook: Path = typer.Option(DEFAULT_PLAYBOOK, "--playbook", help="The driver rollout playbook."),
    health_command: str = typer.Option(DEFAULT_HEALTH_COMMAND, "--health-command", help="Run on a node; 0 = healthy."),
    version_command: str = typer.Option(
        DEFAULT_VERSION_COMMAND, "--version-command", help="Prints the driver version of every GPU, one per line."
    ),
    state_dir: Path = StateDirOpt,
    controllers: list[str] = ControllerOpt,
    no_controller: bool = NoControllerOpt,
    controller_cert: Path | None = ControllerCertOpt,
    controller_key: Path | None = ControllerKeyOpt,
    controller_ca: Path | None = ControllerCaOpt,
    dry_run: bool = typer.Option(False, "--dry-run", help="Plan and check the inputs; change nothing."),
    json_out: bool = JsonOpt,
) -> None:
    """Start a driver rollout: canary, then waves; every node drained, upgraded through the gpu_driver role,
    validated and returned. Each batch is announced to the remediation controllers as a maintenance window, and no
    wave starts while their breaker is open or a pool is under its minimum healthy share (docs/architecture.md).
    Exit 0 when completed (or paused), 1 when halted, aborted or refused."""
    plan, policy, fleet = _plan(to, spec_file, plan_options)
    coordination = _controller_inputs(spec_file, controllers, no_controller, controller_cert, controller_key,
                                      controller_ca)  # fmt: skip
    problems = []
    if not inventory.is_file():
        problems.append(f"--inventory: {inventory} does not exist")
    if not playbook.is_file():
        problems.append(f"--playbook: {playbook} does not exist")
    if problems:
        raise SpecError("rollout flags", problems)
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
    inputs = {
        "spec": str(spec_file.resolve()),
        "inventory": str(inventory.resolve()),
        "playbook": str(playbook.resolve()),
        "health_command": health_command,
        "version_command": version_command,
        **coordination,
    }
    rollout_id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(2)
    with store.lock():
        store.refuse_if_active()
        store.archive()
        state = new_state(plan, policy, rollout_id, time.time(), inputs, {n.name: n.domain for n in fleet})
        store.save(state)
        output.info(f"rollout {rollout_id}: state in {store.state_path}")
        final = _execute(store)
    _report(final, json_out)


@app.command()
def resume(state_dir: Path = StateDirOpt, json_out: bool = JsonOpt) -> None:
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
    state_dir: Path = StateDirOpt,
    note: str = typer.Option("", "--note", help="Why (recorded in the state)."),
    json_out: bool = JsonOpt,
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
    state_dir: Path = StateDirOpt,
    rollback: bool = typer.Option(False, "--rollback", help="Also roll back every node the rollout changed."),
    note: str = typer.Option("", "--note", help="Why (recorded in the state)."),
    json_out: bool = JsonOpt,
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
def status(state_dir: Path = StateDirOpt, json_out: bool = JsonOpt) -> None:
    """Phase, reason, every wave's progress, and the nodes in flight or failed."""
    store = RolloutStore(state_dir)
    state = store.load()
    control = store.read_control()
    running = store.running_elsewhere()
    if json_out:
        output.emit_json({"summary": _summary(state, running), "running": running, "control": control.model_dump(),
                          "state": state.model_dump(mode="json")})  # fmt: skip
        return
    output.result(
        f"rollout {state.id}: driver {state.target_version}, {state.phase.value}"
        + (f" ({state.reason})" if state.reason else "")
        + ("; a process is driving it" if running else "; no process is driving it")
    )
    output.result(describe(_progress(state, running)))
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
