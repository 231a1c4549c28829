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
    from ha_ops.chaos.target import open_for

    loaded = plans.select(plans.load_plan(resolve(plan, "gameday")), only)
    configuration = named(target, inventory, spec, lab, default_lab=loaded.lab)
    if dry_run:
        for fault in loaded.faults:
            runner.load_experiment(fault.experiment, configuration, fault.vars)
            detect = ", ".join(c.describe() for c in fault.detect)
            recover = ", ".join(c.describe() for c in fault.recover)
            output.result(f"{fault.name}: {fault.experiment.name}; detected when {detect}; recovered when {recover}")
        return
    cluster = open_for(configuration)
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
