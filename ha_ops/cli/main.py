"""The `ha-ops` command: registers the command groups and maps errors to exit codes.

The command groups are registered lazily (LazyGroup): `ha-ops health check` runs as Slurm's HealthCheckProgram on every
node, so start-up matters, and importing every command module (lab -> lightkube, chaos, pulumi, ...) to run one of
them cost about a second. A static table names each group's module and its one-line help, so `ha-ops --help` lists
every group without importing any, and `ha-ops NAME ...` imports only NAME's module. (Deferring the imports inside
each command function instead would scatter them over every module and break tests that patch module attributes.)
"""

from __future__ import annotations

import difflib
import importlib
import logging
import os
import sys
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

from ha_ops import __version__
from ha_ops.cli import output
from ha_ops.errors import HaOpsError, SpecError

try:  # typer >= 0.2x vendors click as typer._click; older releases depend on click itself
    from typer._click import Command, Context
    from typer._click.exceptions import ClickException, UsageError
except ImportError:  # pragma: no cover - depends on the installed typer
    from click import Command, Context  # type: ignore[assignment,no-redef]
    from click.exceptions import ClickException, UsageError  # type: ignore[assignment,no-redef]

# name -> (module, attribute: a typer.Typer or a command function, the one-line help `ha-ops --help` shows).
# The help must match the module's own (tests/unit/test_cli_main.py checks); the order is the help's order.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "inventory": (
        "ha_ops.cli.inventory",
        "inventory",
        "Render the Ansible inventory for playbooks/ from a cluster spec.",
    ),
    "spec": ("ha_ops.cli.spec", "app", "Validate and show cluster specs."),
    "lab": ("ha_ops.cli.lab", "app", "Build, check and remove the local lab cluster (needs root)."),
    "agent": ("ha_ops.cli.agent", "agent_app", "The GPU health agent that runs on every GPU node."),
    "health": ("ha_ops.cli.agent", "health_app", "One-shot GPU health checks."),
    "gpu": ("ha_ops.cli.gpu", "app", "GPU operations on this node."),
    "controller": ("ha_ops.cli.controller", "controller_app", "The remediation controller."),
    "audit": ("ha_ops.cli.controller", "audit_app", "The controller's audit log."),
    "fleet": ("ha_ops.cli.fleet", "app", "The fleet's reliability history: incidents, MTBI, lemon nodes, tiers."),
    "storage": ("ha_ops.cli.storage", "app", "The cluster's replicated storage (MooseFS)."),
    "monitoring": ("ha_ops.cli.monitoring", "app", "The cluster's monitoring (Prometheus and Alertmanager)."),
    "chaos": ("ha_ops.cli.chaos", "app", "Chaos experiments (Chaos Toolkit) against a cluster: the lab or your own."),
    "gameday": ("ha_ops.cli.gameday", "app", "Game days: plans of chaos experiments, measured and reported."),
    "runbook": ("ha_ops.cli.runbook", "app", "Recovery runbooks, verified against a cluster: the lab or your own."),
    "rollout": ("ha_ops.cli.rollout", "app", "GPU driver rollouts: canaries, waves, gates, automatic rollback."),
    "power": ("ha_ops.cli.power", "app", "A node's power through its BMC (Redfish or IPMI, from the inventory)."),
    "pki": ("ha_ops.cli.pki", "app", "The cluster CA and the certificates of ha-ops' parts."),
    "k8s": ("ha_ops.cli.k8s", "app", "The ha-ops layer on a Kubernetes cluster."),
    "wheelhouse": ("ha_ops.cli.wheelhouse", "app", "Wheelhouses for installing ha-ops on nodes without an index."),
    "plan": ("ha_ops.cli.plan", "app", "Plan for failures: checkpoint interval, spares, goodput simulation."),
    "checkpoint": ("ha_ops.cli.checkpoint", "app", "Checkpoints written by ha_ops.checkpoint, and the reference job."),
}


def load_command(name: str) -> Command:
    """The click command for COMMANDS[name], importing its module."""
    module, attribute, _ = COMMANDS[name]
    target = getattr(importlib.import_module(module), attribute)
    if isinstance(target, typer.Typer):
        command: Command = typer.main.get_group(target)
    else:  # a lone command function, e.g. `inventory`
        single = typer.Typer(add_completion=False)
        single.command(name)(target)
        command = typer.main.get_command(single)
    command.name = name
    return command


class LazyGroup(TyperGroup):
    """The root group: imports a command group's module only when that group is run (see the module docstring)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._listing = False

    def list_commands(self, ctx: Context) -> list[str]:
        return [*COMMANDS, *(name for name in super().list_commands(ctx) if name not in COMMANDS)]

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        if cmd_name in self.commands or cmd_name not in COMMANDS:
            return super().get_command(ctx, cmd_name)
        if self._listing:  # the root help: the static one-liner, nothing imported
            return TyperCommand(cmd_name, help=COMMANDS[cmd_name][2])
        self.commands[cmd_name] = load_command(cmd_name)
        return self.commands[cmd_name]

    def format_help(self, ctx: Context, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False

    def resolve_command(self, ctx: Context, args: list[str]) -> tuple[str | None, Command | None, list[str]]:
        try:
            return super().resolve_command(ctx, args)
        except UsageError as exc:  # typer suggests only from the loaded commands: suggest from all of them
            matches = difflib.get_close_matches(args[0], self.list_commands(ctx)) if args else []
            if matches and "Did you mean" not in exc.message:
                exc.message = f"{exc.message.rstrip('.')}. Did you mean {', '.join(repr(m) for m in matches)}?"
            raise


app = typer.Typer(
    name="ha-ops",
    cls=LazyGroup,
    help="Build and operate high-availability GPU clusters.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # Inherited by every subcommand's context (click copies help_option_names from the parent).
    context_settings={"help_option_names": ["--help", "-h"]},
)


def _version(value: bool) -> None:
    if value:
        output.result(f"ha-ops {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    verbose: bool = typer.Option(False, "--verbose", "-v", envvar="HA_OPS_VERBOSE", help="Log debug detail to stderr."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )


def _json_error(message: str, code: int, **detail: object) -> None:
    """With --json, the error as JSON on stdout too, so that a script reading stdout gets JSON either way."""
    if "--json" in sys.argv[1:]:
        output.emit_json({"error": {"message": message, "exit_code": code, **detail}})


def _fail(code: int, lines: list[str], **detail: object) -> None:
    """Exit with `code` after the error's lines on stderr (and as JSON with --json)."""
    for line in lines:
        output.error(line)
    _json_error(lines[0] if lines else "", code, **detail)
    sys.exit(code)


def main() -> None:
    try:
        # Outside standalone mode click returns the code of a typer.Exit (Ctrl-C: 130) instead of exiting.
        code = app(standalone_mode=False)
        if isinstance(code, int) and code:
            sys.exit(code)
    except SystemExit:
        raise
    except HaOpsError as exc:
        kind = type(exc).__name__
        if isinstance(exc, SpecError):
            lines = ([f"{exc.source}: {exc.problems[0]}"] if len(exc.problems) == 1  # one problem, one line
                     else [f"{exc.source}: invalid", *(f"  {p}" for p in exc.problems)])  # fmt: skip
            _fail(exc.exit_code, lines, kind=kind, source=exc.source, problems=exc.problems)
        _fail(exc.exit_code, [str(exc)], kind=kind)
    except KeyboardInterrupt:
        _fail(130, ["interrupted"], kind="interrupted")
    except ClickException as exc:  # usage errors arrive here in non-standalone mode
        exc.show()  # click's own usage text, not one line
        _json_error(exc.format_message(), exc.exit_code, kind="usage")
        sys.exit(exc.exit_code)
    except typer.Abort:
        _fail(1, ["aborted"], kind="aborted")
    except Exception as exc:
        if os.environ.get("HA_OPS_VERBOSE"):
            raise
        _fail(70, [f"internal error: {type(exc).__name__}: {exc} (run with -v for the traceback)"], kind="internal")


if __name__ == "__main__":  # `python -m ha_ops.cli.main`, as the container image runs it
    main()
