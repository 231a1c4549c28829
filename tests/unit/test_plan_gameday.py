"""A game day's JSON report (ha_ops.chaos.report.report_json) read as the simulator's measured detection and
recovery times: each fault mapped to a kind of failure, the unmeasured kinds kept from the baseline preset, and a
malformed report named in one problem."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ha_ops.chaos.gameday import FaultResult
from ha_ops.chaos.plan import load_plan
from ha_ops.chaos.report import report_json
from ha_ops.errors import SpecError
from ha_ops.plan.gameday_input import kind_of, read_gameday, times_from_report
from ha_ops.plan.presets import PRESETS

REPO = Path(__file__).resolve().parents[2]
STANDARD = REPO / "chaos/gamedays/standard.yaml"
# (detect, recover) seconds after the fault went in, per fault of the standard game day: plausible, not measured.
TIMES = {
    "GPU XID 79": (0.6, 7.2),
    "node loss": (11.5, 19.0),
    "leaf-spine link down": (1.0, 1.4),
    "silent link drop": (3.0, 3.4),
    "Slurm primary kill": (6.0, 14.5),
    "Slurm primary freeze": (11.0, 21.0),
    "remediation controller leader kill": (4.2, 9.8),
    "storage chunkserver loss": (3.5, 12.0),
    "monitoring outage": (1.0, 46.0),
}


def standard_report(times: dict[str, tuple[float | None, float | None]] = TIMES) -> dict:
    """The standard game day's report as `ha-ops gameday run` writes it (gameday.json)."""
    plan = load_plan(STANDARD)
    results = []
    for i, fault in enumerate(plan.faults):
        detect, recover = times[fault.name]
        t0 = 1000.0 + 100 * i
        result = FaultResult(fault.name, "passed" if recover is not None else "failed", started_at=t0)
        result.injected_at, result.ended_at = t0 + 2, t0 + 60
        result.detected_at = None if detect is None else t0 + 2 + detect
        result.recovered_at = None if recover is None else t0 + 2 + recover
        result.experiment_status, result.deviated = "completed", False
        results.append(result)
    return json.loads(json.dumps(report_json(plan, results)))


def write_standard_report(folder: Path) -> Path:
    path = folder / "gameday.json"
    path.write_text(json.dumps(standard_report()))
    return path


def test_every_fault_of_the_shipped_game_days_maps_to_a_kind_or_to_the_control_plane() -> None:
    assert kind_of("GPU XID 79") == "gpu"
    assert kind_of("GPU XID 79 on gpu3") == "gpu"
    assert kind_of("node loss") == "host"
    assert kind_of("leaf-spine link down") == "network"
    assert kind_of("silent link drop") == "network"
    assert kind_of("two faults at once (the Slurm primary killed, an XID 79)") == "gpu"
    assert kind_of("remediation leader cut off, then an XID 79") == "gpu"
    for control_plane in ("Slurm primary kill", "storage chunkserver loss", "monitoring outage",
                          "remediation controller leader kill", "Slurm primary cut off but alive"):  # fmt: skip
        assert kind_of(control_plane) is None


def test_the_standard_game_days_times_become_the_simulators() -> None:
    baseline = PRESETS["nhc-5min"]
    times = times_from_report(standard_report(), baseline)
    assert times.gameday == "standard"
    assert set(times.measured_kinds) == {"gpu", "host", "network"}
    gpu = times.timing["gpu"]
    assert (gpu.detect_min_s, gpu.detect_max_s) == (pytest.approx(0.6), pytest.approx(0.6))
    assert gpu.recover_s == pytest.approx(6.6)  # time to recover counts from the fault: detection taken off
    network = times.timing["network"]  # two faults: their mean
    assert network.detect_min_s == pytest.approx(2.0) and network.recover_s == pytest.approx(0.4)
    assert "leaf-spine link down" in network.source and "silent link drop" in network.source
    assert times.timing["software"] == baseline.timing["software"]
    unused = {f.name: f.why for f in times.faults if not f.used}
    assert set(unused) == {"Slurm primary kill", "Slurm primary freeze", "remediation controller leader kill",
                           "storage chunkserver loss", "monitoring outage"}  # fmt: skip


def test_an_unmeasured_fault_is_left_out_and_its_kind_keeps_the_baseline() -> None:
    times = dict(TIMES, **{"node loss": (11.5, None)})
    measured = times_from_report(standard_report(times), PRESETS["nhc-5min"])
    assert "host" not in measured.measured_kinds
    assert measured.timing["host"] == PRESETS["nhc-5min"].timing["host"]
    assert [f.why for f in measured.faults if f.name == "node loss"] == ["not recovered: nothing measured"]


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ("{not json", "not valid JSON"),
        ("9" * 5000, "not valid JSON (Exceeds the limit"),  # past int's digit limit: a ValueError, once a traceback
        ("[" * 5000 + "]" * 5000, "not valid JSON (nested too deeply"),  # once a RecursionError
        ("[1, 2]", "the top level must be an object"),
        ('{"faults": []}', "not a game-day report: gameday: Field required (and 1 more)"),
        ('{"gameday": "g", "faults": [{"name": "GPU", "time_to_detect_s": "soon"}]}', "faults.0.time_to_detect_s"),
        ('{"gameday": "g", "faults": [{"name": "GPU", "time_to_detect_s": -1}]}', "faults.0.time_to_detect_s"),
        ('{"gameday": "g", "faults": [{"name": "GPU", "time_to_detect_s": Infinity}]}',
         "faults.0.time_to_detect_s: Input should be a finite number"),
        ('{"gameday": "g", "faults": [{"name": "GPU", "time_to_detect_s": 5, "time_to_recover_s": 2}]}',
         "faults.0.time_to_recover_s: 2 is before its detection (5)"),
    ],
)  # fmt: skip
def test_a_malformed_report_is_one_problem_naming_the_file(tmp_path: Path, content: str, words: str) -> None:
    path = tmp_path / "report.json"
    path.write_text(content)
    with pytest.raises(SpecError) as caught:
        read_gameday(path, PRESETS["nhc-5min"])
    assert caught.value.source == str(path)
    assert len(caught.value.problems) == 1 and words in caught.value.problems[0]


def test_a_missing_report_is_named(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="cannot read"):
        read_gameday(tmp_path / "none.json", PRESETS["nhc-5min"])
