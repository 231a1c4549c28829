"""Game-day reports: JSON, JUnit XML (for CI), and one self-contained HTML page with a timeline per fault; each run
in its own folder with its faults' Chaos Toolkit journals, beside a history page across runs (chaos/history.py).

A run's folder, under the report root (`--report-dir`):
    <root>/<UTC start, 20261206T041500Z>-<plan>/gameday.json, gameday.junit.xml, gameday.html, journals/NN-<fault>.json
    <root>/latest -> the last run's folder;  <root>/index.html: the history page.
A folder is written whole under a temporary name and then renamed: a run killed while writing leaves no half report.
"""

from __future__ import annotations

import html
import json
import os
import shutil
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import ha_ops
from ha_ops.chaos import svg
from ha_ops.chaos.gameday import FaultResult, seconds, slug
from ha_ops.chaos.plan import GameDayPlan

LATEST = "latest"
REPORT, JUNIT, PAGE, JOURNALS = "gameday.json", "gameday.junit.xml", "gameday.html", "journals"
COLOURS = {"fault injected": "#ef6c00", "detected": "#1565c0", "recovered": "#2e7d32", "fault rolled back": "#6d4c41"}
FAILED = "#c62828"
VERDICT_COLOURS = {"passed": "#2e7d32", "failed": FAILED, "aborted": "#ef6c00"}


@dataclass(frozen=True)
class RunInfo:
    """What a run was: when (ISO-8601, UTC), with which ha-ops, which plan, against which cluster."""

    started: str
    ended: str
    ha_ops_version: str
    plan: str
    plan_file: str
    cluster: str
    target: str | None = None  # lab:NAME, or
    inventory: str | None = None  # an inventory (and its spec)
    spec: str | None = None
    scheduler: str | None = None

    @classmethod
    def of(cls, plan: GameDayPlan, plan_file: Path, configuration: dict[str, str], cluster: Any, started: float,
           ended: float) -> RunInfo:  # fmt: skip
        from ha_ops.chaos.target import INVENTORY, SPEC, TARGET

        remediation = getattr(getattr(cluster, "spec", None), "remediation", None)
        return cls(iso(started), iso(ended), ha_ops.__version__, plan.name, str(plan_file), str(cluster.name),
                   configuration.get(TARGET), configuration.get(INVENTORY), configuration.get(SPEC),
                   getattr(remediation, "scheduler", None))  # fmt: skip


def iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _jobs(r: FaultResult) -> str:
    if not r.jobs:
        return "-"
    j = r.jobs
    return (
        f"{len(j['completed_once'])}/{j['jobs']} completed once ({len(j['restarted'])} resumed after a requeue), "
        f"lost {len(j['lost'])}, ran twice {len(j['ran_twice'])}, unfinished {len(j['unfinished'])}, "
        f"resumed behind their last checkpoint {len(j.get('resumed_behind', []))}"
    )


def _fault_plan(plan: GameDayPlan, name: str) -> dict[str, Any]:
    """The fault as planned: its experiment, its target (the experiment's vars) and its conditions."""
    fault = next((f for f in plan.faults if f.name == name), None)
    if fault is None:
        return {}
    return {"experiment": fault.experiment.name, "target": fault.vars, "timeout_s": fault.timeout_s,
            "conditions": {"detect": [c.describe() for c in fault.detect],
                           "recover": [c.describe() for c in fault.recover]}}  # fmt: skip


def journal_name(index: int, fault: str) -> str:
    return f"{JOURNALS}/{index + 1:02d}-{slug(fault)}.json"


def all_passed(plan: GameDayPlan, results: list[FaultResult]) -> bool:
    """Every fault of the plan ran and passed."""
    return all(r.verdict == "passed" for r in results) and len(results) == len(plan.faults)


def report_json(plan: GameDayPlan, results: list[FaultResult], run: RunInfo | None = None) -> dict[str, Any]:
    faults = []
    for i, r in enumerate(results):
        measured = {k: v for k, v in asdict(r).items() if k != "journal"}
        faults.append({**measured, **_fault_plan(plan, r.name), "time_to_detect_s": r.time_to_detect,
                       "time_to_recover_s": r.time_to_recover,
                       "journal": journal_name(i, r.name) if r.journal is not None else None})  # fmt: skip
    return {
        "gameday": plan.name,
        "passed": all_passed(plan, results),
        **({"run": asdict(run)} if run else {}),
        "faults": faults,
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
        ).text = f"time to detect {seconds(r.time_to_detect)}; to recover {seconds(r.time_to_recover)}; jobs {_jobs(r)}"
    return ET.tostring(suite, encoding="unicode")


def failure_mark(r: FaultResult) -> str | None:
    """The short text of a failed fault's marker on its timeline (the full reason is in the table)."""
    if r.verdict == "passed":
        return None
    if r.verdict == "aborted":
        return "✗ aborted"
    if r.injected_at is None:
        return "✗ never injected"
    if r.detected_at is None:
        return "✗ not detected"
    if r.recovered_at is None:
        return "✗ not recovered"
    if r.why.startswith("jobs"):
        return "✗ jobs"
    return "✗ failed"


TIMELINE_WIDTH = 960
_AXIS_Y, _BAND_H, _ROW_H = 34.0, 14.0, 17.0


def timeline_svg(r: FaultResult) -> str:
    """The fault's events on a time axis in seconds from its start: the fault-to-recovery span shaded, each event a
    tick with its label (rows added so that no two labels overlap), a failure marked where it was judged."""
    lo, hi = 12.0, TIMELINE_WIDTH - 12.0
    span = max(r.ended_at - r.started_at, 0.001)

    def px(at: float) -> float:
        return lo + (at - r.started_at) / span * (hi - lo)

    # Each label says its time too: events seconds apart in a run of minutes share a pixel, not a label.
    events = [(px(at), f"{text} {at - r.started_at:.1f} s", COLOURS.get(text, "#444")) for at, text in r.timeline]
    mark = failure_mark(r)
    if mark:
        events.append((px(r.ended_at), f"{mark} {r.ended_at - r.started_at:.1f} s", FAILED))
    labels = svg.place_labels(events, lo, hi)
    rows = max((label.row for label in labels), default=0) + 1
    top = _AXIS_Y + _BAND_H / 2 + 14
    height = int(top + rows * _ROW_H + 6)
    parts = [f"<svg class='timeline' width='{TIMELINE_WIDTH}' height='{height}' xmlns='http://www.w3.org/2000/svg'>"]
    if r.injected_at is not None:
        end = r.recovered_at if r.recovered_at is not None else r.ended_at
        colour = "#c8e6c9" if r.recovered_at is not None else "#ffcdd2"
        parts.append(f"<rect x='{px(r.injected_at):.1f}' y='{_AXIS_Y - _BAND_H / 2}' "
                     f"width='{max(px(end) - px(r.injected_at), 1):.1f}' height='{_BAND_H}' fill='{colour}'>"
                     f"<title>fault to {'recovery' if r.recovered_at is not None else 'the end (no recovery)'}"
                     f"</title></rect>")  # fmt: skip
    parts.append(f"<line x1='{lo}' y1='{_AXIS_Y}' x2='{hi}' y2='{_AXIS_Y}' stroke='#777'/>")
    step_px = svg.text_width(f"{svg.number(span)} s") + 2 * svg.GAP_PX
    for t in svg.ticks(0, span, max(1, int((hi - lo) // max(step_px, 48)))):
        x = px(r.started_at + t)
        anchor = "start" if x - lo < 20 else "end" if hi - x < 20 else "middle"
        parts.append(f"<line x1='{x:.1f}' y1='{_AXIS_Y - 4}' x2='{x:.1f}' y2='{_AXIS_Y + 4}' stroke='#777'/>"
                     f"<text class='tick' x='{x:.1f}' y='{_AXIS_Y - 10}' font-size='{svg.FONT_PX}' {svg.FONT} "
                     f"fill='#555' text-anchor='{anchor}'>{svg.number(t)} s</text>")  # fmt: skip
    for at, _, colour in events:
        parts.append(f"<line x1='{at:.1f}' y1='{_AXIS_Y - _BAND_H / 2}' x2='{at:.1f}' "
                     f"y2='{_AXIS_Y + _BAND_H / 2}' stroke='{colour}' stroke-width='2'/>")  # fmt: skip
    if mark:
        x = px(r.ended_at)
        parts.append(f"<path d='M{x - 5:.1f},{_AXIS_Y - 5} l10,10 m0,-10 l-10,10' stroke='{FAILED}' "
                     f"stroke-width='2.5'><title>{html.escape(r.why)}</title></path>")  # fmt: skip
    parts.append(svg.labels_markup(labels, top, _ROW_H, _AXIS_Y + _BAND_H / 2))
    parts.append("</svg>")
    return "".join(parts)


def _definition_list(items: list[tuple[str, str | None]]) -> str:
    cells = "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>" for k, v in items if v)
    return f"<dl>{cells}</dl>"


_STYLE = (
    "body{font-family:'DejaVu Sans',Verdana,sans-serif;margin:2em;color:#222}"
    "td,th{padding:4px 10px;border-bottom:1px solid #ddd;text-align:left;vertical-align:top}"
    "dl{display:grid;grid-template-columns:max-content auto;gap:2px 16px}dt{color:#666}dd{margin:0}"
    "code{font-size:90%}.fault{margin-top:2em}"
)


def page(title: str, body: str) -> str:
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{_STYLE}</style></head><body>{body}</body></html>")  # fmt: skip


def report_html(plan: GameDayPlan, results: list[FaultResult], run: RunInfo | None = None) -> str:
    """One self-contained page: what ran (date, version, plan, cluster), a table of the faults, and per fault its
    target, conditions, journal and timeline. No script, no external file."""
    rows, sections = [], []
    for i, r in enumerate(results):
        colour = VERDICT_COLOURS[r.verdict]
        rows.append(
            f"<tr><td><a href='#fault-{i + 1}'>{html.escape(r.name)}</a></td>"
            f"<td style='color:{colour}'><b>{r.verdict}</b></td><td>{seconds(r.time_to_detect)}</td>"
            f"<td>{seconds(r.time_to_recover)}</td><td>{html.escape(_jobs(r))}</td><td>{html.escape(r.why)}</td></tr>"
        )
        planned = _fault_plan(plan, r.name)
        conditions = planned.get("conditions", {})
        journal = journal_name(i, r.name) if r.journal is not None else None
        facts = _definition_list([
            ("started", iso(r.started_at)),
            ("experiment", planned.get("experiment")),
            ("target", ", ".join(f"{k}={v}" for k, v in planned.get("target", {}).items()) or "(the experiment's)"),
            ("detected when", " and ".join(conditions.get("detect", []))),
            ("recovered when", " and ".join(conditions.get("recover", []))),
            ("time limit", f"{planned['timeout_s']:g} s" if planned else None),
        ])  # fmt: skip
        link = f"<p>Chaos Toolkit journal: <a href='{journal}'>{journal}</a></p>" if journal else ""
        sections.append(
            f"<section class='fault' id='fault-{i + 1}'><h3>{html.escape(r.name)}: "
            f"<span style='color:{colour}'>{r.verdict}</span></h3>{facts}{timeline_svg(r)}"
            f"<p>{r.ended_at - r.started_at:.1f} s from start to end; the shaded span is fault to recovery"
            f"{' (red: it never recovered)' if r.injected_at is not None and r.recovered_at is None else ''}.</p>"
            f"{link}</section>"
        )
    passed = all_passed(plan, results)
    meta = _definition_list([
        ("date", f"{run.started} to {run.ended}" if run else None),
        ("ha-ops", run.ha_ops_version if run else ha_ops.__version__),
        ("plan", f"{plan.name} ({run.plan_file})" if run else plan.name),
        ("cluster", run.cluster if run else None), ("target", run.target if run else None),
        ("inventory", run.inventory if run else None), ("spec", run.spec if run else None),
        ("scheduler", run.scheduler if run else None),
    ])  # fmt: skip
    verdict, colour = ("PASSED", VERDICT_COLOURS["passed"]) if passed else ("FAILED", FAILED)
    body = (
        f"<h1>Game day {html.escape(plan.name)}: <span style='color:{colour}'>{verdict}</span></h1>{meta}"
        "<p><a href='../index.html'>All runs</a></p>"
        "<table><tr><th>fault</th><th>verdict</th><th>time to detect</th><th>time to recover</th><th>jobs</th>"
        f"<th>why</th></tr>{''.join(rows)}</table>{''.join(sections)}"
    )
    return page(f"Game day {plan.name}: {verdict}", body)


def _journal_text(journal: dict[str, Any]) -> str:
    """The journal as Chaos Toolkit writes it, less the values of any secrets its experiment declared."""
    experiment = journal.get("experiment")
    if isinstance(experiment, dict) and isinstance(experiment.get("secrets"), dict):
        journal = {**journal, "experiment": {**experiment, "secrets": sorted(experiment["secrets"])}}
    return json.dumps(journal, indent=2, default=str)


def write_reports(
    plan: GameDayPlan, results: list[FaultResult], directory: Path, run: RunInfo | None = None
) -> list[Path]:
    """The run's reports and journals into `directory` (which write_run makes for each run)."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = [directory / REPORT, directory / JUNIT, directory / PAGE]
    paths[0].write_text(json.dumps(report_json(plan, results, run), indent=2))
    paths[1].write_text(report_junit(plan, results))
    paths[2].write_text(report_html(plan, results, run))
    for i, r in enumerate(results):
        if r.journal is not None:
            path = directory / journal_name(i, r.name)
            path.parent.mkdir(exist_ok=True)
            path.write_text(_journal_text(r.journal))
            paths.append(path)
    return paths


def run_folder_name(plan: GameDayPlan, run: RunInfo) -> str:
    return f"{run.started.replace('-', '').replace(':', '')}-{slug(plan.name)}"


def write_run(plan: GameDayPlan, results: list[FaultResult], root: Path, run: RunInfo) -> Path:
    """The run's own folder under `root`, written whole then renamed into place; `latest` pointed at it; the
    history page rewritten. The folder's path is returned."""
    from ha_ops.chaos import history

    root.mkdir(parents=True, exist_ok=True)
    name = run_folder_name(plan, run)
    folder, n = root / name, 1
    while folder.exists():  # two runs in one second
        n += 1
        folder = root / f"{name}-{n}"
    staging = root / f".{folder.name}.{os.getpid()}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        write_reports(plan, results, staging, run)
        staging.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    link = root / f".{LATEST}.{os.getpid()}"
    link.unlink(missing_ok=True)
    link.symlink_to(folder.name)
    link.replace(root / LATEST)
    history.write_history(root)
    return folder
