"""Game-day reports: JSON, JUnit XML (for CI), and one self-contained HTML page with a timeline per fault."""

from __future__ import annotations

import html
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

from ha_ops.chaos.gameday import FaultResult, seconds
from ha_ops.chaos.plan import GameDayPlan


def _jobs(r: FaultResult) -> str:
    if not r.jobs:
        return "-"
    j = r.jobs
    return (
        f"{len(j['completed_once'])}/{j['jobs']} completed once ({len(j['restarted'])} resumed after a requeue), "
        f"lost {len(j['lost'])}, ran twice {len(j['ran_twice'])}, unfinished {len(j['unfinished'])}, "
        f"resumed behind their last checkpoint {len(j.get('resumed_behind', []))}"
    )


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
        ).text = f"time to detect {seconds(r.time_to_detect)}; to recover {seconds(r.time_to_recover)}; jobs {_jobs(r)}"
    return ET.tostring(suite, encoding="unicode")


def report_html(plan: GameDayPlan, results: list[FaultResult]) -> str:
    """One self-contained page: a table and, per fault, an SVG timeline (no scripts, no external files)."""
    rows, charts = [], []
    for r in results:
        colour = {"passed": "#2e7d32", "failed": "#c62828", "aborted": "#ef6c00"}[r.verdict]
        rows.append(
            f"<tr><td>{html.escape(r.name)}</td><td style='color:{colour}'><b>{r.verdict}</b></td>"
            f"<td>{seconds(r.time_to_detect)}</td><td>{seconds(r.time_to_recover)}</td><td>{html.escape(_jobs(r))}</td>"
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
