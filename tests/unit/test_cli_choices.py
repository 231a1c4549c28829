"""Options that take one of a fixed set of values are Enum-typed (issue 21): `--help` lists the choices, and any
other value is a usage error (exit 2, naming the option) before the command runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from ha_ops.cli.gameday import ScheduleKind
from ha_ops.cli.gpu import Backend, Fault
from ha_ops.gpu.fake import FAULTS, FakeGpus
from tests.unit.cli_helpers import run_main

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]


def test_the_fault_choices_are_the_fake_backend_s_faults() -> None:
    assert [f.value for f in Fault] == list(FAULTS)


@pytest.mark.parametrize(
    ("argv", "choices"),
    [
        (["health", "check"], "nvml|fake"),
        (["agent", "run"], "nvml|fake"),
        (["gpu", "reset"], "nvml|fake"),
        (["gpu", "driver-version"], "nvml|fake"),
        (["gpu", "fake-fault"], "|".join(FAULTS)),
        (["gameday", "schedule"], "systemd|cronjob"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else v,
)
def test_help_lists_the_choices(argv: list[str], choices: str) -> None:
    from ha_ops.cli.main import app

    result = runner.invoke(app, [*argv, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert choices in result.output


@pytest.mark.parametrize(
    "argv",  # each ends with the option and its bad value
    [
        ["health", "check", "--json", "--backend", "rocm"],
        ["gpu", "reset", "--all", "--backend", "rocm"],
        ["gpu", "fake-fault", "--fake-dir", ".", "--gpu", "0", "--fault", "melted"],
        ["gameday", "schedule", str(REPO / "chaos" / "gamedays" / "gpu.yaml"), "--every", "Mon 03:00", "--kind", "x"],
    ],
    ids=lambda argv: " ".join(argv[:2]),
)
def test_a_value_outside_the_choices_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    assert run_main(monkeypatch, *argv) == 2
    err = capsys.readouterr().err
    assert f"Invalid value for '{argv[-2]}'" in err, err  # the option is the one before the bad value


def test_the_choices_reach_the_commands_as_plain_values(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    FakeGpus.create(tmp_path, "gpu1", 2)
    assert run_main(monkeypatch, "health", "check", "--backend", "fake", "--fake-dir", str(tmp_path),
                    "--node", "gpu1", "--json") == 0  # fmt: skip
    assert run_main(monkeypatch, "gpu", "fake-fault", "--fake-dir", str(tmp_path), "--gpu", "1",
                    "--fault", Fault.OVERHEAT.value, "--celsius", "99") == 0  # fmt: skip
    assert FakeGpus(tmp_path).state(1)["temperature_gpu_c"] == 99
    assert run_main(monkeypatch, "gpu", "reset", "--backend", Backend.FAKE.value, "--fake-dir", str(tmp_path),
                    "--gpu", "0", "--dry-run") == 0  # fmt: skip
    out = tmp_path / "units"
    plan = REPO / "chaos" / "gamedays" / "gpu.yaml"
    assert run_main(monkeypatch, "gameday", "schedule", str(plan), "--every", "Mon 03:00", "--target", "lab",
                    "--kind", ScheduleKind.SYSTEMD.value, "--out", str(out)) == 0  # fmt: skip
    assert sorted(p.suffix for p in out.iterdir()) == [".service", ".timer"]
