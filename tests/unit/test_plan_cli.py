"""`ha-ops plan checkpoint|spares|simulate`: the issue's example in --json, the JSON shapes, the game-day
comparison, and bad input as one line naming the option or file, exit 2, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.cli_helpers import json_of, run_main
from tests.unit.test_plan_gameday import write_standard_report


def test_checkpoint_the_issues_example(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    data = json_of(monkeypatch, capsys, "plan", "checkpoint", "--mtbf", "3.1h", "--cost", "30s")
    assert round(data["young"]["interval_min"], 1) == 13.6
    assert round(data["daly"]["interval_min"], 1) == 13.3
    assert data["mtbf_s"] == 11160 and data["cost_s"] == 30 and data["mtbf_from"] == "given"
    assert 0.9 < data["daly"]["ettr"] < 1
    assert run_main(monkeypatch, "plan", "checkpoint", "--mtbf", "3.1h", "--cost", "30s") == 0
    text = capsys.readouterr().out
    assert "13.6 min" in text and "13.3 min" in text


def test_checkpoint_from_the_node_count(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    data = json_of(monkeypatch, capsys, "plan", "checkpoint", "--nodes", "2048", "--gpus-per-node", "8",
                   "--cost", "30s")  # fmt: skip
    assert data["mtbf_h"] == pytest.approx(3.09, abs=0.01)  # Llama 3's fleet: 54 days x 24 h / 419
    assert "fleet llama3" in data["mtbf_from"]
    rsc1 = json_of(monkeypatch, capsys, "plan", "checkpoint", "--nodes", "2048", "--fleet", "rsc1", "--cost", "30s")
    assert rsc1["mtbf_h"] == pytest.approx(1.8, rel=0.05)  # Kokolis et al.'s projection at 16,384 GPUs


def test_spares_against_the_rule(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    data = json_of(monkeypatch, capsys, "plan", "spares", "--nodes", "128", "--repair", "48h", "--target", "0.99")
    assert data["spares"] == 4 and data["probability"] >= 0.99
    assert data["rule"]["spares"] == [20, 26] and data["rule"]["extra_over_model"] == 16
    assert data["failures_per_1000_node_days"] == pytest.approx(3.79, abs=0.01)
    given = json_of(monkeypatch, capsys, "plan", "spares", "--nodes", "128", "--repair", "48h", "--rate", "65")
    assert given["spares"] > data["spares"] and given["rate_from"] == "--rate"
    assert run_main(monkeypatch, "plan", "spares", "--nodes", "128", "--repair", "48h") == 0
    assert "the 15-20% rule: 20-26 spares" in capsys.readouterr().out


def test_simulate_a_preset(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    data = json_of(monkeypatch, capsys, "plan", "simulate", "--preset", "llama3-16k", "--replications", "50")
    assert data["preset"] == "llama3-16k" and data["replications"] == 50 and data["seed"] == 0
    assert data["interruptions"]["mean"] == pytest.approx(419, rel=0.1)
    assert data["ettr"]["mean"] > 0.9 and data["ettr"]["low"] <= data["ettr"]["mean"] <= data["ettr"]["high"]
    assert data["scenario"]["gpus"] == 16384 and data["scenario"]["checkpoint_interval_from"] == "Daly 2006, eq. 37"
    assert data["scenario"]["spares"] == 64  # 1 node in 32
    assert "Faulty GPU" in data["lost_gpu_hours_by_cause"]
    small = json_of(monkeypatch, capsys, "plan", "simulate", "--preset", "k8s-default", "--gpus", "1024",
                    "--days", "10", "--replications", "20", "--checkpoint-interval", "30m", "--checkpoint-cost",
                    "1m", "--spares", "2", "--seed", "3")  # fmt: skip
    s = small["scenario"]
    assert (s["gpus"], s["days"], s["spares"], s["checkpoint_interval_s"], s["checkpoint_cost_s"]) == (
        1024, 10, 2, 1800, 60
    )  # fmt: skip
    assert s["timing"]["gpu"]["detect_min_s"] == 350
    assert run_main(monkeypatch, "plan", "simulate", "--gpus", "512", "--days", "5", "--replications", "10") == 0
    out = capsys.readouterr().out
    assert "ETTR" in out and "Faulty GPU" in out


def test_simulate_from_a_game_day_compares_with_nhc_polling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    report = write_standard_report(tmp_path)
    args = ("plan", "simulate", "--from-gameday", str(report), "--replications", "50")
    data = json_of(monkeypatch, capsys, *args)
    assert data["preset"] is None and data["gameday"]["name"] == "standard"
    assert data["baseline"]["preset"] == "nhc-5min"
    assert data["scenario"]["timing"]["gpu"]["recover_s"] == pytest.approx(6.6)
    assert data["baseline"]["scenario"]["timing"]["gpu"]["detect_max_s"] == 300
    assert data["interruptions"] == data["baseline"]["interruptions"]  # the same failures
    diff = data["difference"]["goodput"]
    assert 0 < diff["low"] <= diff["mean"] <= diff["high"]
    assert data["goodput"]["mean"] - data["baseline"]["goodput"]["mean"] == pytest.approx(diff["mean"], abs=2e-6)
    assert data["difference"]["gpu_hours"] > 0
    assert run_main(monkeypatch, *args) == 0
    out = capsys.readouterr().out
    assert "the same cluster under nhc-5min" in out and "not used: Slurm primary kill" in out


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["checkpoint", "--mtbf=-3h", "--cost", "30s"], "--mtbf"),
        (["checkpoint", "--mtbf", "3.1h", "--cost", "4h"], "--cost"),
        (["checkpoint", "--mtbf", "3.1h", "--cost", "soon"], "--cost"),
        (["checkpoint", "--cost", "30s"], "--mtbf"),
        (["checkpoint", "--nodes", "0", "--cost", "30s"], "--nodes"),
        (["checkpoint", "--nodes", "16", "--fleet", "mine", "--cost", "30s"], "--fleet"),
        (["spares", "--nodes", "128", "--repair", "48h", "--target", "1.5"], "--target"),
        (["spares", "--nodes", "128", "--repair", "-1h"], "--repair"),
        (["simulate", "--preset", "nope"], "--preset"),
        (["simulate", "--gpus", "0"], "--gpus"),
        (["simulate", "--checkpoint-cost", "5h"], "--checkpoint-cost"),
        (["simulate", "--replications", "0"], "--replications"),
    ],
)
def test_bad_input_is_one_line_naming_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, args: list[str], named: str
) -> None:
    assert run_main(monkeypatch, "plan", *args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {named}: ") and err.count("\n") == 1, err
    assert "Traceback" not in err


def test_a_malformed_game_day_report_is_one_line_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    report = tmp_path / "gameday.json"
    report.write_text(json.dumps({"gameday": "standard", "faults": [{"name": "GPU XID 79", "time_to_detect_s": "x"}]}))
    assert run_main(monkeypatch, "plan", "simulate", "--from-gameday", str(report)) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {report}: not a game-day report: faults.0.time_to_detect_s") and err.count("\n") == 1
    assert run_main(monkeypatch, "plan", "simulate", "--from-gameday", str(report), "--preset", "nhc-5min") == 2
    assert "--preset" in capsys.readouterr().err
