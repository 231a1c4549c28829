"""Running the `ha-ops` console entry point in-process, as a user would, for exit-code tests."""

from __future__ import annotations

import json

import pytest

from ha_ops.cli.main import main


def run_main(monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    """Run the console script's entry point in-process; return its exit code (0 if it returns)."""
    monkeypatch.setattr("sys.argv", ["ha-ops", *args])
    try:
        main()
    except SystemExit as exc:
        assert isinstance(exc.code, int), exc.code
        return exc.code
    return 0


def json_of(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, *args: str) -> dict:
    """The command's --json output, once it exited 0."""
    assert run_main(monkeypatch, *args, "--json") == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)
