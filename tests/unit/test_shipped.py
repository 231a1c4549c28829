"""The files ha-ops ships (ha_ops/shipped.py): found through the package, and named by a bare name where a path is
asked for."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ha_ops.shipped import resolve, shipped

REPO = Path(__file__).resolve().parents[2]


def test_the_shipped_folders_are_the_checkouts_own_here() -> None:
    for name in ("chaos", "examples", "playbooks", "roles", "runbooks"):
        assert shipped(name).resolve() == (REPO / name).resolve(), name
    assert shipped("playbooks", "driver-rollout.yml").is_file()


@pytest.mark.parametrize(
    ("given", "kind", "expected"),
    [
        ("gpu", "gameday", ("chaos", "gamedays", "gpu.yaml")),
        ("gpu.yaml", "gameday", ("chaos", "gamedays", "gpu.yaml")),
        ("production", "spec", ("examples", "production.yaml")),
        ("gpu-failure", "runbook", ("runbooks", "gpu-failure.md")),
        ("gpu-xid79", "experiment", ("chaos", "experiments", "gpu-xid79.yaml")),
    ],
)
def test_a_bare_name_names_a_shipped_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str, kind: str, expected: tuple[str, ...]
) -> None:
    monkeypatch.chdir(tmp_path)  # nothing of that name here
    assert resolve(Path(given), kind) == shipped(*expected)


def test_a_file_here_a_path_or_an_unknown_name_is_left_as_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gpu").write_text("mine")
    assert resolve(Path("gpu"), "gameday") == Path("gpu")  # the user's own file wins
    assert resolve(Path("plans/gpu"), "gameday") == Path("plans/gpu")  # a path is a path
    assert resolve(Path("no-such-plan"), "gameday") == Path("no-such-plan")  # its reader reports it missing
    assert resolve(Path("lab"), "unknown-kind") == Path("lab")
    assert os.getcwd() == str(tmp_path)
