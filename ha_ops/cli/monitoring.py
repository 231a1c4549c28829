"""`ha-ops monitoring rules`: the ha-ops alert rules for Prometheus, as the monitoring role ships them."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from ha_ops.cli import output
from ha_ops.monitoring.rules import CLUSTER_GROUP, FABRIC_DEVICES, LAB_GROUP, RUNBOOK_BASE, rules_yaml
from ha_ops.util.atomic import write_atomic

app = typer.Typer(help="The cluster's monitoring (Prometheus and Alertmanager).", no_args_is_help=True)


@app.command()
def rules(
    out: Path | None = typer.Option(None, "--out", "-o", help="Write the rule file here instead of to stdout."),
    group: list[str] = typer.Option(
        [], "--group", "-g", help=f"Only this group (repeatable): {LAB_GROUP} or {CLUSTER_GROUP}; default both."
    ),
    fabric_devices: str = typer.Option(
        FABRIC_DEVICES,
        "--fabric-devices",
        help="Regex (anchored) of the fabric's network devices, as node_exporter names them.",
    ),
    runbook_base: str = typer.Option(
        RUNBOOK_BASE,
        "--runbook-base",
        metavar="URL",
        help="Where your people read the runbooks (a wiki, a Git web view of runbooks/): each alert's runbook_url "
        "is this plus the runbook's file name. Default: relative to the ha-ops repository.",
    ),
) -> None:
    """Render the alert rules as a Prometheus rule file (YAML). Check it with `promtool check rules FILE`."""
    try:
        text = rules_yaml(group or None, fabric_devices, runbook_base)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--group") from exc
    if out is None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    write_atomic(out, text)
    output.info(f"wrote {out}")
