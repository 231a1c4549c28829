"""The game-day report v2 (chaos/report.py, chaos/history.py): each run in its own folder with its journals and
metadata, `latest`, the history page across runs; and both pages rendered in headless Chromium, where no two text
labels of a plot may overlap and none may be clipped by its plot. Screenshots go to $HA_OPS_ARTIFACTS/gameday-report
when it is set (CI keeps them), else to the test's own folder."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ha_ops.chaos import history, svg
from ha_ops.chaos.gameday import FaultResult
from ha_ops.chaos.plan import GameDayPlan, load_plan
from ha_ops.chaos.report import LATEST, RunInfo, iso, report_json, write_run
from tests.pagecheck import CHROMIUM, assert_text_apart, screenshot
from tests.unit.cli_helpers import json_of, run_main

PLAN = Path(__file__).resolve().parents[2] / "chaos" / "gamedays" / "standard.yaml"
START = 1_796_000_000.0  # 2026-11-30T00:53:20Z


def crowded(t0: float, fault: str, verdict: str = "passed") -> FaultResult:
    """A fault whose events crowd into its first seconds of a long run: the case that overlapped in v1."""
    r = FaultResult(fault, verdict, "", t0, t0 + 2.1, t0 + 2.3, t0 + 2.6, t0 + 190.0, "completed", False)
    r.timeline = [(t0, "started"), (t0 + 0.4, "steady"), (t0 + 1.9, "12 jobs running"), (t0 + 2.1, "fault injected"),
                  (t0 + 2.3, "detected"), (t0 + 2.6, "recovered"), (t0 + 2.8, "fault rolled back"),
                  (t0 + 189.7, "jobs accounted"), (t0 + 190.0, "ended")]  # fmt: skip
    r.journal = {"status": "completed", "deviated": False, "experiment": {"title": fault, "secrets": {"bmc": {}}}}
    if verdict == "failed":
        r.recovered_at, r.why = None, "not recovered within 120 s"
        r.timeline = [e for e in r.timeline if e[1] != "recovered"]
    if verdict == "aborted":
        r.why = "abort condition slurm_controller_responds() == False holds"
    return r


def run_results(plan: GameDayPlan, n: int) -> list[FaultResult]:
    t0 = START + n * 86400
    verdicts = ["passed", "failed" if n % 2 else "passed", "passed", "aborted" if n == 2 else "passed"]
    return [crowded(t0 + i * 200, f.name, verdicts[i % len(verdicts)]) for i, f in enumerate(plan.faults)]


def info(plan: GameDayPlan, n: int) -> RunInfo:
    t0 = START + n * 86400
    return RunInfo(iso(t0), iso(t0 + 900), "0.1.0", plan.name, str(PLAN), "lab", "lab:lab", None, None, "slurm")


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three runs of the standard plan written as `gameday run` writes them."""
    root = tmp_path_factory.mktemp("reports")
    plan = load_plan(PLAN)
    for n in range(3):
        write_run(plan, run_results(plan, n), root, info(plan, n))
    return root


def test_each_run_has_its_own_folder_with_reports_journals_and_metadata(reports: Path) -> None:
    folders = sorted(p.name for p in reports.iterdir() if p.is_dir() and not p.is_symlink())
    assert folders == ["20261130T005320Z-standard", "20261201T005320Z-standard", "20261202T005320Z-standard"]
    assert os.readlink(reports / LATEST) == folders[-1]
    assert not list(reports.glob(".*"))  # nothing staged left behind
    latest = reports / LATEST
    report = json.loads((latest / "gameday.json").read_text())
    assert report["run"] == {"started": "2026-12-02T00:53:20Z", "ended": "2026-12-02T01:08:20Z",
                             "ha_ops_version": "0.1.0", "plan": "standard", "plan_file": str(PLAN), "cluster": "lab",
                             "target": "lab:lab", "inventory": None, "spec": None, "scheduler": "slurm"}  # fmt: skip
    first = report["faults"][0]
    planned = load_plan(PLAN).faults[0]
    assert first["experiment"] == planned.experiment.name and first["target"] == planned.vars
    assert first["conditions"]["detect"] == [c.describe() for c in planned.detect]
    assert first["journal"] == "journals/01-gpu-xid-79.json"
    journal = json.loads((latest / first["journal"]).read_text())
    assert journal["status"] == "completed" and journal["experiment"]["secrets"] == ["bmc"]  # names, no values
    page = (latest / "gameday.html").read_text()
    assert "2026-12-02T00:53:20Z" in page and "0.1.0" in page and "lab:lab" in page and "<script" not in page
    assert page.count("class='timeline'") == len(report["faults"])


def test_two_runs_in_one_second_keep_both(tmp_path: Path) -> None:
    plan = load_plan(PLAN)
    first = write_run(plan, run_results(plan, 0), tmp_path, info(plan, 0))
    second = write_run(plan, run_results(plan, 0), tmp_path, info(plan, 0))
    assert second.name == f"{first.name}-2" and (first / "gameday.json").exists()
    assert len(history.load_runs(tmp_path)) == 2


def test_a_failed_fault_is_marked_on_its_timeline(reports: Path) -> None:
    page = (reports / "20261201T005320Z-standard" / "gameday.html").read_text()
    assert "✗ not recovered" in page and "not recovered within 120 s" in page
    assert "✗ aborted" in (reports / "20261202T005320Z-standard" / "gameday.html").read_text()


def test_the_history_page_plots_the_trends_and_the_pass_rate(reports: Path) -> None:
    runs = history.load_runs(reports)
    assert [r.folder for r in runs] == sorted(r.folder for r in runs) and len(runs) == 3
    page = (reports / "index.html").read_text()
    assert page.count("class='chart'") == 3 and "Game-day history: 3 runs" in page
    ttd = {s.name: s for s in history.trend(runs, "time_to_detect_s")}
    assert set(ttd) == {f.name for f in load_plan(PLAN).faults}
    assert all(y == pytest.approx(0.2) for s in ttd.values() for _, y in s.points)
    ttr = {s.name: s for s in history.trend(runs, "time_to_recover_s")}
    second = load_plan(PLAN).faults[1].name
    assert ttr[second].marks == [2.0] and [x for x, _ in ttr[second].points] == [1.0, 3.0]  # run 2 failed it
    for run in runs:
        assert f"{run.folder}/gameday.html" in page


def test_the_history_skips_folders_that_are_not_runs(tmp_path: Path) -> None:
    (tmp_path / "notes").mkdir()
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "gameday.json").write_text("{")
    (tmp_path / "v1").mkdir()
    (tmp_path / "v1" / "gameday.json").write_text(json.dumps({"gameday": "x", "passed": True, "faults": []}))
    assert history.load_runs(tmp_path) == []
    assert "No runs yet" in history.history_html([])


def test_gameday_history_rewrites_the_page_and_lists_the_runs(
    reports: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    (reports / "index.html").unlink()
    listed = json_of(monkeypatch, capsys, "gameday", "history", str(reports))
    assert [r["passed"] for r in listed["runs"]] == [True, False, False] and (reports / "index.html").exists()
    assert run_main(monkeypatch, "gameday", "history", str(tmp_path / "none")) == 2
    assert "no such folder" in capsys.readouterr().err


def test_labels_are_placed_without_overlap_in_the_layout() -> None:
    points = [(100.0 + i * 0.5, f"event number {i}", "#000") for i in range(12)] + [(955.0, "ended", "#000")]
    labels = svg.place_labels(points, 12, 948)
    for a in labels:
        assert a.left >= 12 and a.left + a.width <= 948
        for b in labels:
            if a is not b and a.row == b.row:
                assert a.left + a.width + svg.GAP_PX <= b.left or b.left + b.width + svg.GAP_PX <= a.left
    assert max(label.row for label in labels) >= 3  # crowded points took several rows


def test_ticks_are_round_numbers() -> None:
    assert svg.ticks(0, 190, 8) == [0, 50, 100, 150]
    assert svg.ticks(0, 3.2, 6) == [0, 1, 2, 3]
    assert svg.ticks(1, 3, 10) == [1, 1.2, 1.4, 1.6, 1.8, 2, 2.2, 2.4, 2.6, 2.8, 3]
    assert svg.ticks(1, 3, 10, whole=True) == [1, 2, 3]  # (runs)


@pytest.mark.skipif(not CHROMIUM.exists(), reason=f"no {CHROMIUM} (make setup installs it)")
@pytest.mark.parametrize("page", ["latest/gameday.html", "index.html"])
def test_the_pages_render_in_headless_chromium_with_no_label_overlapping_another(
    reports: Path, tmp_path: Path, page: str
) -> None:
    svgs = assert_text_apart(reports / page)
    assert len(svgs) == (len(load_plan(PLAN).faults) if page == "latest/gameday.html" else 3)
    assert all(s["texts"] for s in svgs)
    shots = Path(os.environ.get("HA_OPS_ARTIFACTS") or tmp_path) / "gameday-report"
    screenshot(reports / page, shots / f"{page.split('/')[-1].removesuffix('.html')}.png")


def test_the_report_json_carries_the_run(reports: Path) -> None:
    plan = load_plan(PLAN)
    assert "run" not in report_json(plan, run_results(plan, 0))  # (a caller without one: the older shape)
