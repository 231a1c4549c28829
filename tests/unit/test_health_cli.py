"""`ha-ops health check` through the console script's entry point: exit codes and --json."""

from __future__ import annotations

import ctypes.util
import json
from pathlib import Path

import pytest

from ha_ops.gpu.fake import FakeGpus, healthy_state
from tests.unit.cli_helpers import run_main

NODE = "gpu2"


@pytest.fixture
def gpus(tmp_path: Path) -> FakeGpus:
    return FakeGpus.create(tmp_path / "gpus", NODE, 4)


def check(monkeypatch: pytest.MonkeyPatch, gpus: FakeGpus, *extra: str) -> int:
    return run_main(
        monkeypatch, "health", "check", "--backend", "fake", "--fake-dir", str(gpus.directory), "--node", NODE, *extra
    )


def test_healthy_is_0(monkeypatch: pytest.MonkeyPatch, gpus: FakeGpus, capsys: pytest.CaptureFixture[str]) -> None:
    assert check(monkeypatch, gpus) == 0
    assert "healthy" in capsys.readouterr().out


def test_healthy_json(monkeypatch: pytest.MonkeyPatch, gpus: FakeGpus, capsys: pytest.CaptureFixture[str]) -> None:
    assert check(monkeypatch, gpus, "--json") == 0
    data = json.loads(capsys.readouterr().out)
    assert data["node"] == NODE
    assert data["state"] == "healthy"
    assert data["action"] == "none"
    assert data["findings"] == []
    assert data["unknown"] == []
    assert [g["uuid"] for g in data["gpus"]] == [healthy_state(NODE, i)["uuid"] for i in range(4)]


def test_degraded_is_0(monkeypatch: pytest.MonkeyPatch, gpus: FakeGpus, capsys: pytest.CaptureFixture[str]) -> None:
    gpus.update(1, pcie_width_current=8)
    assert check(monkeypatch, gpus, "--json") == 0
    assert json.loads(capsys.readouterr().out)["state"] == "degraded"


def test_overheat_is_1_naming_the_check(
    monkeypatch: pytest.MonkeyPatch, gpus: FakeGpus, capsys: pytest.CaptureFixture[str]
) -> None:
    gpus.overheat(3, 96.0)
    assert check(monkeypatch, gpus, "--json") == 1
    data = json.loads(capsys.readouterr().out)
    assert data["state"] == "unhealthy"
    assert data["action"] == "drain"
    assert data["findings"][0]["check"] == "temperature"
    assert data["findings"][0]["gpu"] == 3
    assert data["findings"][0]["severity"] == "critical"
    assert data["reason"].startswith("GPU3 temperature")


def test_overheat_table_output(
    monkeypatch: pytest.MonkeyPatch, gpus: FakeGpus, capsys: pytest.CaptureFixture[str]
) -> None:
    gpus.overheat(3, 96.0)
    assert check(monkeypatch, gpus) == 1
    out = capsys.readouterr().out
    assert "unhealthy" in out
    assert "temperature" in out


def test_corrupt_gpu_file_is_3(
    monkeypatch: pytest.MonkeyPatch, gpus: FakeGpus, capsys: pytest.CaptureFixture[str]
) -> None:
    (gpus.directory / "gpu1.json").write_text("{ this is not json")
    assert check(monkeypatch, gpus, "--json") == 3
    data = json.loads(capsys.readouterr().out)
    assert data["state"] == "unknown"
    assert "GPU1 temperature_gpu_c" in data["unknown"]
    assert "gpu1.json" in data["gpus"][1]["temperature_gpu_c"]["unreadable"]


def test_corrupt_gpu_file_without_json_says_what_could_not_be_read(
    monkeypatch: pytest.MonkeyPatch, gpus: FakeGpus, capsys: pytest.CaptureFixture[str]
) -> None:
    (gpus.directory / "gpu1.json").write_text("")
    assert check(monkeypatch, gpus) == 3
    assert "GPU1 temperature_gpu_c" in capsys.readouterr().err


def test_unhealthy_beats_unknown(monkeypatch: pytest.MonkeyPatch, gpus: FakeGpus) -> None:
    (gpus.directory / "gpu1.json").write_text("{")
    gpus.fall_off_bus(0)  # lost: a finding from the readings alone, no event needed
    assert check(monkeypatch, gpus) == 1


def test_no_fake_gpus_is_3(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = run_main(monkeypatch, "health", "check", "--backend", "fake", "--fake-dir", str(tmp_path / "none"), "--json")
    assert code == 3
    data = json.loads(capsys.readouterr().out)
    assert data["state"] == "unknown"
    assert "no fake GPUs" in data["reason"]


def test_config_file(
    monkeypatch: pytest.MonkeyPatch, gpus: FakeGpus, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "agent.yaml"
    config.write_text(
        f"node: {NODE}\nbackend: fake\nfake_dir: {gpus.directory}\nthresholds:\n  temperature_slowdown_c: 30\n"
    )
    gpus.update(0, temperature_slowdown_c="not_supported")  # the config default applies: 34 C >= 30 C
    assert run_main(monkeypatch, "health", "check", "--config", str(config), "--json") == 0
    data = json.loads(capsys.readouterr().out)
    assert data["state"] == "degraded"
    assert data["findings"][0]["check"] == "temperature"


def test_invalid_config_file_is_2(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    config = tmp_path / "agent.yaml"
    config.write_text("node: n1\nthresholds:\n  app_xid_repeats: 1\n")
    assert run_main(monkeypatch, "health", "check", "--config", str(config)) == 2


@pytest.mark.skipif(
    ctypes.util.find_library("nvidia-ml") is not None, reason="libnvidia-ml is installed: this machine may have GPUs"
)
def test_nvml_without_a_gpu_is_3(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_main(monkeypatch, "health", "check", "--backend", "nvml", "--node", NODE, "--json") == 3
    data = json.loads(capsys.readouterr().out)
    assert data["state"] == "unknown"
    assert data["node"] == NODE
