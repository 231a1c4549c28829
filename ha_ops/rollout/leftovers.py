"""Processes an earlier rollout process left behind. After a kill -9 of the CLI, the ansible-playbook it started
(and that run's ssh sessions) live on and may still be changing a node; a resume that looked at the node meanwhile
would apply the driver a second time. Every process a rollout starts inherits HA_OPS_ROLLOUT_RUN=<state dir>, so the
next holder of the rollout lock finds them in /proc and waits for them to end before it touches any node."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from ha_ops.errors import HaOpsError

log = logging.getLogger(__name__)

ENV = "HA_OPS_ROLLOUT_RUN"


class LeftoverProcesses(HaOpsError):
    pass


def _tag(directory: Path) -> bytes:
    return f"{ENV}={Path(directory).resolve()}".encode()


def mark(directory: Path) -> None:
    """Tag this process's environment, which every process it starts from now on inherits."""
    os.environ[ENV] = str(Path(directory).resolve())


def find(directory: Path, proc: Path = Path("/proc")) -> list[int]:
    """PIDs of live processes, other than this one, tagged with this rollout's state directory."""
    tag, out = _tag(directory), []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:  # gone, a zombie, or not ours to read
            continue
        if tag in environ.split(b"\0"):
            out.append(int(entry.name))
    return sorted(out)


def wait_gone(
    directory: Path,
    timeout_s: float = 900.0,
    *,
    poll_s: float = 1.0,
    progress: Callable[[str], None] = log.info,
    proc: Path = Path("/proc"),
) -> None:
    """Return once no leftover of an earlier rollout process lives; LeftoverProcesses naming them after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    pids = find(directory, proc)
    if pids:
        progress(f"waiting for {len(pids)} process(es) an interrupted rollout left running: {pids}")
    while pids:
        if time.monotonic() >= deadline:
            raise LeftoverProcesses(
                f"processes of an interrupted rollout still run after {timeout_s:g} s (pids {pids}); "
                "they may be changing a node: look at them before resuming"
            )
        time.sleep(poll_s)
        pids = find(directory, proc)
