"""Game days: a plan of chaos experiments run one after another against the lab, each measured for time to detect
(its detection condition first holds) and time to recover (its recovery condition holds again), under blast-radius
limits and abort conditions checked continuously. Reports: JSON, JUnit XML and one self-contained HTML page.
"""

from __future__ import annotations

import html
import json
import logging
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal
from xml.etree import ElementTree as ET

import yaml
from pydantic import Field

from ha_ops.chaos import faults, probes, runner
from ha_ops.errors import SpecError
from ha_ops.lab.cluster import Lab
from ha_ops.util.models import ConfigModel
from ha_ops.util.yamlconfig import load_model

log = logging.getLogger(__name__)


class Condition(ConfigModel):
    """A probe of ha_ops.chaos.probes and the value it must have (or must not have, with `negate`)."""

    probe: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    equals: Any = True
    negate: bool = False

    def holds(self, lab: str) -> bool:
        if self.probe not in probes.__all__:
            raise SpecError("gameday", [f"condition probe {self.probe!r} is not one of {', '.join(probes.__all__)}"])
        try:
            value = getattr(probes, self.probe)(**self.arguments, lab=lab)
        except Exception as exc:  # a probe that cannot answer is "not yet"
            log.debug("probe %s: %s", self.probe, exc)
            return False
        return (value != self.equals) if self.negate else (value == self.equals)


class PlannedFault(ConfigModel):
    name: str
    experiment: Path
    vars: dict[str, Any] = Field(default_factory=dict)
    detect: Condition
    recover: Condition
    timeout_s: float = Field(60.0, gt=0)


class Limits(ConfigModel):
    max_concurrent_faults: int = Field(1, ge=1)


class GameDayPlan(ConfigModel):
    name: str
    lab: str = "lab"
    limits: Limits = Limits()
    abort_when: list[Condition] = Field(default_factory=list, description="Stop the game day if any holds.")
    pause_between_s: float = Field(3.0, ge=0)
    faults: list[PlannedFault] = Field(min_length=1)


def load_plan(path: Path) -> GameDayPlan:
    plan = load_model(path, GameDayPlan)
    # Experiments are named relative to the plan.
    fixed = [f.model_copy(update={"experiment": (Path(path).parent / f.experiment).resolve()}) for f in plan.faults]
    for f in fixed:
        if not f.experiment.exists():
            raise SpecError(str(path), [f"faults[{f.name}].experiment: {f.experiment} does not exist"])
    return plan.model_copy(update={"faults": fixed})


@dataclass
class FaultResult:
    name: str
    verdict: Literal["passed", "failed", "aborted"] = "failed"
    why: str = ""
    started_at: float = 0.0
    injected_at: float | None = None
    detected_at: float | None = None
    recovered_at: float | None = None
    ended_at: float = 0.0
    experiment_status: str = ""
    deviated: bool | None = None
    timeline: list[tuple[float, str]] = field(default_factory=list)

    @property
    def time_to_detect(self) -> float | None:
        return None if self.detected_at is None or self.injected_at is None else self.detected_at - self.injected_at

    @property
    def time_to_recover(self) -> float | None:
        return None if self.recovered_at is None or self.injected_at is None else self.recovered_at - self.injected_at


def _watch(
    handle: Lab, fault: PlannedFault, result: FaultResult, stop: threading.Event, plan: GameDayPlan, aborted: list[str]
) -> None:
    lab = handle.spec.name
    while not stop.is_set():
        now = time.time()
        active = faults.active(handle) if result.injected_at is None else []
        if active:
            # The journal records when the fault went in: detection is measured from there, not from this poll.
            result.injected_at = min(float(f.get("at", now)) for f in active)
            result.timeline.append((result.injected_at, "fault injected"))
        if result.injected_at is not None and result.detected_at is None and fault.detect.holds(lab):
            result.detected_at = now
            result.timeline.append((now, "detected"))
        if result.detected_at is not None and result.recovered_at is None and fault.recover.holds(lab):
            result.recovered_at = now
            result.timeline.append((now, "recovered"))
        for condition in plan.abort_when:
            if condition.holds(lab):
                aborted.append(f"abort condition {condition.probe}{condition.arguments} holds")
                stop.set()
        stop.wait(0.2)


def run_fault(plan: GameDayPlan, fault: PlannedFault, lab: Lab) -> FaultResult:
    result = FaultResult(fault.name, started_at=time.time())
    result.timeline.append((result.started_at, "started"))
    experiment = runner.load_experiment(fault.experiment, lab.spec.name, fault.vars)
    stop, aborted = threading.Event(), []
    watcher = threading.Thread(target=_watch, args=(lab, fault, result, stop, plan, aborted), daemon=True)
    watcher.start()
    try:
        journal = runner.run(experiment, lab)
        result.experiment_status, result.deviated = journal.get("status", ""), journal.get("deviated")
        deadline = result.started_at + fault.timeout_s
        while time.time() < deadline and result.recovered_at is None and not aborted:
            time.sleep(0.2)
    finally:
        stop.set()
        watcher.join(5)
        faults.cleanup(lab)
    result.ended_at = time.time()
    result.timeline.append((result.ended_at, "ended"))
    if aborted:
        result.verdict, result.why = "aborted", aborted[0]
    elif result.injected_at is None:
        result.why = "the fault was never injected"
    elif result.detected_at is None:
        result.why = f"not detected within {fault.timeout_s:g} s"
    elif result.recovered_at is None:
        result.why = f"not recovered within {fault.timeout_s:g} s"
    elif result.experiment_status != "completed" or result.deviated:
        result.why = f"experiment {result.experiment_status}" + (", steady state violated" if result.deviated else "")
    else:
        result.verdict = "passed"
    return result


def run_gameday(plan: GameDayPlan, lab: Lab, progress: Any = None) -> list[FaultResult]:
    results = []
    for i, fault in enumerate(plan.faults):
        if progress:
            progress(f"[{i + 1}/{len(plan.faults)}] {fault.name}")
        result = run_fault(plan, fault, lab)
        results.append(result)
        if progress:
            ttd, ttr = result.time_to_detect, result.time_to_recover
            progress(f"    {result.verdict}: detect {_s(ttd)}, recover {_s(ttr)} {result.why}")
        if result.verdict == "aborted":
            break
        time.sleep(plan.pause_between_s)
    return results


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def report_json(plan: GameDayPlan, results: list[FaultResult]) -> dict[str, Any]:
    return {
        "gameday": plan.name,
        "passed": all(r.verdict == "passed" for r in results) and len(results) == len(plan.faults),
        "faults": [
            {**asdict(r), "time_to_detect_s": r.time_to_detect, "time_to_recover_s": r.time_to_recover} for r in results
        ],
    }


def report_junit(plan: GameDayPlan, results: list[FaultResult]) -> str:
    failures = sum(1 for r in results if r.verdict != "passed")
    suite = ET.Element("testsuite", name=f"gameday {plan.name}", tests=str(len(results)), failures=str(failures))
    for r in results:
        case = ET.SubElement(
            suite, "testcase", classname=plan.name, name=r.name, time=f"{r.ended_at - r.started_at:.2f}"
        )
        if r.verdict != "passed":
            ET.SubElement(case, "failure", message=r.why).text = r.why
        ET.SubElement(
            case, "system-out"
        ).text = f"time to detect {_s(r.time_to_detect)}; to recover {_s(r.time_to_recover)}"
    return ET.tostring(suite, encoding="unicode")


def report_html(plan: GameDayPlan, results: list[FaultResult]) -> str:
    """One self-contained page: a table and, per fault, an SVG timeline (no scripts, no external files)."""
    rows, charts = [], []
    for r in results:
        colour = {"passed": "#2e7d32", "failed": "#c62828", "aborted": "#ef6c00"}[r.verdict]
        rows.append(
            f"<tr><td>{html.escape(r.name)}</td><td style='color:{colour}'><b>{r.verdict}</b></td>"
            f"<td>{_s(r.time_to_detect)}</td><td>{_s(r.time_to_recover)}</td><td>{html.escape(r.why)}</td></tr>"
        )
        span = max(r.ended_at - r.started_at, 0.001)
        width = 720
        marks = []
        for at, label in r.timeline:
            x = 10 + (at - r.started_at) / span * (width - 20)
            tick = f"<line x1='{x:.1f}' y1='20' x2='{x:.1f}' y2='50' stroke='#333'/>"
            text = f"<text x='{x:.1f}' y='65' font-size='11' text-anchor='middle'>{html.escape(label)}</text>"
            marks.append(tick + text)
        if r.injected_at and r.recovered_at:
            x1 = 10 + (r.injected_at - r.started_at) / span * (width - 20)
            x2 = 10 + (r.recovered_at - r.started_at) / span * (width - 20)
            marks.insert(0, f"<rect x='{x1:.1f}' y='28' width='{max(x2 - x1, 1):.1f}' height='14' fill='#ffcdd2'/>")
        charts.append(
            f"<h3>{html.escape(r.name)}</h3><svg width='{width}' height='75' xmlns='http://www.w3.org/2000/svg'>"
            f"<line x1='10' y1='35' x2='{width - 10}' y2='35' stroke='#999'/>{''.join(marks)}</svg>"
            f"<p>{span:.1f} s from start to end; the shaded span is fault to recovery.</p>"
        )
    passed = report_json(plan, results)["passed"]
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>Game day {html.escape(plan.name)}</title>"
        "<style>body{font-family:sans-serif;margin:2em}td,th{padding:4px 10px;border-bottom:1px solid #ddd}</style>"
        f"</head><body><h1>Game day {html.escape(plan.name)}: {'PASSED' if passed else 'FAILED'}</h1>"
        "<table><tr><th>fault</th><th>verdict</th><th>time to detect</th><th>time to recover</th><th>why</th></tr>"
        f"{''.join(rows)}</table>{''.join(charts)}</body></html>"
    )


def write_reports(plan: GameDayPlan, results: list[FaultResult], directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = [directory / "gameday.json", directory / "gameday.junit.xml", directory / "gameday.html"]
    paths[0].write_text(json.dumps(report_json(plan, results), indent=2))
    paths[1].write_text(report_junit(plan, results))
    paths[2].write_text(report_html(plan, results))
    return paths


def render_schedule(plan_path: Path, every: str, kind: Literal["systemd", "cronjob"], lab: str) -> dict[str, str]:
    """A recurring game day: a systemd service + timer, or a Kubernetes CronJob. `every` is an OnCalendar value
    (systemd) or a cron expression (CronJob)."""
    command = f"ha-ops gameday run {plan_path} --lab {lab} --report-dir /var/lib/ha-ops/gamedays"
    if kind == "systemd":
        service = (
            f"[Unit]\nDescription=ha-ops game day {plan_path.name}\n\n[Service]\nType=oneshot\nExecStart={command}\n"
        )
        return {
            "ha-ops-gameday.service": service,
            "ha-ops-gameday.timer": f"[Unit]\nDescription=Recurring ha-ops game day\n\n[Timer]\nOnCalendar={every}\n"
            "Persistent=true\n\n[Install]\nWantedBy=timers.target\n",
        }
    cron = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "ha-ops-gameday"},
        "spec": {
            "schedule": every,
            "concurrencyPolicy": "Forbid",
            "jobTemplate": {"spec": {"template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "gameday", "image": "ha-ops", "command": ["sh", "-c", command]}],
            }}}},
        },
    }  # fmt: skip
    return {"ha-ops-gameday-cronjob.yaml": yaml.safe_dump(cron, sort_keys=False)}
