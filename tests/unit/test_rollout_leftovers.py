"""Leftovers of a killed rollout process: found by their inherited tag, waited for, named when they outlive the wait."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ha_ops.rollout import leftovers
from ha_ops.rollout.state import RolloutStore
from ha_ops.util.wait import wait_for


def tagged_sleeper(directory: Path, seconds: float) -> subprocess.Popen[bytes]:
    """A process started with the tag, returned once its environment can be read in /proc: Popen returns as soon as
    exec has begun, and until the kernel has set up the new program's stack /proc/PID/environ reads empty."""
    env = os.environ | {leftovers.ENV: str(directory.resolve())}
    child = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})"], env=env)
    wait_for("the child's environment readable", lambda: Path(f"/proc/{child.pid}/environ").read_bytes(), timeout=5,
             interval=0.005)  # fmt: skip
    return child


def test_a_process_started_with_the_tag_is_found_and_others_are_not(tmp_path: Path) -> None:
    child = tagged_sleeper(tmp_path / "a", 30)
    other = tagged_sleeper(tmp_path / "b", 30)
    try:
        assert leftovers.find(tmp_path / "a") == [child.pid]
        assert leftovers.find(tmp_path / "c") == []
    finally:
        for p in (child, other):
            p.kill()
            p.wait()
    assert leftovers.find(tmp_path / "a") == []


def test_the_wait_names_the_processes_that_outlive_it(tmp_path: Path) -> None:
    child = tagged_sleeper(tmp_path, 30)
    try:
        with pytest.raises(leftovers.LeftoverProcesses, match=str(child.pid)):
            leftovers.wait_gone(tmp_path, timeout_s=0.3, poll_s=0.05)
    finally:
        child.kill()
        child.wait()


def test_taking_the_lock_waits_for_a_dead_holders_children_then_tags_this_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(leftovers.ENV, raising=False)
    child = tagged_sleeper(tmp_path, 1.0)  # what a killed rollout left running
    seen: list[str] = []
    monkeypatch.setattr(leftovers, "wait_gone", lambda d, **kw: seen.append(str(leftovers.find(d))) or child.wait())
    with RolloutStore(tmp_path).lock():
        assert child.poll() == 0  # the lock was not handed over before the leftover ended
        assert os.environ[leftovers.ENV] == str(tmp_path.resolve())
    assert seen == [str([child.pid])]
