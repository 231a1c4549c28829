"""The last good states, kept beside the state for `ha-ops controller state restore` (restore.py).

A ring of `keep` documents in the folder `snapshots/` of the controllers' shared documents (documents.py: files, or
ConfigMaps), `slot-00.json`, `slot-01.json`, ...: each new snapshot overwrites the oldest, so the ring is bounded by
construction and nothing is ever deleted (the controller's Kubernetes role has no delete verb, so that it can never
remove the audit log). The leader writes one from the state text it has just written (never from a state that failed
to load: a takeover that cannot load the state writes nothing), when its term begins and then at most every
`every_s` after a write: never at every commit.

A snapshot is a header line (JSON: its id, the audit head the state records, when and by whom it was taken, and the
shards of node records it holds) and the state's core, byte for byte as it was written (node_records.py); beside it,
in `snapshot-records/slot-NN/`, a copy of each shard of node records as stored at that moment, each headed by the
snapshot's id: a copy whose id differs is from an older snapshot of the same slot (one torn by a crash), and the
snapshot is damaged. Every document stays the size of a shard: 25,000 nodes never make one over 256 KiB. (Format 1,
before issue 43: the whole state in the slot's one document.) Its id, `<audit seq, 10 digits>-<UTC time>`, sorts by
the audit seq and then the time (the controllers' clocks may differ; the seq only grows), and is what `state list`
shows and `state restore --from` takes.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ha_ops.errors import SpecError
from ha_ops.remediation.audit import GENESIS
from ha_ops.remediation.config import StateSnapshots
from ha_ops.remediation.documents import Documents
from ha_ops.remediation.lease import LeaderLease, LeaseLost
from ha_ops.util.parsing import parse_json

log = logging.getLogger(__name__)

FOLDER = "snapshots"
RECORDS = "snapshot-records"  # each slot's copies of the shards of node records, in a folder of the slot's name
FORMAT = 2
FORMATS = (1, FORMAT)  # 1: the whole state in the slot's document (before issue 43)


class SnapshotError(SpecError):
    """A snapshot that cannot be used (bad input, exit 2): `source` names it, `problems` say why."""


@dataclass(frozen=True)
class Snapshot:
    slot: str  # its document in FOLDER: "slot-03.json"
    id: str
    audit_seq: int
    audit_hash: str
    at: float
    by: str
    text: str  # the state's core, as the leader wrote it (format 1: the whole state)
    shards: tuple[int, ...] = ()  # the shards of node records copied beside it

    @property
    def key(self) -> tuple[int, float]:
        """Newer is greater: by the audit seq, then the time."""
        return (self.audit_seq, self.at)

    def summary(self) -> dict[str, object]:
        return {"id": self.id, "slot": self.slot, "audit_seq": self.audit_seq, "audit_hash": self.audit_hash,
                "at": self.at, "taken": utc(self.at), "by": self.by, "bytes": len(self.text)}  # fmt: skip


def utc(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


def snapshot_id(audit_seq: int, at: float) -> str:
    millis = int(at * 1000) % 1000  # (truncated, as gmtime truncates the seconds)
    return f"{audit_seq:010d}-{time.strftime('%Y%m%dT%H%M%S', time.gmtime(at))}.{millis:03d}z"


def slot_name(index: int) -> str:
    return f"slot-{index:02d}.json"


def head_of(state_text: str) -> tuple[int, str]:
    """The audit head a stored state records (left out of the text at its defaults: state_text)."""
    data = json.loads(state_text)
    return int(data.get("audit_seq", 0)), str(data.get("audit_hash", GENESIS))


def render(state_text: str, at: float, by: str, shards: list[int] | tuple[int, ...] = ()) -> str:
    seq, digest = head_of(state_text)
    header = {"snapshot": FORMAT, "id": snapshot_id(seq, at), "audit_seq": seq, "audit_hash": digest, "at": at,
              "by": by, "shards": sorted(shards)}  # fmt: skip
    return json.dumps(header, sort_keys=True) + "\n" + state_text


def shard_copy(slot: str, shard: int) -> str:
    """The document of a snapshot's copy of a shard: `snapshot-records/slot-03/shard-017.json`."""
    return f"{RECORDS}/{slot.removesuffix('.json')}/shard-{shard:03d}.json"


def shard_records(documents: Documents, snap: Snapshot) -> dict[int, str]:
    """The snapshot's copies of its shards (shard -> records JSON); SnapshotError naming a copy that is missing or
    from another snapshot of the slot (a snapshot torn by a crash)."""
    found = {}
    for shard in snap.shards:
        where = documents.describe(shard_copy(snap.slot, shard))
        text = documents.read(shard_copy(snap.slot, shard))
        first, _, body = (text or "").partition("\n")
        try:
            header = parse_json(first, where) if text is not None else None
        except SpecError:
            header = None
        if not isinstance(header, dict) or header.get("snapshot") != snap.id:
            raise SnapshotError(where, [f"damaged: its copy of shard {shard} is missing or another snapshot's"])
        found[shard] = body
    return found


def parse(slot: str, text: str, where: str) -> Snapshot:
    """The snapshot in a document's text; SnapshotError naming `where` if it is not one (its state is checked by
    restore.py, which parses it whole)."""
    first, newline, body = text.partition("\n")
    try:
        header = parse_json(first, where)
    except SpecError:
        header = None
    fields = ("id", "audit_seq", "audit_hash", "at", "by")
    if not newline or not isinstance(header, dict) or header.get("snapshot") not in FORMATS or any(
        f not in header for f in fields
    ):  # fmt: skip
        raise SnapshotError(where, ["damaged: not a state snapshot (its header line is missing or unreadable)"])
    try:
        shards = tuple(int(s) for s in header.get("shards", []))
        return Snapshot(slot, str(header["id"]), int(header["audit_seq"]), str(header["audit_hash"]),
                        float(header["at"]), str(header["by"]), body, shards)  # fmt: skip
    except (TypeError, ValueError):
        raise SnapshotError(where, ["damaged: its header's fields are not what a snapshot holds"]) from None


def read_all(documents: Documents) -> tuple[list[Snapshot], dict[str, str]]:
    """Every snapshot in the ring, oldest first, and the slots that are not one (slot -> why)."""
    found, damaged = [], {}
    for slot, text in documents.folder(FOLDER).items():
        try:
            found.append(parse(slot, text, documents.describe(f"{FOLDER}/{slot}")))
        except SnapshotError as exc:
            damaged[slot] = "; ".join(exc.problems)
    return sorted(found, key=lambda s: s.key), damaged


class SnapshotRing:
    """The leader's side: when to take a snapshot, and which slot it overwrites."""

    def __init__(self, documents: Documents, config: StateSnapshots, lease: LeaderLease, clock: Callable[[], float]):
        self.documents = documents
        self.config = config
        self.lease = lease
        self.clock = clock
        self._lock = threading.Lock()
        self._due = False  # a term began: the next write is snapshotted whatever the time
        self._last_at = float("-inf")  # when this leader last tried one
        self._next: int | None = None  # the slot to overwrite next (found once a term, from the ring)
        self.taken = 0

    def begin_term(self) -> None:
        with self._lock:
            self._due, self._next = True, None

    def due(self) -> bool:
        """Whether the next write is to be snapshotted (the writer then hands after_write the whole state)."""
        with self._lock:
            return self.config.keep > 0 and (self._due or self.clock() - self._last_at >= self.config.every_s)

    def after_write(self, text: str, token: int, who: str, shards: Callable[[], dict[int, str]] = dict) -> None:
        """Called once the state's core `text` is written under `token`, `shards` giving the node records stored
        beside it (shard -> records JSON, node_records.py): a snapshot of both, if one is due (the copies first, the
        slot's header last). A failure is logged and tried again `every_s` later: it never fails the write it
        follows."""
        keep = self.config.keep
        if keep <= 0:
            return
        now = self.clock()
        with self._lock:
            if not self._due and now - self._last_at < self.config.every_s:
                return
            self._due, self._last_at = False, now
            try:
                if self._next is None:
                    self._next = self._next_slot(keep)
                slot = slot_name(self._next)
                records = shards()
                body = render(text, now, who, list(records))
                copy_header = json.dumps({"snapshot": json.loads(body.partition("\n")[0])["id"]}) + "\n"
                # Each write fenced on its own (a deposed leader's snapshot could be older than its successor's), so
                # that the lease's renewal never waits for the whole snapshot.
                for shard, shard_text in sorted(records.items()):
                    with self.lease.fenced(token):
                        self.documents.write(shard_copy(slot, shard), copy_header + shard_text)
                with self.lease.fenced(token):
                    self.documents.write(f"{FOLDER}/{slot}", body)
                self._next = (self._next + 1) % keep
                self.taken += 1
            except (OSError, ValueError, LeaseLost) as exc:
                log.warning("state snapshot not taken: %s", exc)

    def _next_slot(self, keep: int) -> int:
        """The slot after the newest snapshot's (a term's first write starts the ring where the last term left it)."""
        snapshots, _ = read_all(self.documents)
        slots = [(s.key, index) for s in snapshots if (index := _index(s.slot)) is not None and index < keep]
        return (max(slots)[1] + 1) % keep if slots else 0


def _index(slot: str) -> int | None:
    number = slot.removeprefix("slot-").removesuffix(".json")
    return int(number) if slot.startswith("slot-") and number.isdigit() else None
