"""`ha-ops agent check-config` (the Ansible role's `validate:` for agent.yaml) and `ha-ops gpu fake-init`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ha_ops.gpu.fake import FakeGpus, healthy_state
from tests.unit.cli_helpers import run_main

GOOD = """\
node: gpu1
backend: fake
fake_dir: /var/lib/ha-ops/fake-gpus
sweep_interval_s: 5.0
metrics: {address: 0.0.0.0, port: 9426}
slurm: {enabled: false, auto_resume: true, resume_after_healthy_sweeps: 3}
controller: {urls: []}
state_file: /var/lib/ha-ops/agent-state.json
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "agent.yaml"
    path.write_text(text)
    return path


def test_check_config_accepts_a_good_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, GOOD)
    assert run_main(monkeypatch, "agent", "check-config", str(path)) == 0
    out = capsys.readouterr().out
    assert "ok" in out and "gpu1" in out and "9426" in out


@pytest.mark.parametrize(
    "change,field",
    [
        (("sweep_interval_s: 5.0", "sweep_interval_s: 0"), "sweep_interval_s"),
        (("port: 9426", "port: 70000"), "metrics.port"),
        (("backend: fake", "backend: rocm"), "backend"),
        (("resume_after_healthy_sweeps: 3", "resume_after_healthy_sweeps: 0"), "slurm.resume_after_healthy_sweeps"),
        (("node: gpu1\n", "nodes: gpu1\n"), "nodes"),  # unknown key (and node missing)
        (("urls: []", "urls: http://c1/v1/reports"), "controller.urls"),
        (("node: gpu1\n", "node: ''\n"), "node"),  # passed once, and then every sweep failed
        (("node: gpu1\n", "node: 'gpu1;reboot'\n"), "node"),
        (("sweep_interval_s: 5.0", "thresholds: {temperature_shutdown_c: .nan}"), "thresholds.temperature_shutdown_c"),
    ],
)
def test_check_config_names_the_bad_field(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    change: tuple[str, str],
    field: str,
) -> None:
    path = write(tmp_path, GOOD.replace(*change))
    assert run_main(monkeypatch, "agent", "check-config", str(path)) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}: ")  # naming the file, then the field (one line when one problem)
    assert f"{field}:" in err


def test_check_config_wants_a_fake_dir_for_the_fake_backend(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, GOOD.replace("fake_dir: /var/lib/ha-ops/fake-gpus\n", ""))
    assert run_main(monkeypatch, "agent", "check-config", str(path)) == 2
    assert "fake_dir: required when backend is fake" in capsys.readouterr().err


@pytest.mark.parametrize("text,problem", [("node: [unclosed", "not valid YAML"), ("- a list\n", "mapping")])
def test_check_config_refuses_what_is_not_a_mapping(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, problem: str
) -> None:
    assert run_main(monkeypatch, "agent", "check-config", str(write(tmp_path, text))) == 2
    assert problem in capsys.readouterr().err


def test_check_config_of_a_missing_file_is_2(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_main(monkeypatch, "agent", "check-config", str(tmp_path / "absent.yaml")) == 2
    assert "cannot read" in capsys.readouterr().err


def test_fake_init_creates_healthy_gpus(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "gpus"
    assert run_main(monkeypatch, "gpu", "fake-init", "--dir", str(directory), "--count", "3", "--node", "n1") == 0
    assert "created 3" in capsys.readouterr().out
    fake = FakeGpus(directory)
    assert fake.count() == 3
    assert fake.state(2)["uuid"] == healthy_state("n1", 2)["uuid"]
    # The agent's health check reads them as a healthy node.
    code = run_main(monkeypatch, "health", "check", "--backend", "fake", "--fake-dir", str(directory), "--json")
    assert code == 0
    assert json.loads(capsys.readouterr().out)["state"] == "healthy"


def test_fake_init_leaves_existing_gpus_and_their_faults(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeGpus.create(tmp_path / "gpus", "n1", 2)
    fake.overheat(1)
    assert run_main(monkeypatch, "gpu", "fake-init", "--dir", str(fake.directory), "--count", "8") == 0
    assert "already has 2" in capsys.readouterr().out
    assert fake.count() == 2
    assert fake.state(1)["temperature_gpu_c"] == 92.0


def test_fake_init_refuses_a_zero_count(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert run_main(monkeypatch, "gpu", "fake-init", "--dir", str(tmp_path / "g"), "--count", "0") == 2
    assert not (tmp_path / "g").exists()


@pytest.mark.parametrize("command", ["check-config", "run"])
def test_reporting_without_tls_is_refused_unless_the_config_says_insecure(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    # Secure by default (issue 44, finding 4): over plain HTTP a controller cannot tell an agent's reports from
    # anyone's.
    plain = GOOD.replace("urls: []", "urls: [http://10.0.0.1:8800/v1/reports]")
    path = write(tmp_path, plain)
    assert run_main(monkeypatch, "agent", command, *(["--config"] if command == "run" else []), str(path)) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}: controller.tls: required") and "insecure: true" in err
    if command == "check-config":
        path = write(tmp_path, plain.replace("controller: {", "controller: {insecure: true, "))
        assert run_main(monkeypatch, "agent", command, str(path)) == 0
