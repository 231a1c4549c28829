"""`ha-ops spec validate|show`: output and exit codes.

`app` raises HaOpsError and leaves exit codes to `main()`, so success and output go through typer's CliRunner
over `app`, and exit codes through `main()` with a patched argv.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ha_ops.cli.main import app
from ha_ops.errors import SpecError
from tests.unit.cli_helpers import run_main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
LAB = EXAMPLES / "lab.yaml"
PRODUCTION = EXAMPLES / "production.yaml"

runner = CliRunner()


@pytest.fixture
def invalid_spec(tmp_path: Path) -> Path:
    """The lab spec with more uplinks per leaf than there are spines."""
    path = tmp_path / "cluster.yaml"
    path.write_text(LAB.read_text().replace("uplinks_per_leaf: 2", "uplinks_per_leaf: 3"))
    return path


@pytest.mark.parametrize(("path", "name", "hosts"), [(LAB, "lab", 7), (PRODUCTION, "prod", 72)])
def test_validate_valid_spec(path: Path, name: str, hosts: int) -> None:
    result = runner.invoke(app, ["spec", "validate", str(path), "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"file": str(path), "valid": True, "name": name, "hosts": hosts}


def test_validate_prints_a_summary() -> None:
    result = runner.invoke(app, ["spec", "validate", str(LAB)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "valid" in result.stdout
    assert "lab" in result.stdout


def test_app_raises_spec_error(invalid_spec: Path) -> None:
    with pytest.raises(SpecError) as info:
        runner.invoke(app, ["spec", "validate", str(invalid_spec)], catch_exceptions=False)
    assert any(p.startswith("fabric.uplinks_per_leaf: ") for p in info.value.problems)


def test_validate_invalid_spec_exits_2_naming_the_field(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], invalid_spec: Path
) -> None:
    assert run_main(monkeypatch, "spec", "validate", str(invalid_spec)) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"error: {invalid_spec}: ")
    assert "fabric.uplinks_per_leaf" in err
    assert "only 2 spines" in err


def test_with_json_an_error_is_json_on_stdout_too(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], invalid_spec: Path
) -> None:
    assert run_main(monkeypatch, "spec", "validate", str(invalid_spec), "--json") == 2
    out, err = capsys.readouterr()
    error = json.loads(out)["error"]
    assert error["exit_code"] == 2 and error["kind"] == "SpecError" and error["source"] == str(invalid_spec)
    assert any(p.startswith("fabric.uplinks_per_leaf: ") for p in error["problems"])
    assert "fabric.uplinks_per_leaf" in err  # the human line stays on stderr
    assert run_main(monkeypatch, "spec", "validate", str(invalid_spec), "--json", "--bogus") == 2
    assert json.loads(capsys.readouterr().out)["error"] == {"message": "No such option: --bogus", "exit_code": 2,
                                                             "kind": "usage"}  # fmt: skip


def test_validate_missing_file_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert run_main(monkeypatch, "spec", "validate", str(tmp_path / "absent.yaml")) == 2
    assert "cannot read: No such file or directory" in capsys.readouterr().err


def test_usage_error_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # A directory is refused by the argument's own check: a click usage error, not a SpecError.
    assert run_main(monkeypatch, "spec", "validate", str(tmp_path)) == 2
    assert "is a directory" in capsys.readouterr().err


def test_unknown_command_exits_2(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_main(monkeypatch, "spec", "bogus") == 2
    assert "No such command" in capsys.readouterr().err


def test_valid_spec_exits_0(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_main(monkeypatch, "spec", "validate", str(PRODUCTION), "--json") == 0
    assert json.loads(capsys.readouterr().out)["valid"] is True


def test_show_json_has_the_layout() -> None:
    result = runner.invoke(app, ["spec", "show", str(PRODUCTION), "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert shown["spec"]["name"] == "prod"
    assert shown["spec"]["production"] is True
    layout = shown["layout"]
    assert layout["spines"] == ["spine1", "spine2", "spine3", "spine4"]
    assert [leaf["name"] for leaf in layout["leaves"]] == ["leaf1", "leaf2", "leaf3", "leaf4"]
    hosts = {h["name"]: h for h in layout["hosts"]}
    assert len(hosts) == 72
    assert hosts["ctl1"] == {
        "name": "ctl1",
        "roles": ["controller"],
        "domain": "rack1",
        "leaf": 1,
        "address": "10.80.0.6",
        "pool": None,
        "gpus": 0,
        "spare": False,
    }
    assert sum(h["spare"] for h in hosts.values()) == 9
    assert sum(h["gpus"] for h in hosts.values()) == 512


def test_show_table_lists_every_host() -> None:
    result = runner.invoke(app, ["spec", "show", str(LAB)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    for name in ("ctl1", "ctl2", "mon1", "gpu1", "gpu4"):
        assert name in result.stdout
