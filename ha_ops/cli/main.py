"""The `ha-ops` command: registers the command groups and maps errors to exit codes."""

from __future__ import annotations

import logging
import os
import sys

import typer

from ha_ops import __version__
from ha_ops.cli import agent as agent_cmd
from ha_ops.cli import chaos as chaos_cmd
from ha_ops.cli import controller as controller_cmd
from ha_ops.cli import gameday as gameday_cmd
from ha_ops.cli import gpu as gpu_cmd
from ha_ops.cli import inventory as inventory_cmd
from ha_ops.cli import k8s as k8s_cmd
from ha_ops.cli import lab as lab_cmd
from ha_ops.cli import monitoring as monitoring_cmd
from ha_ops.cli import output
from ha_ops.cli import pki as pki_cmd
from ha_ops.cli import power as power_cmd
from ha_ops.cli import rollout as rollout_cmd
from ha_ops.cli import runbook as runbook_cmd
from ha_ops.cli import spec as spec_cmd
from ha_ops.cli import storage as storage_cmd
from ha_ops.cli import wheelhouse as wheelhouse_cmd
from ha_ops.errors import HaOpsError, SpecError

try:  # typer >= 0.2x vendors click as typer._click; older releases depend on click itself
    from typer._click.exceptions import ClickException
except ImportError:  # pragma: no cover - depends on the installed typer
    from click.exceptions import ClickException  # type: ignore[no-redef]

app = typer.Typer(
    name="ha-ops",
    help="Build and operate high-availability GPU clusters.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(spec_cmd.app, name="spec")
app.add_typer(lab_cmd.app, name="lab")
app.add_typer(agent_cmd.agent_app, name="agent")
app.add_typer(agent_cmd.health_app, name="health")
app.add_typer(gpu_cmd.app, name="gpu")
app.add_typer(controller_cmd.controller_app, name="controller")
app.add_typer(controller_cmd.audit_app, name="audit")
app.add_typer(storage_cmd.app, name="storage")
app.add_typer(monitoring_cmd.app, name="monitoring")
app.add_typer(chaos_cmd.app, name="chaos")
app.add_typer(gameday_cmd.app, name="gameday")
app.add_typer(runbook_cmd.app, name="runbook")
app.add_typer(rollout_cmd.app, name="rollout")
app.add_typer(power_cmd.app, name="power")
app.add_typer(pki_cmd.app, name="pki")
app.add_typer(k8s_cmd.app, name="k8s")
app.add_typer(wheelhouse_cmd.app, name="wheelhouse")
app.command("inventory")(inventory_cmd.inventory)


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


def main() -> None:
    try:
        # Outside standalone mode click returns the code of a typer.Exit (Ctrl-C: 130) instead of exiting.
        code = app(standalone_mode=False)
        if isinstance(code, int) and code:
            sys.exit(code)
    except SystemExit:
        raise
    except HaOpsError as exc:
        if isinstance(exc, SpecError) and len(exc.problems) == 1:
            output.error(f"{exc.source}: {exc.problems[0]}")  # one problem, one line
        elif isinstance(exc, SpecError):
            output.error(f"{exc.source}: invalid")
            for problem in exc.problems:
                output.error(f"  {problem}")
        else:
            output.error(str(exc))
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        output.error("interrupted")
        sys.exit(130)
    except ClickException as exc:  # usage errors arrive here in non-standalone mode
        exc.show()
        sys.exit(exc.exit_code)
    except typer.Abort:
        output.error("aborted")
        sys.exit(1)
    except Exception as exc:
        if os.environ.get("HA_OPS_VERBOSE"):
            raise
        output.error(f"internal error: {type(exc).__name__}: {exc} (run with -v for the traceback)")
        sys.exit(70)


if __name__ == "__main__":  # `python -m ha_ops.cli.main`, as the container image runs it
    main()
