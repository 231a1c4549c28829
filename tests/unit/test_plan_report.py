"""`ha-ops plan simulate --report DIR`: a self-contained, well-formed index.html with the SimResult's figures and
three inline SVG plots, every text escaped; a second report replaces the first, a user's folder is refused; no
matplotlib is one line naming the extra. Small scenarios and few replications: these run in about a second each."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

import ha_ops
from ha_ops.plan.failures import FLEETS, failure_mix
from ha_ops.plan.presets import PRESETS
from ha_ops.plan.report import INDEX, ReportDirError, write_report
from ha_ops.plan.simulate import Estimate, Scenario, SimResult, compare, simulate
from tests.pagecheck import CHROMIUM, screenshot
from tests.unit.cli_helpers import run_main
from tests.unit.test_plan_gameday import write_standard_report

SMALL = ("--gpus", "256", "--days", "3", "--replications", "8")
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


def small_run(preset: str, replications: int = 12) -> SimResult:
    mix = failure_mix(FLEETS["llama3"])
    scenario = Scenario(gpus=512, days=4, checkpoint_interval_s=1800, checkpoint_cost_s=30, restart_s=180, spares=2,
                        timing=PRESETS[preset].timing, mix=mix)  # fmt: skip
    return simulate(scenario, replications, np.random.default_rng(1))


@pytest.fixture(scope="module")
def two_runs() -> tuple[list[tuple[str, SimResult]], Estimate]:
    a, b = small_run("ha-ops"), small_run("nhc-5min")
    return [("ha-ops", a), ("nhc-5min", b)], compare(a, b)


class Strict(HTMLParser):
    """Checks that every element is closed, in order (void elements aside), and collects what the tests read."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.problems: list[str] = []
        self.cells: dict[tuple[str, str], str] = {}  # (scenario, data-field) -> text, from the results table
        self.svgs = 0
        self.texts: list[str] = []
        self._row: str | None = None
        self._field: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "svg":
            self.svgs += 1
        if tag == "tr":
            self._row = a.get("data-scenario")
        if tag == "td" and self._row is not None and a.get("data-field"):
            self._field = a["data-field"]
            self.cells[(self._row, self._field or "")] = ""
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "svg":
            self.svgs += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.problems.append(f"</{tag}> closes {self.stack[-1] if self.stack else 'nothing'}")
            return
        self.stack.pop()
        if tag == "td":
            self._field = None

    def handle_data(self, data: str) -> None:
        self.texts.append(data)
        if self._row is not None and self._field is not None:
            self.cells[(self._row, self._field)] += data


def parse(page: str) -> Strict:
    parser = Strict()
    parser.feed(page)
    parser.close()
    assert not parser.problems, parser.problems[:5]
    assert parser.stack == [], parser.stack
    return parser


def numbers(text: str) -> list[float]:
    return [float(x.replace(",", "")) for x in re.findall(r"[-+]?[\d,]*\.?\d+", text)]


def test_the_report_holds_the_results_and_three_inline_plots(
    tmp_path: Path, two_runs: tuple[list[tuple[str, SimResult]], Estimate]
) -> None:
    runs, diff = two_runs
    path = write_report(tmp_path / "new" / "report", runs, diff, {"seed": 1})
    assert path == tmp_path / "new" / "report" / INDEX and path.is_file()
    page = path.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    parsed = parse(page)
    assert parsed.svgs == 3 and page.count("<svg") == 3
    # Self-contained: nothing to fetch, nothing to run.
    for outside in ("<script", "<link", "<img", " src=", 'href="http', "@import", "url(http", "@font-face"):
        assert outside not in page, outside
    assert "<text" not in page  # the plots' glyphs are paths: no font to load
    ids = re.findall(r'\bid="([^"]+)"', page)
    assert len(ids) == len(set(ids))  # the three SVGs' ids do not clash
    refs = re.findall(r'url\(#([^)]+)\)|href="#([^"]+)"', page)
    assert refs and {a or b for a, b in refs} <= set(ids)  # and every reference finds its own
    for name, r in runs:
        cell = {field: numbers(parsed.cells[(name, field)]) for field in ("interruptions", "ettr", "goodput")}
        ci = {field: numbers(parsed.cells[(name, f"{field}_ci")]) for field in ("interruptions", "ettr", "goodput")}
        assert cell["interruptions"] == [round(r.interruptions.mean, 1)]
        assert ci["interruptions"] == [round(r.interruptions.low, 1), round(r.interruptions.high, 1)]
        for field, e in (("ettr", r.ettr), ("goodput", r.goodput)):
            assert cell[field] == [round(e.mean * 100, 2)]
            assert ci[field] == [round(e.low * 100, 2), round(e.high * 100, 2)]
    text = " ".join(parsed.texts)
    assert (
        f"{diff.mean * 100:+.2f} points" in text and f"95% CI {diff.low * 100:+.2f} to {diff.high * 100:+.2f}" in text
    )
    assert f"by ha-ops {ha_ops.__version__}" in text
    assert re.search(r"Generated \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", text)
    for source in ("NHC every 300 s", "BFD and ECMP reroute"):  # each kind's timing source, per scenario
        assert source in text
    for cause in runs[0][1].lost_gpu_hours_by_cause:
        assert cause in text
    for part in ("rework", "detection", "recovery", "spare wait", "restart", "checkpoint writes"):
        assert part in text


def test_every_text_is_escaped(tmp_path: Path, two_runs: tuple[list[tuple[str, SimResult]], Estimate]) -> None:
    (_, a), (_, b) = two_runs[0]
    evil = "<script>alert(1)</script>"
    runs = [("mine & <b>yours</b> $5 $6", a), ("--> nhc", b)]
    page = write_report(tmp_path, runs, None, {"note": evil, "<i>key</i>": ["a<b", "c"]}).read_text()
    parse(page)
    assert "<script" not in page and "<b>" not in page and "<i>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "mine &amp; &lt;b&gt;yours&lt;/b&gt; $5 $6" in page and "&lt;i&gt;key&lt;/i&gt;" in page
    assert 'data-field="difference"' not in page  # no difference given, none shown


def test_a_users_folder_is_refused_and_a_report_replaced(
    tmp_path: Path, two_runs: tuple[list[tuple[str, SimResult]], Estimate]
) -> None:
    runs, _ = two_runs
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    with pytest.raises(ReportDirError, match="not empty"):
        write_report(mine, runs, None, {})
    (mine / INDEX).write_text("<html>my own page</html>")
    with pytest.raises(ReportDirError):
        write_report(mine, runs, None, {})
    assert (mine / INDEX).read_text() == "<html>my own page</html>"
    empty = tmp_path / "empty"
    empty.mkdir()
    first = write_report(empty, runs, None, {"run": "run-number-one"}).read_text()
    second = write_report(empty, runs[:1], None, {"run": "run-number-two"}).read_text()
    assert "run-number-one" in first and "run-number-two" in second and "run-number-one" not in second
    assert sorted(p.name for p in empty.iterdir()) == [INDEX]


def test_the_cli_writes_and_replaces_a_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    folder = tmp_path / "made" / "report"
    assert run_main(monkeypatch, "plan", "simulate", *SMALL, "--seed", "1", "--report", str(folder)) == 0
    out = capsys.readouterr().out
    assert f"report: {folder / INDEX}" in out
    page = (folder / INDEX).read_text()
    assert parse(page).svgs == 3 and "--seed 1" in page and "preset llama3-16k" in page
    assert run_main(monkeypatch, "plan", "simulate", *SMALL, "--seed", "2", "--report", str(folder), "--json") == 0
    data = json.loads(capsys.readouterr().out)
    assert data["report"] == str(folder / INDEX)
    page = (folder / INDEX).read_text()
    assert "--seed 2" in page and "--seed 1" not in page


def test_the_cli_report_of_a_game_day_shows_the_difference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    gameday = write_standard_report(tmp_path)
    folder = tmp_path / "report"
    args = ("plan", "simulate", "--from-gameday", str(gameday), *SMALL, "--report", str(folder), "--json")
    assert run_main(monkeypatch, *args) == 0
    data = json.loads(capsys.readouterr().out)
    page = (folder / INDEX).read_text()
    parsed = parse(page)
    text = " ".join(parsed.texts)
    e = data["difference"]["goodput"]
    assert "Goodput of game day standard minus nhc-5min" in text and f"{e['mean'] * 100:+.2f} points" in text
    assert numbers(parsed.cells[("nhc-5min", "goodput")]) == [round(data["baseline"]["goodput"]["mean"] * 100, 2)]
    assert "not used" in text and "Slurm primary kill" in text


def test_the_cli_refuses_a_users_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("keep")
    assert run_main(monkeypatch, "plan", "simulate", *SMALL, "--report", str(mine)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --report: ") and str(mine) in err and err.count("\n") == 1, err
    assert sorted(p.name for p in mine.iterdir()) == ["thesis.tex"]


def test_without_matplotlib_one_line_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    assert run_main(monkeypatch, "plan", "simulate", *SMALL, "--report", str(tmp_path / "r")) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --report: ") and "pip install 'ha-ops[plan]'" in err and err.count("\n") == 1
    assert not (tmp_path / "r").exists()


def test_matplotlib_is_imported_only_to_draw() -> None:
    code = "import sys, ha_ops.cli.plan, ha_ops.plan.report; print('matplotlib' in sys.modules)"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert run.stdout.strip() == "False"


@pytest.mark.skipif(not CHROMIUM.exists(), reason=f"no {CHROMIUM}: the structural checks above stand in for a render")
def test_the_page_renders_in_headless_chromium(
    tmp_path: Path, two_runs: tuple[list[tuple[str, SimResult]], Estimate]
) -> None:
    runs, diff = two_runs
    path = write_report(tmp_path / "report", runs, diff, {})
    screenshot(path, tmp_path / "report.png", height=4000)
