"""The fault journal: every fault an action injects is recorded with its rollback *before* it is injected, in the
lab's folder. Rollbacks run when the experiment ends, on Ctrl-C, and from `ha-ops chaos cleanup` after a run that
was killed, so no fault outlives its experiment."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ha_ops.errors import LabError
from ha_ops.lab.cluster import Lab
from ha_ops.util.atomic import write_atomic

log = logging.getLogger(__name__)

# The blast radius: how many faults may be active at once in a lab (all runs together, from the journal). A run
# sets it from its plan or `--max-faults`; an action that would exceed it fails before it injects anything.
_max_active = 1


@contextmanager
def limit(max_active: int) -> Iterator[None]:
    global _max_active
    before, _max_active = _max_active, max_active
    try:
        yield
    finally:
        _max_active = before


def journal_path(lab: Lab) -> Path:
    return lab.paths.root / "chaos-faults.json"


@contextmanager
def _locked(lab: Lab) -> Iterator[list[dict[str, Any]]]:
    path = journal_path(lab)
    fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        faults = json.loads(path.read_text()) if path.exists() else []
        yield faults
        write_atomic(path, json.dumps(faults, indent=1))
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def record(lab: Lab, key: str, rollback: str, group: str | None = None, **arguments: Any) -> None:
    """Remember that fault `key` is active and how to undo it (a function of ha_ops.chaos.rollbacks). Entries with
    the same `group` are one fault (a partition filters on every node of both sides). Refused (LabError) when the
    fault would exceed the limit on concurrent faults."""
    with _locked(lab) as faults:
        if any(f["key"] == key for f in faults):
            return
        groups = {f.get("group") or f["key"] for f in faults}
        if (group or key) not in groups and len(groups) >= _max_active:
            raise LabError(
                f"refusing fault {key}: {len(groups)} fault(s) already active ({', '.join(sorted(groups))}) and the "
                f"limit is {_max_active} at once (max_concurrent_faults / --max-faults)"
            )
        entry = {"key": key, "rollback": rollback, "arguments": arguments, "at": time.time()}
        faults.append({**entry, "group": group} if group else entry)


def forget(lab: Lab, key: str) -> None:
    """Forget fault `key` (a key ending in ':*' forgets every fault that starts with what precedes it)."""
    with _locked(lab) as faults:
        if key.endswith(":*"):
            faults[:] = [f for f in faults if not f["key"].startswith(key[:-1])]
        else:
            faults[:] = [f for f in faults if f["key"] != key]


def active(lab: Lab) -> list[dict[str, Any]]:
    path = journal_path(lab)
    return json.loads(path.read_text()) if path.exists() else []


def cleanup(lab: Lab) -> list[str]:
    """Undo every recorded fault, newest first. Returns what was undone; a failing rollback is reported, not fatal."""
    from ha_ops.chaos import rollbacks

    undone = []
    for fault in reversed(active(lab)):
        try:
            getattr(rollbacks, fault["rollback"])(lab, **fault["arguments"])
            undone.append(fault["key"])
        except (LabError, OSError, ValueError) as exc:
            log.error("rollback of %s failed: %s", fault["key"], exc)
            undone.append(f"{fault['key']} (rollback failed: {exc})")
        forget(lab, fault["key"])
    return undone
