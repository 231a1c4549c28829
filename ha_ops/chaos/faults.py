"""The fault journal: every fault an action injects is recorded with the operations that undo it *before* it is
injected, in the cluster's journal folder on the operator's machine (the lab's own folder for the lab). Rollbacks
run when the experiment ends, on Ctrl-C, and from `ha-ops chaos cleanup` after a run that was killed, so no fault
outlives its experiment; a host that cannot be reached keeps its entry until a later cleanup reaches it."""

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

from pydantic import ValidationError

from ha_ops.cluster.base import Cluster
from ha_ops.cluster.ops import OPS, Op
from ha_ops.errors import CommandFailed, HaOpsError, SpecError, TransportError
from ha_ops.util.atomic import write_atomic

log = logging.getLogger(__name__)

# The blast radius: how many faults may be active at once in a cluster (all runs together, from the journal). A run
# sets it from its plan or `--max-faults`; an action that would exceed it fails before it injects anything.
_max_active = 1


class FaultRefused(HaOpsError):
    """A fault that may not go in (beyond the limit, outside the cluster): refused before anything is journaled."""

    exit_code = 2


@contextmanager
def limit(max_active: int) -> Iterator[None]:
    global _max_active
    before, _max_active = _max_active, max_active
    try:
        yield
    finally:
        _max_active = before


def journal_path(cluster: Cluster) -> Path:
    return cluster.journal_dir / "chaos-faults.json"


def read_journal(path: Path) -> list[dict[str, Any]]:
    """The faults in force, as the journal lists them ([] without one); SpecError for a damaged journal, which
    `chaos cleanup` must not guess at."""
    try:
        entries = json.loads(path.read_text()) if path.exists() else []
    except (OSError, ValueError, RecursionError) as exc:
        raise SpecError(
            str(path), [f"the fault journal is unreadable ({str(exc)[:200]}); repair or remove it"]
        ) from None
    if not isinstance(entries, list):
        raise SpecError(str(path), [f"the top level must be a list of faults, not {type(entries).__name__}"])
    problems = []
    for i, entry in enumerate(entries):
        if not (isinstance(entry, dict) and isinstance(entry.get("key"), str)):
            problems.append(f"[{i}]: a fault is a mapping with a 'key' string")
            continue
        try:
            undo_ops(entry)
        except (ValidationError, RecursionError) as exc:
            problems.append(f"[{i}].undo: not a list of operations ({str(exc).splitlines()[0][:120]})")
    if problems:
        raise SpecError(str(path), problems)
    return entries


@contextmanager
def _locked(cluster: Cluster) -> Iterator[list[dict[str, Any]]]:
    path = journal_path(cluster)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        entries = read_journal(path)
        yield entries
        write_atomic(path, json.dumps(entries, indent=1))
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _check_targets(cluster: Cluster, ops: list[Op]) -> None:
    """Every operation's host is the cluster's and can do it (CapabilityMissing otherwise): checked on the plan,
    before anything is journaled, so a bad target changes nothing."""
    for op in ops:
        cluster.node(op.host).render(op)


def inject(
    cluster: Cluster, key: str, faults: list[Op], undo: list[Op], group: str | None = None, after: str | None = None
) -> None:
    """Journal fault `key` with the operations that undo it (and `after`, a function of ha_ops.chaos.rollbacks run
    once they ran), then carry out its operations. Entries with the same `group` are one fault (a partition filters
    on every node of both sides). Refused, before anything is journaled or injected, when a target is not the
    cluster's or lacks the capability, or when the fault would exceed the limit on concurrent faults."""
    _check_targets(cluster, faults + undo)
    if hasattr(cluster, "note_undo"):
        cluster.note_undo(undo)  # a dry run: what the undo would run is shown beside the fault
    with _locked(cluster) as entries:
        if not any(e["key"] == key for e in entries):
            groups = {e.get("group") or e["key"] for e in entries}
            if (group or key) not in groups and len(groups) >= _max_active:
                raise FaultRefused(
                    f"refusing fault {key}: {len(groups)} fault(s) already active ({', '.join(sorted(groups))}) and "
                    f"the limit is {_max_active} at once (max_concurrent_faults / --max-faults)"
                )
            entry: dict[str, Any] = {"key": key, "undo": json.loads(OPS.dump_json(undo)), "at": time.time()}
            entries.append(entry | ({"group": group} if group else {}) | ({"after": after} if after else {}))
    for op in faults:
        cluster.node(op.host).apply(op)
    with _locked(cluster) as entries:  # in place now: detection is measured from here, not from the decision
        for entry in entries:
            if entry["key"] == key:
                entry.setdefault("in_at", time.time())


def injected_at(entries: list[dict[str, Any]]) -> float | None:
    """When the first of these faults was in place (its operations done), or None while one is still going in."""
    if not entries or any("in_at" not in e for e in entries):
        return None
    return min(float(e["in_at"]) for e in entries)


def forget(cluster: Cluster, key: str) -> None:
    """Forget fault `key` (a key ending in ':*' forgets every fault that starts with what precedes it)."""
    with _locked(cluster) as entries:
        if key.endswith(":*"):
            entries[:] = [e for e in entries if not e["key"].startswith(key[:-1])]
        else:
            entries[:] = [e for e in entries if e["key"] != key]


def active(cluster: Cluster) -> list[dict[str, Any]]:
    path = journal_path(cluster)
    return json.loads(path.read_text()) if path.exists() else []


def undo_ops(entry: dict[str, Any]) -> list[Op]:
    return OPS.validate_python(entry.get("undo", []))


def plan_cleanup(cluster: Cluster) -> list[tuple[str, str, list[str]]]:
    """What cleanup would run, newest fault first: (fault, host, the lines its node renders)."""
    return [
        (e["key"], op.host, cluster.node(op.host).render(op)) for e in reversed(active(cluster)) for op in undo_ops(e)
    ]


def cleanup(cluster: Cluster) -> list[str]:
    """Undo every recorded fault, newest first. Returns what was undone. A rollback that fails is reported and
    forgotten; one whose host cannot be reached is reported and kept, for a cleanup once it answers again."""
    from ha_ops.chaos import rollbacks

    undone = []
    for entry in reversed(active(cluster)):
        key = entry["key"]
        try:
            for op in undo_ops(entry):
                cluster.node(op.host).apply(op)
            if entry.get("after"):
                getattr(rollbacks, entry["after"])(cluster)
            undone.append(key)
        except CommandFailed as exc:
            log.error("rollback of %s failed: %s", key, exc)
            undone.append(f"{key} (rollback failed: {exc})")
        except TransportError as exc:
            log.error("rollback of %s: a host cannot be reached; kept for the next cleanup: %s", key, exc)
            undone.append(f"{key} (kept: {exc})")
            continue
        except (HaOpsError, OSError, ValueError) as exc:
            log.error("rollback of %s failed: %s", key, exc)
            undone.append(f"{key} (rollback failed: {exc})")
        forget(cluster, key)
    return undone
