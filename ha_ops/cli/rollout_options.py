"""The options of `ha-ops rollout`: those every command takes, and the plan flags `rollout plan driver` and
`rollout driver` share, declared once and handed to the command as one typed PlanRequest."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from ha_ops.rollout.ansible import DEFAULT_HEALTH_COMMAND, DEFAULT_PLAYBOOK, DEFAULT_VERSION_COMMAND
from ha_ops.rollout.request import PlanRequest
from ha_ops.rollout.state import DEFAULT_STATE_DIR

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

ControllerOpt = typer.Option(
    [], "--controller", help="A remediation controller's base URL (repeat for the pair; default: the spec's)."
)
NoControllerOpt = typer.Option(False, "--no-controller", help="Do not coordinate with remediation controllers.")
ControllerCertOpt = typer.Option(
    None, "--controller-cert", envvar="HA_OPS_TLS_CERT", help="An operator certificate for https controllers."
)
ControllerKeyOpt = typer.Option(None, "--controller-key", envvar="HA_OPS_TLS_KEY", help="Its private key.")
ControllerCaOpt = typer.Option(None, "--controller-ca", envvar="HA_OPS_TLS_CA", help="The cluster CA.")

InventoryOpt = typer.Option(..., "--inventory", "-i", help="Ansible inventory (`ha-ops inventory --spec`).")
PlaybookOpt = typer.Option(DEFAULT_PLAYBOOK, "--playbook", help="The driver rollout playbook.")
HealthCommandOpt = typer.Option(DEFAULT_HEALTH_COMMAND, "--health-command", help="Run on a node; 0 = healthy.")
VersionCommandOpt = typer.Option(
    DEFAULT_VERSION_COMMAND, "--version-command", help="Prints the driver version of every GPU, one per line."
)
DryRunOpt = typer.Option(False, "--dry-run", help="Plan and check the inputs; change nothing.")


# The flags `plan driver` and `driver` share, declared once: PlanRequest field -> (type, option).
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


def with_plan_options(command: Callable[..., None]) -> Callable[..., None]:
    """Give a command the shared plan flags (Typer reads them from the signature); it receives them as one
    `plan_request` (a PlanRequest)."""
    own = [p for p in inspect.signature(command).parameters.values() if p.name != "plan_request"]
    shared = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=kind)
              for name, (kind, option) in _PLAN_OPTIONS.items()]  # fmt: skip
    # json_out stays last, as in --help of every other command.
    last = [p for p in own if p.name == "json_out"]
    params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own if p.name != "json_out"] + shared + last

    @functools.wraps(command)
    def wrapper(**kwargs: Any) -> None:
        request = PlanRequest(**{name: kwargs.pop(name) for name in _PLAN_OPTIONS})
        command(plan_request=request, **kwargs)

    wrapper.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    return wrapper
