"""`ha-ops runbook verify`: run the failure a runbook is about and check every claim and command in it."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from ha_ops.cli import output
from ha_ops.cli.targets import InventoryOpt, LabOpt, SpecOpt, TargetOpt, named
from ha_ops.shipped import resolve, shipped

app = typer.Typer(help="Recovery runbooks, verified against a cluster: the lab or your own.", no_args_is_help=True)

RUNBOOKS = shipped("runbooks")


@app.command()
def verify(
    runbooks: list[Path] | None = typer.Argument(None, help="Runbooks (Markdown with front matter)."),
    all_: bool = typer.Option(False, "--all", help="Every runbook in runbooks/ (the full lab: lab-storage.yaml)."),
    target: str | None = TargetOpt,
    inventory: Path | None = InventoryOpt,
    spec: Path | None = SpecOpt,
    lab: str | None = LabOpt,
    confirm_production: bool = typer.Option(
        False, "--confirm-production", help="Required when the cluster's spec says production: true."
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Check the runbooks and their experiments, and list what would run; reach nothing."
    ),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Inject the runbook's failure, check each claim within its time, run each manual step; name stale steps.
    Exit 1 if any step is stale. With --all, a runbook whose failure needs a capability the cluster lacks (the
    lab's driver builds, its storage-master promotion) is reported as not verified there, and nothing of it runs;
    a named one exits 2."""
    from ha_ops.chaos.runner import guard_production
    from ha_ops.chaos.target import open_for
    from ha_ops.cluster.gpu import CapabilityMissing
    from ha_ops.errors import SpecError
    from ha_ops.runbooks.verify import load_runbook
    from ha_ops.runbooks.verify import verify as run_verify

    if not runbooks and not all_:
        raise SpecError("runbook verify", ["name a runbook, or use --all"])
    if runbooks and all_:
        raise SpecError("runbook verify", ["name runbooks or use --all, not both"])
    paths = (sorted(p for p in RUNBOOKS.glob("*.md") if p.name != "README.md") if all_
             else [resolve(p, "runbook") for p in runbooks or []])  # fmt: skip
    loaded = [load_runbook(path)[0] for path in paths]  # every runbook is valid before any failure is injected
    if dry_run:
        plans = [{"runbook": path.name, "experiment": str(rb.trigger.experiment),
                  "checks": [c.claim for c in rb.checks], "manual": [m.step for m in rb.manual],
                  "cases": [c.name for c in rb.cases]} for path, rb in zip(paths, loaded, strict=True)]  # fmt: skip
        if json_out:
            output.emit_json(plans)
            return
        for plan in plans:
            output.result(f"{plan['runbook']}: inject {Path(plan['experiment']).name}; {len(plan['checks'])} claim(s), "
                          f"{len(plan['manual'])} manual step(s), {len(plan['cases'])} other case(s)")  # fmt: skip
            for claim in plan["checks"]:
                output.result(f"  claim: {claim}")
        return
    configuration = named(target, inventory, spec, lab)
    cluster = open_for(configuration)
    guard_production(cluster, confirm_production)
    results = []
    for path in paths:
        output.info(f"verifying {path.name} against {cluster.name}")
        results.append(run_verify(path, cluster, configuration))
        if results[-1].unverifiable and not all_:
            raise CapabilityMissing(f"{path.name} cannot be verified on {cluster.name}: {results[-1].unverifiable}")
    if json_out:
        output.emit_json([{"runbook": r.runbook, "steps": [s.__dict__ for s in r.steps], "stale": len(r.stale),
                           "manual": len(r.manual), "as_written": r.as_written, "unverifiable": r.unverifiable}
                          for r in results])  # fmt: skip
    else:
        for r in results:
            if r.unverifiable:
                output.result(f"{r.runbook}: NOT VERIFIED on {cluster.name}: {r.unverifiable}")
                continue
            state = "up to date" if not r.stale else f"{len(r.stale)} stale step(s)"
            table = Table(title=f"{r.runbook}: {state}; {r.as_written} of {len(r.manual)} manual steps as written")
            for col in ("kind", "step", "ok", "detail"):
                table.add_column(col)
            for s in r.steps:
                table.add_row(s.kind, s.name, "yes" if s.ok else "STALE", s.detail, style="" if s.ok else "bold red")
            output.result(table)
    skipped = [r.runbook for r in results if r.unverifiable]
    if skipped:
        output.info(f"not verified on {cluster.name} (a capability it lacks): {', '.join(skipped)}")
    if any(r.stale for r in results):
        raise typer.Exit(1)
