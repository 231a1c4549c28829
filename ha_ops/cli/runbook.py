"""`ha-ops runbook verify`: run the failure a runbook is about and check every claim and command in it."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from ha_ops.cli import output
from ha_ops.cli.targets import InventoryOpt, LabOpt, SpecOpt, TargetOpt, named

app = typer.Typer(help="Recovery runbooks, verified against a cluster: the lab or your own.", no_args_is_help=True)

RUNBOOKS = Path(__file__).resolve().parents[2] / "runbooks"


@app.command()
def verify(
    runbook: Path | None = typer.Argument(None, help="A runbook (Markdown with front matter)."),
    all_: bool = typer.Option(False, "--all", help="Every runbook in runbooks/ (the full lab: lab-storage.yaml)."),
    target: str | None = TargetOpt,
    inventory: Path | None = InventoryOpt,
    spec: Path | None = SpecOpt,
    lab: str | None = LabOpt,
    confirm_production: bool = typer.Option(
        False, "--confirm-production", help="Required when the cluster's spec says production: true."
    ),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Inject the runbook's failure, check each claim within its time, run each manual step; name stale steps.
    Exit 1 if any step is stale."""
    from ha_ops.chaos.runner import guard_production
    from ha_ops.chaos.target import open_for
    from ha_ops.errors import SpecError
    from ha_ops.runbooks.verify import load_runbook
    from ha_ops.runbooks.verify import verify as run_verify

    if runbook is None and not all_:
        raise SpecError("runbook verify", ["name a runbook, or use --all"])
    paths = sorted(p for p in RUNBOOKS.glob("*.md") if p.name != "README.md") if all_ else [runbook]
    for path in paths:
        assert path is not None
        load_runbook(path)  # every runbook is valid before any failure is injected
    configuration = named(target, inventory, spec, lab)
    cluster = open_for(configuration)
    guard_production(cluster, confirm_production)
    results = []
    for path in paths:
        assert path is not None
        output.info(f"verifying {path.name} against {cluster.name}")
        results.append(run_verify(path, cluster, configuration))
    if json_out:
        output.emit_json([{"runbook": r.runbook, "steps": [s.__dict__ for s in r.steps], "stale": len(r.stale),
                           "manual": len(r.manual), "as_written": r.as_written} for r in results])  # fmt: skip
    else:
        for r in results:
            state = "up to date" if not r.stale else f"{len(r.stale)} stale step(s)"
            table = Table(title=f"{r.runbook}: {state}; {r.as_written} of {len(r.manual)} manual steps as written")
            for col in ("kind", "step", "ok", "detail"):
                table.add_column(col)
            for s in r.steps:
                table.add_row(s.kind, s.name, "yes" if s.ok else "STALE", s.detail, style="" if s.ok else "bold red")
            output.result(table)
    if any(r.stale for r in results):
        raise typer.Exit(1)
