"""The history page across game-day runs: every run folder's gameday.json under a report root (chaos/report.py),
oldest first, as plots of time to detect and time to recover per fault and of the pass rate, and a table of the
runs with links to their reports. Rewritten after every run (report.write_run), and by `ha-ops gameday history`."""

from __future__ import annotations

import html
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ha_ops.chaos import svg
from ha_ops.chaos.report import FAILED, PAGE, REPORT, VERDICT_COLOURS, page

log = logging.getLogger(__name__)
INDEX = "index.html"


@dataclass(frozen=True)
class Run:
    folder: str  # relative to the root
    report: dict[str, Any]

    @property
    def started(self) -> str:
        return str(self.report["run"]["started"])

    @property
    def faults(self) -> list[dict[str, Any]]:
        return list(self.report.get("faults") or [])

    @property
    def faults_passed(self) -> int:
        return passed_count(self.faults)

    @property
    def pass_rate(self) -> float:
        return self.faults_passed / len(self.faults) if self.faults else 0.0


def passed_count(faults: list[dict[str, Any]]) -> int:
    return sum(f.get("verdict") == "passed" for f in faults)


def load_runs(root: Path) -> list[Run]:
    """Every run under `root` with a report this version writes (one with its run's metadata), oldest first. A
    folder without one (another tool's, or a report cut short) is passed over and logged."""
    runs = []
    for path in sorted(root.glob(f"*/{REPORT}")):
        if path.parent.is_symlink():
            continue  # (`latest`)
        try:
            report = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            log.warning("game-day history: %s passed over: %s", path, exc)
            continue
        if isinstance(report, dict) and isinstance(report.get("run"), dict) and "started" in report["run"]:
            runs.append(Run(path.parent.name, report))
    return sorted(runs, key=lambda r: (r.started, r.folder))


def fault_names(runs: list[Run]) -> list[str]:
    """Every fault name, in the order first seen."""
    names: dict[str, None] = {}
    for run in runs:
        for fault in run.faults:
            names.setdefault(str(fault["name"]), None)
    return list(names)


def trend(runs: list[Run], measure: str) -> list[svg.Series]:
    """Per fault, `measure` (time_to_detect_s or time_to_recover_s) by run number (1 = the oldest), and a cross
    where that run's fault failed."""
    series = []
    for i, name in enumerate(fault_names(runs)):
        points, marks = [], []
        for n, run in enumerate(runs, start=1):
            for fault in run.faults:
                if fault["name"] != name:
                    continue
                if fault.get(measure) is not None:
                    points.append((float(n), float(fault[measure])))
                if fault.get("verdict") != "passed":
                    marks.append(float(n))
        series.append(svg.Series(name, svg.PALETTE[i % len(svg.PALETTE)], points, marks))
    return series


def history_html(runs: list[Run]) -> str:
    if not runs:
        return page("Game-day history", "<h1>Game-day history</h1><p>No runs yet.</p>")
    x_range = (1.0, float(len(runs)))
    rate = svg.Series("faults passed", "#2e7d32", [(float(n), r.pass_rate) for n, r in enumerate(runs, start=1)],
                      [float(n) for n, r in enumerate(runs, start=1) if not r.report.get("passed")])  # fmt: skip
    faults = [f for r in runs for f in r.faults]
    overall = passed_count(faults) / len(faults) if faults else 0.0
    per_fault = []
    for name in fault_names(runs):
        tries = [f for f in faults if f["name"] == name]
        passed = passed_count(tries)
        per_fault.append(f"<tr><td>{html.escape(name)}</td><td>{passed}/{len(tries)}</td></tr>")
    rows = []
    for n, r in reversed(list(enumerate(runs, start=1))):
        meta = r.report["run"]
        where = meta.get("target") or meta.get("inventory") or meta.get("cluster") or ""
        verdict = "passed" if r.report.get("passed") else "failed"
        passed = r.faults_passed
        rows.append(
            f"<tr><td>{n}</td><td>{html.escape(meta['started'])}</td><td>{html.escape(str(r.report.get('gameday')))}"
            f"</td><td>{html.escape(str(where))}</td><td>{html.escape(str(meta.get('ha_ops_version', '')))}</td>"
            f"<td style='color:{VERDICT_COLOURS[verdict]}'><b>{verdict}</b></td><td>{passed}/{len(r.faults)}</td>"
            f"<td><a href='{html.escape(r.folder)}/{PAGE}'>report</a></td></tr>"
        )
    body = (
        f"<h1>Game-day history: {len(runs)} run{'s' if len(runs) != 1 else ''}</h1>"
        f"<p>From {html.escape(runs[0].started)} to {html.escape(runs[-1].started)}; faults passed overall: "
        f"<b>{overall:.0%}</b> ({passed_count(faults)} of {len(faults)}). Runs are "
        f"numbered from the oldest; a <span style='color:{FAILED}'>✗</span> marks a failed run or fault.</p>"
        f"<h2>Pass rate per run</h2>{svg.line_chart([rate], x_range, 'run', y_percent=True)}"
        f"<h2>Time to detect (s) per fault</h2>{svg.line_chart(trend(runs, 'time_to_detect_s'), x_range, 'run')}"
        f"<h2>Time to recover (s) per fault</h2>{svg.line_chart(trend(runs, 'time_to_recover_s'), x_range, 'run')}"
        f"<h2>Faults passed, by fault</h2><table><tr><th>fault</th><th>passed</th></tr>{''.join(per_fault)}</table>"
        "<h2>Runs</h2><table><tr><th>run</th><th>started</th><th>plan</th><th>cluster</th><th>ha-ops</th>"
        f"<th>verdict</th><th>faults passed</th><th></th></tr>{''.join(rows)}</table>"
    )
    return page("Game-day history", body)


def write_history(root: Path, runs: list[Run] | None = None) -> Path:
    """The history page of every run under `root` (`runs`, when the caller has read them), replaced whole (a reader
    never sees half of it)."""
    path = root / INDEX
    staging = root / f".{INDEX}.partial"
    staging.write_text(history_html(load_runs(root) if runs is None else runs))
    staging.replace(path)
    return path
