"""`ha-ops gpu driver-version` and the fake backend's `load-driver`: what a driver rollout reads and what the lab's
fake driver packages do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ha_ops.gpu.fake import FakeGpus
from tests.unit.cli_helpers import run_main


@pytest.fixture
def gpus(tmp_path: Path) -> FakeGpus:
    return FakeGpus.create(tmp_path / "gpus", "gpu1", 4)


def versions(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], gpus: FakeGpus) -> list[str]:
    capsys.readouterr()
    assert run_main(monkeypatch, "gpu", "driver-version", "--backend", "fake", "--fake-dir", str(gpus.directory)) == 0
    return capsys.readouterr().out.split()


def test_driver_version_prints_one_line_per_gpu(monkeypatch, capsys, gpus: FakeGpus) -> None:
    assert versions(monkeypatch, capsys, gpus) == ["550.90.07"] * 4


def test_a_loaded_driver_is_reported_and_survives_a_reset(monkeypatch, capsys, gpus: FakeGpus) -> None:
    assert run_main(monkeypatch, "gpu", "load-driver", "--fake-dir", str(gpus.directory), "--version", "570.86.15") == 0
    assert versions(monkeypatch, capsys, gpus) == ["570.86.15"] * 4
    gpus.fall_off_bus(2)
    gpus.reset()
    assert versions(monkeypatch, capsys, gpus) == ["570.86.15"] * 4
    assert not gpus.state(2).get("lost")


def test_a_package_that_does_not_work_loses_every_gpu(monkeypatch, capsys, gpus: FakeGpus, tmp_path: Path) -> None:
    package = tmp_path / "575.51.02"
    package.mkdir()
    (package / "driver.json").write_text(json.dumps({"version": "575.51.02", "works": False}))
    assert (
        run_main(monkeypatch, "gpu", "load-driver", "--fake-dir", str(gpus.directory), "--package", str(package)) == 0
    )
    assert all(gpus.state(i)["lost"] for i in range(4))
    capsys.readouterr()
    assert run_main(monkeypatch, "gpu", "driver-version", "--backend", "fake", "--fake-dir", str(gpus.directory)) == 1
    assert "GPU 0: GPU is lost" in capsys.readouterr().err
    check = ["health", "check", "--backend", "fake", "--fake-dir", str(gpus.directory), "--node", "gpu1"]
    assert run_main(monkeypatch, *check) == 1  # unhealthy: what the rollout's validation sees
    # Loading the previous, working driver again (what a rollback's activation does) heals the GPUs.
    assert run_main(monkeypatch, "gpu", "load-driver", "--fake-dir", str(gpus.directory), "--version", "570.86.15") == 0
    assert not any(gpus.state(i).get("lost") for i in range(4))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--version", "570.86.15"], "has no fake GPUs"),
        (["--package", "/nonexistent"], "--package: cannot read"),
        ([], "give --version or --package"),
    ],
)
def test_load_driver_refuses_bad_input(monkeypatch, capsys, tmp_path: Path, args: list[str], message: str) -> None:
    (tmp_path / "empty").mkdir()
    assert run_main(monkeypatch, "gpu", "load-driver", "--fake-dir", str(tmp_path / "empty"), *args) == 2
    assert message in capsys.readouterr().err


def test_driver_version_refuses_an_unknown_backend(monkeypatch, capsys) -> None:
    assert run_main(monkeypatch, "gpu", "driver-version", "--backend", "rocm") == 2
    assert "--backend" in capsys.readouterr().err
