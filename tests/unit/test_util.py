"""Utilities without a lab: bounded waits, subprocess calls, atomic writes, lab processes and the lab state file.

Processes started here are plain `sleep`s in this machine's namespaces, each ended by its own PID.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ha_ops.errors import CommandFailed, CommandTimeout, LabError, TransportError, WaitTimeout
from ha_ops.lab import process
from ha_ops.lab.state import STATE_VERSION, LabState, NodeState, ServiceState, service_key
from ha_ops.util import atomic
from ha_ops.util.atomic import write_atomic
from ha_ops.util.proc import run
from ha_ops.util.wait import wait_for

NO_SUCH_PID = 2**22 + 1  # above the kernel's largest pid_max (2**22): never a live process


# --- wait_for ------------------------------------------------------------------------------------------------


class FakeTime:
    """A clock that moves only when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def probe_from(observations: list[object]) -> Callable[[], object]:
    """A probe that returns (or raises) each observation in turn, repeating the last one."""
    seen = iter(observations)
    last: list[object] = [None]

    def probe() -> object:
        last[0] = next(seen, last[0])
        if isinstance(last[0], BaseException):
            raise last[0]
        return last[0]

    return probe


@pytest.fixture
def no_real_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(_: float) -> None:
        raise AssertionError("wait_for slept for real instead of using the injected sleep")

    monkeypatch.setattr(time, "sleep", refuse)


def test_wait_for_returns_the_first_truthy_value(no_real_sleep: None) -> None:
    fake = FakeTime()
    value = wait_for(
        "ready",
        probe_from([None, 0, "", {"state": "up"}, "later"]),
        timeout=10,
        interval=0.5,
        clock=fake.clock,
        sleep=fake.sleep,
    )
    assert value == {"state": "up"}
    assert fake.sleeps == [0.5, 0.5, 0.5]


def test_wait_for_returns_at_once_without_sleeping(no_real_sleep: None) -> None:
    fake = FakeTime()
    assert wait_for("x", lambda: 42, timeout=1, clock=fake.clock, sleep=fake.sleep) == 42
    assert fake.sleeps == []


def test_wait_for_times_out_naming_what_and_the_last_observation(no_real_sleep: None) -> None:
    fake = FakeTime()
    calls = 0

    def probe() -> list[str]:
        nonlocal calls
        calls += 1
        return []

    with pytest.raises(WaitTimeout) as info:
        wait_for("the flux capacitor", probe, timeout=2, interval=0.25, clock=fake.clock, sleep=fake.sleep)
    message = str(info.value)
    assert "the flux capacitor" in message
    assert "last: []" in message
    assert "2 s" in message
    # Bounded: it waited the whole timeout but not much longer, and probed once per interval.
    assert 2 <= sum(fake.sleeps) < 2 + 0.25
    assert calls == len(fake.sleeps) + 1


def test_wait_for_reports_the_probe_exception(no_real_sleep: None) -> None:
    fake = FakeTime()
    probe = probe_from([None, RuntimeError("connection refused on port 6817")])
    with pytest.raises(WaitTimeout) as info:
        wait_for("slurmctld", probe, timeout=1, interval=0.1, clock=fake.clock, sleep=fake.sleep)
    message = str(info.value)
    assert "slurmctld" in message
    assert "RuntimeError" in message
    assert "connection refused on port 6817" in message


def test_wait_for_reports_the_latest_observation_not_the_first(no_real_sleep: None) -> None:
    fake = FakeTime()
    probe = probe_from([ValueError("first failure"), ValueError("second failure"), "", 0])
    with pytest.raises(WaitTimeout) as info:
        wait_for("node", probe, timeout=1, interval=0.1, clock=fake.clock, sleep=fake.sleep)
    assert "last: 0" in str(info.value)
    assert "failure" not in str(info.value)


def test_wait_for_zero_timeout_probes_once(no_real_sleep: None) -> None:
    fake = FakeTime()
    calls: list[int] = []
    with pytest.raises(WaitTimeout):
        wait_for("x", lambda: calls.append(1), timeout=0, clock=fake.clock, sleep=fake.sleep)
    assert calls == [1]
    assert fake.sleeps == []


def test_wait_for_does_not_swallow_interrupts(no_real_sleep: None) -> None:
    fake = FakeTime()
    with pytest.raises(KeyboardInterrupt):
        wait_for("x", probe_from([KeyboardInterrupt()]), timeout=5, clock=fake.clock, sleep=fake.sleep)
    assert fake.sleeps == []


# --- run ----------------------------------------------------------------------------------------------------------

# The argv never contains the words it prints, so a message can only hold them through the output.
NOISY_FAILURE = ["sh", "-c", 'for i in 1 2 3 4 5; do echo "line$i" >&2; done; echo "out$((6))"; exit 3']


def test_run_returns_output() -> None:
    result = run(["sh", "-c", 'echo "$1"; echo err >&2', "sh", "hello world"])
    assert result.ok
    assert result.returncode == 0
    assert result.stdout == "hello world\n"
    assert result.stderr == "err\n"
    assert result.argv == ["sh", "-c", 'echo "$1"; echo err >&2', "sh", "hello world"]


def test_run_passes_input_and_env() -> None:
    assert run(["cat"], input="from stdin").stdout == "from stdin"
    env = {"PATH": os.environ["PATH"], "HAO_TEST_VALUE": "42"}
    assert run(["sh", "-c", 'echo "$HAO_TEST_VALUE"'], env=env).stdout == "42\n"


def test_run_failure_names_the_exit_code_and_the_stderr_tail() -> None:
    with pytest.raises(CommandFailed) as info:
        run(NOISY_FAILURE, where="gpu1")
    exc = info.value
    assert isinstance(exc, TransportError)
    assert exc.returncode == 3
    assert exc.argv == NOISY_FAILURE
    assert exc.stderr == "".join(f"line{i}\n" for i in range(1, 6))
    assert exc.stdout == "out6\n"
    message = str(exc)
    assert "exited 3" in message
    assert "on gpu1" in message
    for kept in ("line3", "line4", "line5"):
        assert kept in message
    for dropped in ("line1", "line2", "out6"):
        assert dropped not in message


def test_run_failure_without_stderr_shows_stdout() -> None:
    with pytest.raises(CommandFailed) as info:
        run(["sh", "-c", 'echo "only$((1+1))"; exit 7'])
    assert info.value.returncode == 7
    assert "only2" in str(info.value)


def test_run_unchecked_returns_the_failed_result() -> None:
    result = run(NOISY_FAILURE, check=False)
    assert not result.ok
    assert result.returncode == 3
    assert result.stdout == "out6\n"
    assert result.stderr.splitlines()[-1] == "line5"


def test_run_timeout() -> None:
    started = time.monotonic()
    with pytest.raises(CommandTimeout) as info:
        run(["sleep", "5"], timeout=0.2, where="ctl1")
    elapsed = time.monotonic() - started
    assert elapsed < 3, f"the timeout did not stop the command ({elapsed:.1f} s)"
    exc = info.value
    assert isinstance(exc, TransportError)
    assert exc.timeout == 0.2
    assert exc.argv == ["sleep", "5"]
    assert "0.2 s" in str(exc)
    assert "ctl1" in str(exc)


def test_run_timeout_applies_even_when_unchecked() -> None:
    with pytest.raises(CommandTimeout):
        run(["sleep", "5"], timeout=0.2, check=False)


# --- write_atomic -------------------------------------------------------------------------------------------------


def test_write_atomic_text_and_mode(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "er" / "state.json"
    write_atomic(target, "héllo\n", mode=0o600)
    assert target.read_text() == "héllo\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert os.listdir(target.parent) == ["state.json"]


def test_write_atomic_bytes_default_mode_and_replace(tmp_path: Path) -> None:
    target = tmp_path / "blob"
    target.write_text("old")
    target.chmod(0o600)
    write_atomic(target, b"\x00\xffnew")
    assert target.read_bytes() == b"\x00\xffnew"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert os.listdir(tmp_path) == ["blob"]


def test_write_atomic_mode_ignores_umask(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        write_atomic(tmp_path / "f", "x", mode=0o644)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "f").stat().st_mode) == 0o644


@pytest.mark.parametrize("failing", ["replace", "fsync"])
def test_write_atomic_failure_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str) -> None:
    target = tmp_path / "state.json"
    target.write_text("old content")

    def fail(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic.os, failing, fail)
    with pytest.raises(OSError, match="No space left"):
        write_atomic(target, "new content")
    monkeypatch.undo()
    assert target.read_text() == "old content"
    assert os.listdir(tmp_path) == ["state.json"], "a temp file was left behind"


# --- lab processes ------------------------------------------------------------------------------------------------


@pytest.fixture
def spawned() -> Iterator[list[tuple[int, list[str]]]]:
    """Processes a test started, as (pid, argv); any still running at the end are killed by their own PID."""
    started: list[tuple[int, list[str]]] = []
    yield started
    for pid, argv in started:
        if process.matches(pid, argv):
            process.signal_pid(pid, signal.SIGKILL)
            process.wait_gone(pid, 2.0)


def spawn(spawned: list[tuple[int, list[str]]], argv: list[str], log: Path) -> int:
    pid = process.spawn(argv, log)
    spawned.append((pid, argv))
    return pid


def wait_running(pid: int, argv: list[str]) -> None:
    """spawn returns once the shell reported the PID; the exec into argv may still be under way."""
    wait_for(f"pid {pid} to run {argv}", lambda: process.cmdline(pid) == argv, timeout=5, interval=0.01)


def test_spawn_and_match(tmp_path: Path, spawned: list[tuple[int, list[str]]]) -> None:
    argv = ["sleep", "30"]
    log = tmp_path / "logs" / "sleep.log"
    pid = spawn(spawned, argv, log)
    wait_running(pid, argv)
    assert log.exists()
    assert process.matches(pid, argv)
    assert process.cmdline(pid) == argv
    assert not process.is_stopped(pid)
    # Detached: not our child, so it never lingers as our zombie.
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    assert os.getsid(pid) == pid, "the process leads its own session"
    assert os.getsid(pid) != os.getsid(0)


@pytest.mark.parametrize(
    "other",
    [["sleep", "31"], ["sleep", "3"], ["sleep", "300"], ["sleep", "30", "x"], ["/usr/bin/true", "30"], ["true"]],
)
def test_match_refuses_another_argv(tmp_path: Path, spawned: list[tuple[int, list[str]]], other: list[str]) -> None:
    argv = ["sleep", "30"]
    pid = spawn(spawned, argv, tmp_path / "sleep.log")
    wait_running(pid, argv)
    assert process.matches(pid, argv)
    assert not process.matches(pid, other)


def test_spawn_logs_output(tmp_path: Path, spawned: list[tuple[int, list[str]]]) -> None:
    argv = ["sh", "-c", "echo started-$((20+22)); echo to-stderr >&2; exec sleep 30"]
    log = tmp_path / "sh.log"
    pid = spawn(spawned, argv, log)
    spawned.append((pid, ["sleep", "30"]))  # what it becomes, so the fixture can end it
    wait_for("log output", lambda: "to-stderr" in log.read_text(), timeout=5, interval=0.01)
    assert "started-42" in log.read_text()
    # After the exec the process is `sleep 30`: the argv the lab recorded no longer matches.
    wait_running(pid, ["sleep", "30"])
    assert not process.matches(pid, argv)


def test_terminate(tmp_path: Path, spawned: list[tuple[int, list[str]]]) -> None:
    argv = ["sleep", "30"]
    pid = spawn(spawned, argv, tmp_path / "sleep.log")
    wait_running(pid, argv)
    process.terminate(pid)
    assert not process.matches(pid, argv)
    assert process.wait_gone(pid, 0)


def test_terminate_thaws_a_stopped_process(tmp_path: Path, spawned: list[tuple[int, list[str]]]) -> None:
    argv = ["sleep", "30"]
    pid = spawn(spawned, argv, tmp_path / "sleep.log")
    wait_running(pid, argv)
    os.kill(pid, signal.SIGSTOP)
    wait_for("stopped", lambda: process.is_stopped(pid), timeout=5, interval=0.01)
    started = time.monotonic()
    process.terminate(pid, grace=3.0)
    assert not process.matches(pid, argv)
    assert time.monotonic() - started < 2.5, "a stopped process needed SIGKILL: SIGCONT was not sent"


def test_terminate_kills_what_ignores_sigterm(tmp_path: Path, spawned: list[tuple[int, list[str]]]) -> None:
    # An ignored signal stays ignored across exec: this `sleep` cannot be ended with SIGTERM.
    pid = spawn(spawned, ["sh", "-c", "trap '' TERM; exec sleep 30"], tmp_path / "stubborn.log")
    argv = ["sleep", "30"]
    wait_running(pid, argv)
    spawned.append((pid, argv))
    process.terminate(pid, grace=0.2)
    assert not process.matches(pid, argv)


def test_terminate_a_missing_pid_is_a_no_op() -> None:
    process.terminate(NO_SUCH_PID, grace=0.1)


def test_terminate_all(tmp_path: Path, spawned: list[tuple[int, list[str]]]) -> None:
    argv = ["sleep", "30"]
    pids = [spawn(spawned, argv, tmp_path / f"sleep{i}.log") for i in range(3)]
    stubborn = spawn(spawned, ["sh", "-c", "trap '' TERM; exec sleep 30"], tmp_path / "stubborn.log")
    spawned.append((stubborn, argv))
    for pid in [*pids, stubborn]:
        wait_running(pid, argv)
    started = time.monotonic()
    process.terminate_all([*pids, stubborn, NO_SUCH_PID], grace=0.5)
    elapsed = time.monotonic() - started
    for pid in [*pids, stubborn]:
        assert not process.matches(pid, argv), pid
    # One grace for all of them, not one each.
    assert elapsed < 2.0, f"terminate_all took {elapsed:.1f} s"


def test_missing_pid() -> None:
    assert process.cmdline(NO_SUCH_PID) is None
    assert not process.matches(NO_SUCH_PID, ["sleep", "30"])
    assert not process.matches(None, ["sleep", "30"])
    assert not process.matches(0, ["sleep", "30"])
    assert process.wait_gone(NO_SUCH_PID, 0)
    assert not process.signal_pid(NO_SUCH_PID, signal.SIGCONT)


def test_cmdline_of_this_process() -> None:
    line = process.cmdline(os.getpid())
    assert line
    assert "python" in Path(line[0]).name or "pytest" in " ".join(line)


# --- LabState -------------------------------------------------------------------------------------------------------


def sample_state() -> LabState:
    state = LabState(lab="unit", root="/tmp/unit", spec_digest="abc123", spec={"name": "unit", "n": [1, 2]})
    state.phase = "up"
    state.nodes["gpu1"] = NodeState(
        name="gpu1", kind="host", netns="hao-unit-gpu1", holder_pid=1234, address="10.77.0.12"
    )
    state.nodes["leaf1"] = NodeState(name="leaf1", kind="switch", netns="hao-unit-leaf1")
    svc = ServiceState(node="gpu1", service="slurmd", argv=["/usr/sbin/slurmd", "-D"], log="/tmp/x.log", pid=99)
    state.services[svc.key] = svc
    return state


def test_state_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "lab" / "state.json"
    state = sample_state()
    state.save(path)
    loaded = LabState.load(path)
    assert loaded == state
    assert loaded.version == STATE_VERSION
    assert loaded.services[service_key("gpu1", "slurmd")].pid == 99
    assert loaded.nodes["gpu1"].holder_pid == 1234
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    # Saving again replaces the file whole.
    loaded.phase = "failed"
    loaded.save(path)
    assert LabState.load(path).phase == "failed"
    assert os.listdir(path.parent) == ["state.json"]


def test_state_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nowhere" / "state.json"
    with pytest.raises(LabError, match="no lab state") as info:
        LabState.load(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"{not json",
        b'{"version": 1, "lab": "x"',
        b"\xff\xfe\x00garbage",
        b"[]",
        b"null",
        b'"state"',
        b'{"version": 1}',
        b'{"version": 1, "lab": "x", "root": "/r", "spec_digest": "d", "spec": {}, "phase": "exploded"}',
        b'{"version": 1, "lab": "x", "root": "/r", "spec_digest": "d", "spec": {}, "services": {"a": 5}}',
    ],
    ids=["empty", "bad-json", "truncated", "binary", "list", "null", "string", "no-fields", "bad-phase", "bad-svc"],
)
def test_state_corrupt_file(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "state.json"
    path.write_bytes(content)
    with pytest.raises(LabError) as info:
        LabState.load(path)
    message = str(info.value)
    assert str(path) in message
    assert "unreadable" in message
    assert "lab down --force" in message


@pytest.mark.parametrize("version", [2, 0, None, "1"])
def test_state_wrong_version(tmp_path: Path, version: object) -> None:
    path = tmp_path / "state.json"
    data = json.loads(sample_state().model_dump_json())
    data["version"] = version
    path.write_text(json.dumps(data))
    with pytest.raises(LabError, match="version") as info:
        LabState.load(path)
    assert f"version {version}" in str(info.value)
    assert f"reads {STATE_VERSION}" in str(info.value)
    assert str(path) in str(info.value)


def test_state_without_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    data = json.loads(sample_state().model_dump_json())
    del data["version"]
    path.write_text(json.dumps(data))
    with pytest.raises(LabError, match="version None"):
        LabState.load(path)


@pytest.mark.parametrize(
    ("title", "same"),
    [
        (["mfsmount (mounted on: /run/ha-ops-node/mfs)"], True),  # mfsmount keeps only its mount point
        (["mfsmount (mounted on: /run/ha-ops-node/other)"], False),
        (["mfsmount"], False),
    ],
)
def test_a_daemon_that_rewrites_its_title_is_recognised_by_a_path_it_keeps(
    monkeypatch: pytest.MonkeyPatch, title: list[str], same: bool
) -> None:
    argv = ["/usr/bin/mfsmount", "-f", "/run/ha-ops-node/mfs", "-H", "10.77.0.5"]
    monkeypatch.setattr(process, "cmdline", lambda pid: title)
    monkeypatch.setattr(process.os, "readlink", lambda path: "/usr/bin/mfsmount")
    monkeypatch.setattr(process.os.path, "realpath", lambda path: path)
    assert process._same_program(4242, argv) is same
