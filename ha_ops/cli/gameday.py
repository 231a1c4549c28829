"""`ha-ops gameday run` and `ha-ops gameday schedule`."""

from __future__ import annotations

from pathlib import Path

import typer

from ha_ops.cli import output
from ha_ops.cli.targets import InventoryOpt, LabOpt, SpecOpt, TargetOpt, named, open_named

app = typer.Typer(help="Game days: plans of chaos experiments, measured and reported.", no_args_is_help=True)


@app.command("run")
def run(
    plan: Path = typer.Argument(..., help="A game-day plan (YAML, under chaos/gamedays/)."),
    target: str | None = TargetOpt,
    inventory: Path | None = InventoryOpt,
    spec: Path | None = SpecOpt,
    lab: str | None = LabOpt,
    report_dir: Path = typer.Option(Path("reports/gameday"), "--report-dir", help="Where the reports go."),
    only: list[str] = typer.Option([], "--only", help="Run just this fault (by name; repeatable)."),
    confirm_production: bool = typer.Option(
        False, "--confirm-production", help="Required when the cluster's spec says production: true."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Validate the plan and its experiments; inject nothing."),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Run every fault of the plan, measure time to detect and to recover and the jobs lost or run twice, and write
    JSON, JUnit and HTML reports. Exit 1 unless every fault passed."""
    from ha_ops.chaos import gameday, report, runner
    from ha_ops.chaos import plan as plans

    loaded = plans.select(plans.load_plan(plan), only)
    configuration = named(target, inventory, spec, lab, default_lab=loaded.lab)
    if dry_run:
        for fault in loaded.faults:
            runner.load_experiment(fault.experiment, configuration, fault.vars)
            detect = ", ".join(c.describe() for c in fault.detect)
            recover = ", ".join(c.describe() for c in fault.recover)
            output.result(f"{fault.name}: {fault.experiment.name}; detected when {detect}; recovered when {recover}")
        return
    cluster = open_named(configuration)
    results = gameday.run_gameday(
        loaded, cluster, configuration, progress=output.info, confirm_production=confirm_production
    )
    paths = report.write_reports(loaded, results, report_dir)
    summary = report.report_json(loaded, results)
    if json_out:
        output.emit_json({**summary, "reports": [str(p) for p in paths]})
    else:
        output.result(f"game day {loaded.name}: {'passed' if summary['passed'] else 'FAILED'}; reports in {report_dir}")
    if not summary["passed"]:
        raise typer.Exit(1)


@app.command()
def schedule(
    plan: Path = typer.Argument(...),
    every: str = typer.Option(..., "--every", help="systemd OnCalendar (e.g. 'Mon 03:00') or a cron expression."),
    kind: str = typer.Option("systemd", "--kind", help="systemd (service + timer) or cronjob (Kubernetes)."),
    lab: str = typer.Option("lab", "--lab"),
    out: Path | None = typer.Option(None, "--out", help="Write the files here instead of printing them."),
) -> None:
    """Render a recurring game day: a systemd timer, or a Kubernetes CronJob."""
    from ha_ops.chaos import plan as plans
    from ha_ops.chaos.schedule import render_schedule
    from ha_ops.errors import SpecError

    if kind not in ("systemd", "cronjob"):
        raise SpecError("--kind", [f"{kind!r} is not systemd or cronjob"])
    plans.load_plan(plan)  # refuse to schedule a plan that does not load
    files = render_schedule(plan, every, kind, lab)  # type: ignore[arg-type]
    for name, text in files.items():
        if out is None:
            output.result(f"# {name}\n{text}")
        else:
            out.mkdir(parents=True, exist_ok=True)
            (out / name).write_text(text)
            output.info(f"wrote {out / name}")
