"""`ha-ops rollout`: the plan (table, --json), bad flags (exit 2 naming the flag), and the run commands against the
fake fleet of test_rollout_executor (the real adapters are replaced through `make_adapters`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ha_ops.cli.main import app
from ha_ops.rollout.protocols import DriverApplier, Scheduler, Validator
from ha_ops.rollout.state import Phase, RolloutState, RolloutStore
from tests.unit.cli_helpers import run_main
from tests.unit.test_rollout_executor import OLD, TARGET, Fleet

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
LAB = EXAMPLES / "lab.yaml"  # GPU nodes gpu1-gpu4 over rack1/rack2; gpu4 is the spare
PRODUCTION = EXAMPLES / "production.yaml"  # 64 GPU nodes over 4 racks

runner = CliRunner()


def plan_args(*extra: str, spec: Path = PRODUCTION) -> list[str]:
    return ["rollout", "plan", "driver", "--to", TARGET, "--spec", str(spec), *extra]


# --- plan ---------------------------------------------------------------------------------------------------------
def test_plan_table() -> None:
    result = runner.invoke(app, plan_args("--canary", "2", "--max-unavailable", "10%", "--down", "gpu3"),
                           catch_exceptions=False)  # fmt: skip
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert f"driver {TARGET}: 63 of 64 nodes in 5 waves; max_unavailable 6 with 1 down -> batches of up to 5" in out
    for wave in ("canary", "wave 1", "wave 2", "wave 3", "wave 4"):
        assert wave in out
    assert "skipped (down (counts against max_unavailable)): gpu3" in out


def test_plan_json(tmp_path: Path) -> None:
    node_data = tmp_path / "nodes.yaml"
    node_data.write_text(f"nodes:\n  gpu1: {{driver_version: '{TARGET}'}}\n  gpu2: {{running_jobs: 4}}\n")
    result = runner.invoke(
        app,
        plan_args("--json", "--waves", "10%,rest", "--skip", "gpu9", "--node-data", str(node_data),
                  "--from-version", OLD, "--soak", "60", "--drain", "requeue"),
        catch_exceptions=False,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["target_version"] == TARGET and data["fleet"] == 64 and data["planned"] == 62
    assert data["skipped"] == {"gpu1": f"already on {TARGET}", "gpu9": "in the skip list"}
    assert [w["size"] for w in data["waves"]] == ["1", "10%", "rest"]
    assert data["policy"]["soak_s"] == 60 and data["policy"]["drain"]["mode"] == "requeue"
    assert data["waves"][-1]["nodes"][-1] == "gpu2"  # the busiest node goes last
    assert data["waves"][0]["nodes"][0] == "gpu56"  # a spare first


def test_plan_from_a_policy_file_with_a_flag_overriding(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("canary: 4\nwaves: ['50%', rest]\nmax_unavailable: 3\n")
    result = runner.invoke(app, plan_args("--json", "--policy", str(policy), "--max-unavailable", "2"),
                           catch_exceptions=False)  # fmt: skip
    data = json.loads(result.stdout)
    assert len(data["waves"][0]["nodes"]) == 4 and data["max_unavailable"] == 2


def test_plan_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HA_OPS_ROLLOUT_DIR", str(tmp_path / "rollout"))
    assert runner.invoke(app, plan_args(), catch_exceptions=False).exit_code == 0
    assert not (tmp_path / "rollout").exists()


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--max-unavailable", "0"], "--max-unavailable: '0' must be at least 1"),
        (["--waves", "1,7x,rest"], "--waves (waves[1]): '7x' is not a count (5), a percentage (5%) or 'rest'"),
        (["--waves", "rest,1"], "--waves: 'rest' must be the last wave; it is wave 1 of 2"),
        (["--canary", "gpu99"], "--canary: 'gpu99' is not a node of the cluster"),
        (["--canary", "0"], "--canary: '0' must be at least 1"),
        (["--skip", "nope"], "--skip: 'nope' is not a node of the cluster"),
        (["--drain", "later"], "--drain: Input should be 'wait' or 'requeue'"),
        (["--drain-timeout", "0"], "--drain-timeout: Input should be greater than 0"),
        (["--wave-max-failure-fraction", "1.5"], "--wave-max-failure-fraction: Input should be less than or equal"),
        (["--down", "gpu99"], "--down: 'gpu99' is not a GPU node of"),
        (["--max-unavailable", "2", "--down", "gpu1,gpu2"], "--max-unavailable: 2 node(s) are already down"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], flags: list[str], expected: str
) -> None:
    assert run_main(monkeypatch, *plan_args(*flags)) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("error: rollout flags: ")
    assert expected in " ".join(err.split()), err


def test_a_bad_version_or_a_bad_number_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["rollout", "plan", "driver", "--to", "latest", "--spec", str(PRODUCTION)]
    assert run_main(monkeypatch, *args) == 2
    assert "--to: 'latest' is not a driver version" in capsys.readouterr().err
    assert run_main(monkeypatch, *plan_args("--soak", "soon")) == 2
    assert "--soak" in capsys.readouterr().err


# --- running ------------------------------------------------------------------------------------------------------
@pytest.fixture
def fleet(monkeypatch: pytest.MonkeyPatch) -> Fleet:
    fake = Fleet(["gpu1", "gpu2", "gpu3", "gpu4"])

    def adapters(state: RolloutState, state_dir: Path) -> tuple[Scheduler, DriverApplier, Validator]:
        assert state.inputs.inventory is not None and state.inputs.inventory.name == "inventory.yml"
        return fake, fake, fake

    monkeypatch.setattr("ha_ops.rollout.run.make_adapters", adapters)
    return fake


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    path = tmp_path / "inventory.yml"
    path.write_text("all: {}\n")
    return path


def driver_args(state_dir: Path, inventory: Path, *extra: str, coordinated: bool = False) -> list[str]:
    """(The fakes stand for Slurm and the role; the remediation controllers are left out unless `coordinated`.)"""
    alone = [] if coordinated else ["--no-controller"]
    return ["rollout", "driver", "--to", TARGET, "--spec", str(LAB), "--inventory", str(inventory),
            "--state-dir", str(state_dir), "--soak", "0", *alone, *extra]  # fmt: skip


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ([], "--controller-cert: the controllers serve https: give an operator certificate, key and CA"),
        (["--controller", "ftp://ctl1"], "--controller: 'ftp://ctl1' is not an http:// or https:// URL"),
        (["--controller", "http://ctl1:8800", "--controller-cert", "c.pem"], "--controller-key, --controller-ca: "),
    ],
)
def test_controller_flags_are_checked_before_anything_runs(
    tmp_path: Path, inventory: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    extra: list[str], named: str,
) -> None:  # fmt: skip
    # The lab spec's controllers serve https (remediation.tls): without an operator certificate, refused up front.
    assert run_main(monkeypatch, *driver_args(tmp_path / "r", inventory, *extra, coordinated=True)) == 2
    assert named in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_the_default_controllers_come_from_the_spec(tmp_path: Path, inventory: Path) -> None:
    from ha_ops.rollout.request import controller_inputs

    files = [tmp_path / name for name in ("c.pem", "k.pem", "ca.pem")]
    for f in files:
        f.write_text("x")
    inputs = controller_inputs(LAB, [], False, *files)
    assert inputs["controllers"] == ["https://10.77.0.10:8800", "https://10.77.1.10:8800"]
    assert inputs["controller_ca"] == files[2].resolve()
    assert controller_inputs(LAB, [], True, None, None, None) == {}


def test_driver_rolls_the_fleet_then_status(tmp_path: Path, fleet: Fleet, inventory: Path) -> None:
    state_dir = tmp_path / "rollout"
    result = runner.invoke(app, driver_args(state_dir, inventory, "--json"), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["phase"] == "completed" and summary["counts"] == {"done": 4} and summary["failed"] == {}
    assert "gpu4: done" in result.stderr  # progress lines, one per step, on stderr
    assert all(node.version == TARGET for node in fleet.nodes.values())

    status = runner.invoke(app, ["rollout", "status", "--state-dir", str(state_dir), "--json"], catch_exceptions=False)
    data = json.loads(status.stdout)
    assert data["summary"]["phase"] == "completed" and data["running"] is False
    assert data["state"]["nodes"]["gpu1"]["step"] == "done"
    table = runner.invoke(app, ["rollout", "status", "--state-dir", str(state_dir)], catch_exceptions=False)
    assert "completed" in table.stdout and "canary" in table.stdout


def test_a_halted_rollout_exits_1_and_says_why(
    tmp_path: Path, fleet: Fleet, inventory: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet.nodes["gpu1"].fails_validation = True
    code = run_main(monkeypatch, *driver_args(tmp_path / "r", inventory, "--canary", "gpu1"))
    assert code == 1
    out, _ = capsys.readouterr()
    assert "halted (canary: 1 of 1 node(s) failed (gpu1: validation failed" in out
    assert all(node.version == OLD and not node.drained for node in fleet.nodes.values())


def test_dry_run_writes_nothing(tmp_path: Path, fleet: Fleet, inventory: Path) -> None:
    state_dir = tmp_path / "rollout"
    result = runner.invoke(app, driver_args(state_dir, inventory, "--dry-run"), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "dry run: nothing changed" in result.stdout
    assert not state_dir.exists() and fleet.calls == []


def test_a_missing_inventory_exits_2(
    tmp_path: Path, fleet: Fleet, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_main(monkeypatch, *driver_args(tmp_path / "r", tmp_path / "missing.yml")) == 2
    assert "--inventory:" in capsys.readouterr().err


def test_second_rollout_refused_pause_resume_abort(
    tmp_path: Path, fleet: Fleet, inventory: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    state_dir = tmp_path / "rollout"
    store = RolloutStore(state_dir)
    store.directory.mkdir(parents=True)
    store.request(pause=True)  # asked before the start: it pauses at the first safe point
    assert run_main(monkeypatch, *driver_args(state_dir, inventory)) == 0
    assert store.load().phase == Phase.PAUSED
    capsys.readouterr()

    # A second rollout is refused while this one is unfinished.
    assert run_main(monkeypatch, *driver_args(state_dir, inventory)) == 1
    assert "is paused (paused on request); finish it with `ha-ops rollout resume`" in capsys.readouterr().err

    # ... and while a process holds the lock.
    with RolloutStore(state_dir).lock():
        assert run_main(monkeypatch, "rollout", "resume", "--state-dir", str(state_dir)) == 1
        assert "a rollout is running" in capsys.readouterr().err
        assert run_main(monkeypatch, "rollout", "pause", "--state-dir", str(state_dir)) == 0
        assert "pause requested" in capsys.readouterr().out

    assert run_main(monkeypatch, "rollout", "resume", "--state-dir", str(state_dir), "--json") == 0
    assert json.loads(capsys.readouterr().out)["phase"] == "completed"
    assert run_main(monkeypatch, "rollout", "abort", "--state-dir", str(state_dir)) == 1
    assert "is completed: nothing to abort" in capsys.readouterr().err


def test_abort_with_nothing_running_carries_it_out(
    tmp_path: Path, fleet: Fleet, inventory: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    state_dir = tmp_path / "rollout"
    RolloutStore(state_dir).request(pause=True)
    assert run_main(monkeypatch, *driver_args(state_dir, inventory)) == 0
    capsys.readouterr()
    assert run_main(monkeypatch, "rollout", "abort", "--state-dir", str(state_dir), "--note", "wrong version") == 0
    assert "aborted (aborted on request (wrong version))" in capsys.readouterr().out
    assert RolloutStore(state_dir).load().phase == Phase.ABORTED


def test_status_without_a_rollout_exits_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_main(monkeypatch, "rollout", "status", "--state-dir", str(tmp_path)) == 1
    assert "no rollout in" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("content", "extra", "named"),
    [
        (b"soak_s: \xff\xfe\n", [], "not UTF-8 text"),
        (b"soak_s: 2024-02-30\n", [], "not valid YAML"),
        (b"soak_s: " + b"9" * 5000 + b"\n", [], "for integer string conversion"),
        (b"[" * 5000 + b"]" * 5000, [], "nested too deeply"),
        (b"drain: 5\n", ["--drain", "requeue"], "drain: a mapping of mode and timeout_s, not 5"),
    ],
)
def test_a_bad_policy_file_is_an_error_naming_it_never_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    content: bytes, extra: list[str], named: str,
) -> None:  # fmt: skip
    # (issue 44's fuzzed policy files: each was a traceback, exit 70)
    policy = tmp_path / "policy.yaml"
    policy.write_bytes(content)
    assert run_main(monkeypatch, *plan_args("--policy", str(policy), *extra)) == 2
    err = capsys.readouterr().err
    assert named in err and "Traceback" not in err


def test_a_rollout_state_written_before_typed_inputs_still_loads(tmp_path: Path) -> None:
    from ha_ops.rollout.inputs import RolloutInputs

    old = {"inventory": "/x/inv.yml", "playbook": "/x/playbooks/driver.yml", "controllers": "https://a:1,https://b:1",
           "controller_ca": "/x/ca.pem"}  # fmt: skip
    inputs = RolloutInputs.model_validate(old)
    assert inputs.controllers == ["https://a:1", "https://b:1"] and inputs.inventory == Path("/x/inv.yml")
    assert inputs.controller_tls() is None  # (no certificate and key: not all three files)
