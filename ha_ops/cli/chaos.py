"""`ha-ops chaos run` and `ha-ops chaos cleanup`."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import typer
import yaml

from ha_ops.cli import output
from ha_ops.cli.targets import InventoryOpt, LabOpt, SpecOpt, TargetOpt, named
from ha_ops.errors import SpecError
from ha_ops.shipped import resolve

app = typer.Typer(
    help="Chaos experiments (Chaos Toolkit) against a cluster: the lab or your own.", no_args_is_help=True
)


@app.command("run")
def run(
    experiment: Path = typer.Argument(..., help="A Chaos Toolkit experiment (JSON or YAML), or a shipped one's name."),
    target: str | None = TargetOpt,
    inventory: Path | None = InventoryOpt,
    spec: Path | None = SpecOpt,
    lab: str | None = LabOpt,
    dry_run: bool = typer.Option(
        False,
        "--dry-run",
        help="Validate; print the plan and, per host, the commands each fault and its undo would run. Injects nothing.",
    ),
    journal: Path | None = typer.Option(None, "--journal", help="Write Chaos Toolkit's journal here (JSON)."),
    var: list[str] = typer.Option([], "--var", help="Override a configuration value: KEY=VALUE (YAML scalar)."),
    max_faults: int = typer.Option(1, "--max-faults", min=1, help="Faults allowed active at once in the cluster."),
    confirm_production: bool = typer.Option(
        False, "--confirm-production", help="Required when the spec or the inventory says production: true."
    ),
) -> None:
    """Run one experiment. Exit 1 when the steady-state hypothesis is violated or the run did not complete."""
    from ha_ops.chaos import faults, runner
    from ha_ops.chaos.target import open_for

    overrides = {}
    for item in var:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SpecError("--var", [f"{item!r} is not KEY=VALUE"])
        overrides[key] = yaml.safe_load(value)
    configuration = named(target, inventory, spec, lab)
    loaded = runner.load_experiment(resolve(experiment, "experiment"), configuration, overrides)
    if dry_run:
        _dry_run(loaded, configuration, max_faults)
        return
    cluster = open_for(configuration)
    runner.guard_production(cluster, confirm_production)
    with faults.limit(max_faults):
        runner.preflight(loaded, cluster)  # a bad host, key, credential or capability stops it before any fault
        with _progress():
            result = runner.run(loaded, cluster)
    if journal is not None:
        journal.write_text(json.dumps(result, indent=2, default=str))
    status, deviated = result.get("status"), result.get("deviated")
    output.result(f"{loaded.get('title')}: {status}" + (" (hypothesis violated)" if deviated else ""))
    if status != "completed" or deviated:
        raise typer.Exit(1)


@contextmanager
def _progress() -> Iterator[None]:
    """Chaos Toolkit's progress on stderr, once, for this run only."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[%(asctime)s] %(message)s", "%H:%M:%S"))
    chaos_log = logging.getLogger("chaostoolkit")
    before = (chaos_log.level, chaos_log.propagate)
    chaos_log.addHandler(handler)
    chaos_log.setLevel(logging.INFO)
    chaos_log.propagate = False
    try:
        yield
    finally:
        chaos_log.removeHandler(handler)
        chaos_log.setLevel(before[0])
        chaos_log.propagate = before[1]


def _dry_run(loaded: dict, configuration: dict[str, str], max_faults: int) -> None:
    from ha_ops.chaos import faults, runner
    from ha_ops.chaos.dryrun import plan_commands
    from ha_ops.chaos.target import open_for

    for step in runner.plan(loaded):
        output.result(step)
    with faults.limit(max_faults):
        planned = plan_commands(loaded, open_for(configuration))
    activities = list(dict.fromkeys(p.activity for p in planned))
    for activity in activities:
        output.result(f"\n{activity}:")
        # What the fault runs, then what undoes it (recorded first: the undo is journaled before the fault goes in).
        for item in sorted((p for p in planned if p.activity == activity), key=lambda p: p.undo):
            output.result(f"  {'undo: ' if item.undo else ''}{item.host}: {item.line}")


@app.command()
def cleanup(
    target: str | None = TargetOpt,
    inventory: Path | None = InventoryOpt,
    spec: Path | None = SpecOpt,
    lab: str | None = LabOpt,
    dry_run: bool = typer.Option(False, "--dry-run", help="Print, per host, what cleanup would run; undo nothing."),
) -> None:
    """Undo every fault a killed or interrupted run left in the cluster (from the fault journal on this machine). A
    host that cannot be reached keeps its entries for the next cleanup; exit 4 while any are kept."""
    from ha_ops.chaos import faults
    from ha_ops.chaos.target import open_for

    cluster = open_for(named(target, inventory, spec, lab))
    if dry_run:
        for key, host, lines in faults.plan_cleanup(cluster):
            for line in lines:
                output.result(f"{key}: {host}: {line}")
        return
    undone = faults.cleanup(cluster)
    output.result(f"rolled back {len(undone)} fault(s)" + (": " + ", ".join(undone) if undone else ""))
    if faults.active(cluster):
        output.error(f"{len(faults.active(cluster))} fault(s) kept: a host did not answer; run cleanup again later")
        raise typer.Exit(4)
