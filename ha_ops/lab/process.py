"""Starting, checking and ending the lab's processes. A PID is trusted only while its command line (and, for a
node's process, its network namespace) still match what the lab started, so a recycled PID is never signalled."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from ha_ops.lab.netns import NETNS_DIR, pids_in

log = logging.getLogger(__name__)


def cmdline(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [part.decode(errors="replace") for part in raw.split(b"\0")[:-1]]


def _state(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def netns_inode(netns: str) -> int | None:
    try:
        return os.stat(NETNS_DIR / netns).st_ino
    except OSError:
        return None


def in_netns(pid: int, netns: str) -> bool:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino == netns_inode(netns)
    except OSError:
        return False


def _same_program(pid: int, argv: Sequence[str]) -> bool:
    line = cmdline(pid)
    if line is None:
        return False
    if line == list(argv):
        return True
    # Daemons such as sshd rewrite their title ("sshd: /usr/sbin/sshd -D ... [listener]"): then the executable
    # must be the one started and the title must still hold the original command line.
    program = shutil.which(argv[0]) or argv[0]
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return False
    # Whole words only: "sleep 3" is not in "sleep 30", nor "slurmd -N gpu1" in "slurmd -N gpu10". mfsmount's
    # title keeps only its mount point ("mfsmount (mounted on: /run/ha-ops-node/mfs)"): a path argument will do.
    title = f" {' '.join(line)} "
    kept = f" {' '.join(argv)} " in title or any(a.startswith("/") and f"{a})" in title for a in argv[1:])
    return os.path.realpath(program) == exe and kept


def matches(pid: int | None, argv: Sequence[str], netns: str | None = None) -> bool:
    """True if `pid` is alive (not a zombie) and is the process the lab started with `argv`."""
    if not pid or not _same_program(pid, argv):
        return False
    if _state(pid) in (None, "Z", "X"):
        return False
    return netns is None or in_netns(pid, netns)


def matches_any_state(pid: int) -> bool:
    """True if `pid` exists and is not a zombie (running, sleeping or stopped)."""
    return _state(pid) not in (None, "Z", "X")


def is_stopped(pid: int) -> bool:
    return _state(pid) == "T"


def spawn(argv: Sequence[str], log_file: Path, enter: Sequence[str] = (), env: dict[str, str] | None = None) -> int:
    """Start argv detached (own session, not our child, so it never lingers as our zombie) and return its PID.

    `enter` is a prefix such as `nsenter -t HOLDER -n -u -m --` that execs into argv, so the PID is argv's own.
    """
    log_file.parent.mkdir(parents=True, exist_ok=True)
    # sh backgrounds the command and reports its PID; setsid (no fork: the job is no group leader) detaches it.
    script = 'setsid "$@" </dev/null >>"$HAO_LOG" 2>&1 & echo $!'
    full_env = dict(os.environ if env is None else env)
    full_env["HAO_LOG"] = str(log_file)
    out = subprocess.run(
        ["sh", "-c", script, "sh", *enter, *argv],
        capture_output=True,
        text=True,
        timeout=10,
        env=full_env,
        check=True,
    )
    return int(out.stdout.strip())


def wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _state(pid) in (None, "Z", "X"):
            return True
        time.sleep(0.02)
    return _state(pid) in (None, "Z", "X")


def signal_pid(pid: int, sig: signal.Signals) -> bool:
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


def terminate(pid: int, grace: float = 3.0) -> None:
    """SIGTERM (thawing a frozen process first), then SIGKILL after `grace` seconds."""
    signal_pid(pid, signal.SIGCONT)
    if not signal_pid(pid, signal.SIGTERM):
        return
    if not wait_gone(pid, grace):
        log.warning("pid %s ignored SIGTERM for %.1f s; sending SIGKILL", pid, grace)
        signal_pid(pid, signal.SIGKILL)
        wait_gone(pid, 2.0)


def terminate_all(pids: list[int], grace: float = 1.5) -> None:
    """SIGTERM every PID at once, then SIGKILL whatever is left after `grace` seconds in total."""
    for pid in pids:
        signal_pid(pid, signal.SIGCONT)
        signal_pid(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for pid in pids:
        if not wait_gone(pid, max(0.0, deadline - time.monotonic())):
            signal_pid(pid, signal.SIGKILL)
    for pid in pids:
        wait_gone(pid, 2.0)


def _parents() -> dict[int, int]:
    out = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                # The command name in field 2 may hold spaces and parentheses: the fields after its last ")".
                out[int(entry.name)] = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    return out


def with_descendants(pids: list[int]) -> list[int]:
    """`pids` and every process below them: a container's processes live in namespaces of their own, but they are
    children of the containerd shim that started them."""
    parents = _parents()
    out, seen, frontier = list(pids), set(pids), set(pids)
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier and child not in seen}
        seen |= frontier
        out += sorted(frontier)
    return out


def kill_all_in_netns(netns_name: str) -> list[int]:
    """Last sweep of `lab down`: every process still living in a lab namespace, or below one that does, was
    started by the lab."""
    pids = with_descendants(pids_in(netns_name))
    for pid in pids:
        signal_pid(pid, signal.SIGCONT)
        signal_pid(pid, signal.SIGKILL)
    for pid in pids:
        wait_gone(pid, 2.0)
    return pids
