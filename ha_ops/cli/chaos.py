"""`ha-ops chaos run` and `ha-ops chaos cleanup`."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import typer
import yaml

from ha_ops.cli import output
from ha_ops.errors import SpecError

app = typer.Typer(help="Chaos experiments against the lab (Chaos Toolkit).", no_args_is_help=True)

LabOpt = typer.Option("lab", "--lab", envvar="HA_OPS_LAB", help="The lab the experiment runs against.")


@app.command("run")
def run(
    experiment: Path = typer.Argument(..., help="A Chaos Toolkit experiment (JSON or YAML)."),
    lab: str = LabOpt,
    dry_run: bool = typer.Option(False, "--dry-run", help="Validate and print the plan; inject nothing."),
    journal: Path | None = typer.Option(None, "--journal", help="Write Chaos Toolkit's journal here (JSON)."),
    var: list[str] = typer.Option([], "--var", help="Override a configuration value: KEY=VALUE (YAML scalar)."),
    max_faults: int = typer.Option(1, "--max-faults", min=1, help="Faults allowed active at once in the lab."),
    confirm_production: bool = typer.Option(
        False, "--confirm-production", help="Required when the cluster's spec says production: true."
    ),
) -> None:
    """Run one experiment. Exit 1 when the steady-state hypothesis is violated or the run did not complete."""
    from ha_ops.chaos import faults, runner
    from ha_ops.lab.cluster import Lab

    overrides = {}
    for item in var:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SpecError("--var", [f"{item!r} is not KEY=VALUE"])
        overrides[key] = yaml.safe_load(value)
    loaded = runner.load_experiment(experiment, lab, overrides)
    if dry_run:
        for step in runner.plan(loaded):
            output.result(step)
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[%(asctime)s] %(message)s", "%H:%M:%S"))
    chaos_log = logging.getLogger("chaostoolkit")
    chaos_log.addHandler(handler)
    chaos_log.setLevel(logging.INFO)
    chaos_log.propagate = False  # progress once, on stderr
    handle = Lab.from_state(lab)
    runner.guard_production(handle, confirm_production)
    with faults.limit(max_faults):
        result = runner.run(loaded, handle)
    if journal is not None:
        journal.write_text(json.dumps(result, indent=2, default=str))
    status, deviated = result.get("status"), result.get("deviated")
    output.result(f"{loaded.get('title')}: {status}" + (" (hypothesis violated)" if deviated else ""))
    if status != "completed" or deviated:
        raise typer.Exit(1)


@app.command()
def cleanup(lab: str = LabOpt) -> None:
    """Undo every fault a killed or interrupted run left in the lab (from the fault journal)."""
    from ha_ops.chaos import faults
    from ha_ops.lab.cluster import Lab

    undone = faults.cleanup(Lab.from_state(lab))
    output.result(f"rolled back {len(undone)} fault(s)" + (": " + ", ".join(undone) if undone else ""))
