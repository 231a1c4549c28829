"""`ha-ops gameday run` and `ha-ops gameday schedule`."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

import typer

from ha_ops.cli import output
from ha_ops.cli.targets import InventoryOpt, LabOpt, SpecOpt, TargetOpt, named
from ha_ops.shipped import resolve

app = typer.Typer(help="Game days: plans of chaos experiments, measured and reported.", no_args_is_help=True)


class ScheduleKind(StrEnum):
    SYSTEMD = "systemd"
    CRONJOB = "cronjob"


@app.command("run")
def run(
    plan: Path = typer.Argument(..., help="A game-day plan (YAML), or the name of a shipped one (gpu, standard, ...)."),
    target: str | None = TargetOpt,
    inventory: Path | None = InventoryOpt,
    spec: Path | None = SpecOpt,
    lab: str | None = LabOpt,
    report_dir: Path = typer.Option(
        Path("reports/gameday"),
        "--report-dir",
        help="The reports' root: each run gets its own folder there, `latest` points at it, index.html is the "
        "history of every run.",
    ),
    only: list[str] = typer.Option([], "--only", help="Run just this fault (by name; repeatable)."),
    confirm_production: bool = typer.Option(
        False, "--confirm-production", help="Required when the cluster's spec says production: true."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Validate the plan and its experiments; inject nothing."),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Run every fault of the plan, measure time to detect and to recover and the jobs lost or run twice, and write
    JSON, JUnit and HTML reports and each fault's Chaos Toolkit journal into the run's own folder under
    --report-dir, then the history page across runs. Exit 1 unless every fault passed."""
    import time

    from ha_ops.chaos import gameday, report, runner
    from ha_ops.chaos import plan as plans
    from ha_ops.chaos.target import open_for

    plan_file = resolve(plan, "gameday")
    loaded = plans.select(plans.load_plan(plan_file), only)
    configuration = named(target, inventory, spec, lab, default_lab=loaded.lab)
    if dry_run:
        for fault in loaded.faults:
            runner.load_experiment(fault.experiment, configuration, fault.vars)
            detect = ", ".join(c.describe() for c in fault.detect)
            recover = ", ".join(c.describe() for c in fault.recover)
            output.result(f"{fault.name}: {fault.experiment.name}; detected when {detect}; recovered when {recover}")
        return
    cluster = open_for(configuration)
    started = time.time()
    results = gameday.run_gameday(
        loaded, cluster, configuration, progress=output.info, confirm_production=confirm_production
    )
    info = report.RunInfo.of(loaded, plan_file, configuration, cluster, started, time.time())
    folder = report.write_run(loaded, results, report_dir, info)
    summary = report.report_json(loaded, results, info)
    if json_out:
        output.emit_json({**summary, "report_dir": str(folder), "history": str(report_dir / "index.html"),
                          "reports": [str(p) for p in sorted(folder.rglob("*")) if p.is_file()]})  # fmt: skip
    else:
        output.result(f"game day {loaded.name}: {'passed' if summary['passed'] else 'FAILED'}; reports in {folder}, "
                      f"history in {report_dir / 'index.html'}")  # fmt: skip
    if not summary["passed"]:
        raise typer.Exit(1)


@app.command()
def schedule(
    plan: Path = typer.Argument(..., dir_okay=False),
    every: str = typer.Option(..., "--every", help="systemd OnCalendar (e.g. 'Mon 03:00') or a cron expression."),
    kind: ScheduleKind = typer.Option(
        ScheduleKind.SYSTEMD, "--kind", help="systemd: a service and timer; cronjob: a Kubernetes CronJob."
    ),
    inventory: Path | None = InventoryOpt,
    target: str | None = TargetOpt,
    timeout_s: int = typer.Option(3600, "--timeout-s", min=60, help="A run that lasts longer is stopped."),
    ha_ops: Path | None = typer.Option(None, "--ha-ops", help="systemd: the installed ha-ops (default: this one)."),
    image: str | None = typer.Option(None, "--image", help="cronjob: the ha-ops image, pinned by digest."),
    secret: str = typer.Option(
        "ha-ops-cluster", "--secret", help="cronjob: Secret with the inventory, key and known_hosts."
    ),
    reports_claim: str = typer.Option("ha-ops-gameday-reports", "--reports-claim", help="cronjob: the reports PVC."),
    plan_in_image: str | None = typer.Option(None, "--plan-in-image", help="cronjob: the plan's path in the image."),
    out: Path | None = typer.Option(None, "--out", help="Write the files here instead of printing them."),
) -> None:
    """Render a recurring game day: a systemd service and timer that run the installed ha-ops by absolute path, or
    a Kubernetes CronJob (image pinned by digest, inventory and SSH key from a Secret, a volume for reports). Each
    run gets its own report folder and a time limit."""
    import shutil
    import sys
    from pathlib import PurePosixPath

    from ha_ops.chaos import plan as plans
    from ha_ops.chaos.schedule import Schedule, render_cronjob, render_systemd
    from ha_ops.errors import SpecError

    if inventory is not None and target is not None:
        raise SpecError("--target", ["name one cluster: --target and --inventory were both given"])
    plans.load_plan(plan)  # refuse to schedule a plan that does not load
    if inventory is not None:
        from ha_ops.cluster.inventory import load_inventory

        load_inventory(inventory)  # nor one whose inventory does not
    wanted = Schedule(plan, every, timeout_s, inventory, target)
    if kind == ScheduleKind.SYSTEMD:
        beside = Path(sys.executable).parent / "ha-ops"
        found = ha_ops or (beside if beside.exists() else Path(shutil.which("ha-ops") or "ha-ops"))
        files = render_systemd(wanted, found)
    else:
        if image is None:
            raise SpecError("--image", ["a CronJob needs the ha-ops image, pinned by digest"])
        in_image = PurePosixPath(plan_in_image or f"/opt/ha-ops/chaos/gamedays/{plan.name}")
        files = {f"ha-ops-gameday-{plan.stem}-cronjob.yaml": render_cronjob(wanted, image, secret, reports_claim,
                                                                             in_image)}  # fmt: skip
    for name, text in files.items():
        if out is None:
            output.result(f"# {name}\n{text}")
        else:
            out.mkdir(parents=True, exist_ok=True)
            (out / name).write_text(text)
            output.info(f"wrote {out / name}")


@app.command("history")
def history(
    report_dir: Path = typer.Argument(Path("reports/gameday"), help="The reports' root (gameday run --report-dir)."),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Rewrite the history page (index.html) of every run under REPORT_DIR, and list the runs: when, which plan,
    the verdict and the faults passed. `gameday run` rewrites it after every run."""
    from ha_ops.chaos import history as runs_history
    from ha_ops.errors import SpecError

    if not report_dir.is_dir():
        raise SpecError(str(report_dir), ["no such folder of game-day reports"])
    runs = runs_history.load_runs(report_dir)
    page = runs_history.write_history(report_dir, runs)
    listed = [{"folder": str(report_dir / r.folder), "started": r.started, "gameday": r.report.get("gameday"),
               "passed": bool(r.report.get("passed")),
               "faults_passed": r.faults_passed, "faults": len(r.faults)}
              for r in runs]  # fmt: skip
    if json_out:
        output.emit_json({"history": str(page), "runs": listed})
        return
    for r in listed:
        verdict = "passed" if r["passed"] else "FAILED"
        output.result(f"{r['started']}  {r['gameday']}: {verdict}, {r['faults_passed']}/{r['faults']} faults passed")
    output.info(f"{len(listed)} run(s); history page {page}")
