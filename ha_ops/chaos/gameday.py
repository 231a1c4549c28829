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
from typing import Annotated, Any, Literal
from xml.etree import ElementTree as ET

import yaml
from pydantic import BeforeValidator, Field, field_validator

from ha_ops.chaos import faults, probes, runner, workload
from ha_ops.chaos.workload import Workload
from ha_ops.errors import SpecError
from ha_ops.lab.cluster import Lab
from ha_ops.util.models import ConfigModel
from ha_ops.util.yamlconfig import load_model

log = logging.getLogger(__name__)


UNSET: Any = object()


class Condition(ConfigModel):
    """A probe of ha_ops.chaos.probes and the value it must have (or must not have, with `negate`; or, with
    `changed`, any value other than the one it had before the fault)."""

    probe: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    key: str | None = Field(None, description="For a probe that answers a mapping: the entry to compare.")
    equals: Any = True
    negate: bool = False
    changed: bool = Field(False, description="Holds once the value differs from its value before the fault.")

    @field_validator("probe")
    @classmethod
    def _known_probe(cls, probe: str) -> str:
        if probe not in probes.__all__:
            raise ValueError(f"{probe!r} is not one of {', '.join(probes.__all__)}")
        return probe

    def value(self, lab: str) -> Any:
        value = getattr(probes, self.probe)(**self.arguments, lab=lab)
        return value[self.key] if self.key is not None else value

    def holds(self, lab: str, baseline: Any = UNSET) -> bool:
        try:
            value = self.value(lab)
        except Exception as exc:  # a probe that cannot answer is "not yet"
            log.debug("probe %s: %s", self.probe, exc)
            return False
        if self.changed:
            return baseline is not UNSET and value != baseline
        return (value != self.equals) if self.negate else (value == self.equals)

    def describe(self) -> str:
        args = ", ".join(f"{k}={v}" for k, v in self.arguments.items())
        test = "changed" if self.changed else f"{'!=' if self.negate else '=='} {self.equals}"
        return f"{self.probe}({args})" + (f"[{self.key}]" if self.key else "") + f" {test}"


def _as_list(value: Any) -> Any:
    return value if isinstance(value, list) else [value]


# One condition, or a list that must all hold.
Conditions = Annotated[list[Condition], BeforeValidator(_as_list), Field(min_length=1)]


def all_hold(conditions: list[Condition], lab: str, baselines: dict[int, Any] | None = None) -> bool:
    return all(c.holds(lab, (baselines or {}).get(i, UNSET)) for i, c in enumerate(conditions))


def baselines_of(conditions: list[Condition], lab: str) -> dict[int, Any]:
    """The values before the fault, for the conditions that wait for a change."""
    found = {}
    for i, c in enumerate(conditions):
        if c.changed:
            try:
                found[i] = c.value(lab)
            except Exception as exc:
                log.warning("no value before the fault for %s: %s", c.describe(), exc)
    return found


class PlannedFault(ConfigModel):
    name: str
    experiment: Path
    vars: dict[str, Any] = Field(default_factory=dict)
    detect: Conditions = Field(description="The system noticed the fault (first alert, finding or takeover).")
    recover: Conditions = Field(description="The steady state is back (checked once detected).")
    recover_while_faulted: bool = Field(
        False, description="Recovery must come while the fault lasts, not from the experiment's rollback."
    )
    timeout_s: float = Field(60.0, gt=0)


class Limits(ConfigModel):
    max_concurrent_faults: int = Field(1, ge=1)


class GameDayPlan(ConfigModel):
    name: str
    lab: str = "lab"
    limits: Limits = Limits()
    abort_when: list[Condition] = Field(default_factory=list, description="Stop the game day if any holds.")
    steady: list[Condition] = Field(
        default_factory=list, description="Waited for before each fault: the cluster is whole again."
    )
    settle_timeout_s: float = Field(120.0, gt=0)
    workload: Workload | None = Field(None, description="Jobs run through each fault: lost or run twice fails it.")
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
    rolled_back_at: float | None = None
    jobs: dict[str, Any] | None = None

    @property
    def time_to_detect(self) -> float | None:
        return None if self.detected_at is None or self.injected_at is None else self.detected_at - self.injected_at

    @property
    def time_to_recover(self) -> float | None:
        return None if self.recovered_at is None or self.injected_at is None else self.recovered_at - self.injected_at


def _watch(
    handle: Lab,
    fault: PlannedFault,
    result: FaultResult,
    stop: threading.Event,
    plan: GameDayPlan,
    aborted: list[str],
    baselines: tuple[dict[int, Any], dict[int, Any]],
) -> None:
    lab = handle.spec.name
    while not stop.is_set():
        active = faults.active(handle) if result.injected_at is None else []
        if active:
            # The journal records when the fault went in: detection is measured from there, not from this poll.
            result.injected_at = min(float(f.get("at", time.time())) for f in active)
            result.timeline.append((result.injected_at, "fault injected"))
        if result.injected_at is not None and result.detected_at is None and all_hold(fault.detect, lab, baselines[0]):
            result.detected_at = time.time()
            result.timeline.append((result.detected_at, "detected"))
        if (
            result.detected_at is not None
            and result.recovered_at is None
            and all_hold(fault.recover, lab, baselines[1])
        ):
            result.recovered_at = time.time()
            result.timeline.append((result.recovered_at, "recovered"))
        for condition in plan.abort_when:
            if condition.holds(lab):
                aborted.append(f"abort condition {condition.describe()} holds")
                stop.set()
        stop.wait(0.2)


def _settle(plan: GameDayPlan, lab: Lab) -> str:
    """Wait for the plan's steady state; '' once it holds, else what does not hold."""
    deadline = time.time() + plan.settle_timeout_s
    while True:
        failing = [c.describe() for c in plan.steady if not c.holds(lab.spec.name)]
        if not failing:
            return ""
        if time.time() >= deadline:
            return ", ".join(failing)
        time.sleep(0.5)


def run_fault(plan: GameDayPlan, fault: PlannedFault, lab: Lab) -> FaultResult:
    result = FaultResult(fault.name, started_at=time.time())
    result.timeline.append((result.started_at, "started"))
    experiment = runner.load_experiment(fault.experiment, lab.spec.name, fault.vars)
    unsettled = _settle(plan, lab)
    if unsettled:
        result.ended_at = time.time()
        result.why = f"the steady state did not return before the fault ({unsettled})"
        return result
    result.timeline.append((time.time(), "steady"))
    baselines = (baselines_of(fault.detect, lab.spec.name), baselines_of(fault.recover, lab.spec.name))
    jobs: list[str] = []
    job_dir = lab.paths.shared / "gameday" / f"{int(result.started_at)}-{_slug(fault.name)}"
    if plan.workload and plan.workload.jobs:
        jobs = workload.submit(lab, job_dir, plan.workload)
        result.timeline.append((time.time(), f"{len(jobs)} jobs submitted"))
    stop, aborted = threading.Event(), []
    watcher = threading.Thread(target=_watch, args=(lab, fault, result, stop, plan, aborted, baselines), daemon=True)
    watcher.start()
    try:
        # The fault is undone here, not by the experiment's own rollbacks: recovery can then be told from rollback.
        journal = runner.run(experiment, lab, roll_back=False)
        result.rolled_back_at = time.time()
        faults.cleanup(lab)
        result.timeline.append((result.rolled_back_at, "fault rolled back"))
        result.experiment_status, result.deviated = journal.get("status", ""), journal.get("deviated")
        deadline = result.started_at + fault.timeout_s
        while time.time() < deadline and result.recovered_at is None and not aborted and watcher.is_alive():
            time.sleep(0.2)
    finally:
        stop.set()
        watcher.join(30)  # a probe may be mid-call (a job submitted to a hung controller)
        faults.cleanup(lab)
    if jobs and plan.workload:
        account = workload.account(lab, job_dir, jobs, plan.workload.finish_within_s)
        result.jobs = account.to_dict()
        result.timeline.append((time.time(), "jobs accounted"))
    result.ended_at = time.time()
    result.timeline.append((result.ended_at, "ended"))
    _judge(result, fault, aborted)
    return result


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-")[:40]


def _judge(result: FaultResult, fault: PlannedFault, aborted: list[str]) -> None:
    late = result.recovered_at is not None and result.rolled_back_at is not None
    late = late and fault.recover_while_faulted and result.recovered_at > result.rolled_back_at  # type: ignore[operator]
    jobs = result.jobs or {}
    if aborted:
        result.verdict, result.why = "aborted", aborted[0]
    elif result.injected_at is None:
        result.why = "the fault was never injected"
    elif result.detected_at is None:
        result.why = f"not detected within {fault.timeout_s:g} s"
    elif result.recovered_at is None:
        result.why = f"not recovered within {fault.timeout_s:g} s"
    elif late:
        result.why = "not recovered while the fault lasted: only its rollback restored the steady state"
    elif jobs and not jobs.get("ok"):
        bad = {k: jobs[k] for k in ("lost", "ran_twice", "unfinished") if jobs.get(k)}
        result.why = "jobs " + "; ".join(f"{k.replace('_', ' ')}: {', '.join(v)}" for k, v in bad.items())
    elif result.experiment_status != "completed" or result.deviated:
        result.why = f"experiment {result.experiment_status}" + (", steady state violated" if result.deviated else "")
    else:
        result.verdict = "passed"


def select(plan: GameDayPlan, only: list[str]) -> GameDayPlan:
    """The plan with just the named faults (in plan order); an unknown name is refused, naming the known ones."""
    if not only:
        return plan
    names = [f.name for f in plan.faults]
    unknown = [n for n in only if n not in names]
    if unknown:
        raise SpecError("--only", [f"no fault named {n!r}; the plan has: {'; '.join(names)}" for n in unknown])
    return plan.model_copy(update={"faults": [f for f in plan.faults if f.name in only]})


def run_gameday(
    plan: GameDayPlan, lab: Lab, progress: Any = None, confirm_production: bool = False
) -> list[FaultResult]:
    runner.guard_production(lab, confirm_production)
    results = []
    with faults.limit(plan.limits.max_concurrent_faults):
        for i, fault in enumerate(plan.faults):
            if progress:
                progress(f"[{i + 1}/{len(plan.faults)}] {fault.name}")
            result = run_fault(plan, fault, lab)
            results.append(result)
            if progress:
                ttd, ttr = result.time_to_detect, result.time_to_recover
                jobs = result.jobs or {}
                lost = f", jobs lost {len(jobs.get('lost', []))} twice {len(jobs.get('ran_twice', []))}" if jobs else ""
                progress(f"    {result.verdict}: detect {_s(ttd)}, recover {_s(ttr)}{lost} {result.why}")
            if result.verdict == "aborted":
                break
            time.sleep(plan.pause_between_s)
    return results


def _jobs(r: FaultResult) -> str:
    if not r.jobs:
        return "-"
    j = r.jobs
    return (
        f"{len(j['completed_once'])}/{j['jobs']} completed once ({len(j['restarted'])} resumed after a requeue), "
        f"lost {len(j['lost'])}, ran twice {len(j['ran_twice'])}, unfinished {len(j['unfinished'])}"
    )


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
        ).text = f"time to detect {_s(r.time_to_detect)}; to recover {_s(r.time_to_recover)}; jobs {_jobs(r)}"
    return ET.tostring(suite, encoding="unicode")


def report_html(plan: GameDayPlan, results: list[FaultResult]) -> str:
    """One self-contained page: a table and, per fault, an SVG timeline (no scripts, no external files)."""
    rows, charts = [], []
    for r in results:
        colour = {"passed": "#2e7d32", "failed": "#c62828", "aborted": "#ef6c00"}[r.verdict]
        rows.append(
            f"<tr><td>{html.escape(r.name)}</td><td style='color:{colour}'><b>{r.verdict}</b></td>"
            f"<td>{_s(r.time_to_detect)}</td><td>{_s(r.time_to_recover)}</td><td>{html.escape(_jobs(r))}</td>"
            f"<td>{html.escape(r.why)}</td></tr>"
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
        "<table><tr><th>fault</th><th>verdict</th><th>time to detect</th><th>time to recover</th><th>jobs</th>"
        "<th>why</th></tr>"
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
