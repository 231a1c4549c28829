"""Running the `ha-ops` console entry point in-process, as a user would, for exit-code tests."""

from __future__ import annotations

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
