"""The controller's node records, written per change: a journal in the state document and shards beside it.

Layout (version 2 of the state, in the controllers' shared documents: files or ConfigMaps):
- `state.json`, the core: everything but the node records (intents, breaker, fences, audit head, ...), and a
  *journal*: the records changed since they were last compacted, as of this write;
- `nodes/shard-NNN.json`, SHARDS documents: each holds the records of the nodes that hash to it (crc32), as of the
  last compaction that touched it.
A node's record is its journal entry if it has one, else its shard's. Each commit writes only the core (one atomic
write, as before: the core and the records it names can never disagree); once the journal holds JOURNAL_RECORDS
records or JOURNAL_BYTES, the records of a core already written are copied into their shards and the next core
drops them from its journal. A leader that dies between the two finds the records in both, alike.

Why shards and not a document per node: 25,000 nodes would be 25,000 ConfigMaps to list at every takeover; 256
shards of about 100 nodes stay far under the API server's 1 MiB (and the issue's 256 KiB) and a takeover lists 256
objects. Why a journal and not writing each changed shard: a decision that changes a node and adds its intents must
land in one write.

What is written at all: a record is serialized only when it says it changed (model.NodeRecord tracks assignments;
history.py touches it for its in-place changes), and written only when its *durable* text changed: the freshness of
an agent's last report (its `at`, `seq`, `agent_id` and `sent_at`) alone is not written, so a heartbeat that changes
nothing else writes nothing. A new leader loses those: it counts silence from its own takeover anyway
(observers.py), and a report older than the last one written is still refused.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field
from typing import Any

from ha_ops.remediation.model import ControllerState, NodeRecord

SHARDS = 256
FOLDER = "nodes"
JOURNAL_RECORDS = 256  # the journal is compacted into the shards past this many records...
JOURNAL_BYTES = 128 << 10  # ...or this many bytes
FRESHNESS = {"at", "seq", "agent_id", "sent_at"}  # of the last report: kept in memory, not written on their own
# Observations of a record that are not written on their own either: what Slurm said at the last poll (a partition
# makes every node down* in one tick: that alone must not rewrite 25,000 records).
OBSERVED = {"slurm_state"}


def shard_of(name: str) -> int:
    return zlib.crc32(name.encode()) % SHARDS


def shard_document(shard: int) -> str:
    return f"{FOLDER}/shard-{shard:03d}.json"


def shard_number(document: str) -> int | None:
    """The shard a document of FOLDER is (its name without the folder), or None for another document."""
    stem = document.removeprefix("shard-").removesuffix(".json")
    return int(stem) if document.startswith("shard-") and stem.isdigit() and int(stem) < SHARDS else None


def record_text(rec: NodeRecord) -> str:
    return rec.model_dump_json(exclude_defaults=True)


def durable_key(rec: NodeRecord) -> str:
    """The record as written, less the freshness of its last report and what it merely observed."""
    exclude: dict[str, Any] = dict.fromkeys(OBSERVED, True)
    if rec.last_report is not None:
        exclude["last_report"] = FRESHNESS
    return rec.model_dump_json(exclude_defaults=True, exclude=exclude)


def records_json(texts: dict[str, str]) -> str:
    """A JSON object of records from their texts (sorted: the same records, the same document)."""
    return "{" + ",".join(f"{json.dumps(name)}:{texts[name]}" for name in sorted(texts)) + "}"


@dataclass
class Stored:
    """The node records as read: each shard's, and the journal's (name -> record text)."""

    shards: dict[int, dict[str, str]] = field(default_factory=dict)
    journal: dict[str, str] = field(default_factory=dict)
    stale: set[int] = field(default_factory=set)  # shards found beside no state: rewritten at the first compaction
    migrating: bool = False  # read from a state of version 1: every record is in that one document

    def may_defer_preload(self) -> bool:
        """Whether a new leader may write its core before the records stored nowhere yet (the preload): only when
        each of them is one the next takeover makes again alike (a node new to the state). Not from a state of
        version 1, whose records the core would replace, nor beside stale shards, which the core would adopt."""
        return not self.migrating and not self.stale


class NodeWriter:
    """The leader's side: which records are stored where, the journal to write next, and the compactions."""

    def __init__(self) -> None:
        self.base: dict[int, dict[str, str]] = {}  # shard -> name -> the record's text in that shard
        self.journal: dict[str, str] = {}  # name -> the record's text, not yet compacted into its shard
        self.keys: dict[str, str] = {}  # name -> the durable key of the record as stored (base or journal)
        self.changes: set[str] = set()  # names of records changed since the last collect (model.NodeRecord)
        self.stale: set[int] = set()
        # Records stored nowhere yet (a fresh state, or one read from version 1, which keeps them in its one
        # document): written straight into their shards before the first core, so that a takeover of a large fleet
        # never writes them all in one document.
        self.preload: dict[str, str] = {}
        self._journal_bytes = 0
        # The journal's JSON, made again only when it changes: every commit compares the core with the last one
        # written, and joining 256 records for each heartbeat was three quarters of a report's cost (issue 43).
        self._journal_text: str | None = None

    def begin(self, state: ControllerState, stored: Stored) -> None:
        """Under the state lock, at a takeover: what is stored, and every record tracked from now on. A record that
        differs from its stored text (a node the config added, a state from before version 2) goes to the journal."""
        self.base = {shard: dict(texts) for shard, texts in stored.shards.items()}
        self.journal = dict(stored.journal)
        self.stale = set(stored.stale)
        self.changes = set()
        self.keys = {}
        self.preload = {}
        for name, rec in state.nodes.items():
            rec.track(self.changes)
            text = record_text(rec)
            stored_text = self.journal.get(name, self.base.get(shard_of(name), {}).get(name))
            if stored_text is None:
                self.preload[name] = text
            elif text != stored_text:
                self.journal[name] = text
            self.keys[name] = durable_key(rec)
        self._journal_bytes = sum(len(t) for t in self.journal.values())
        self._journal_text = None

    def collect(self, state: ControllerState) -> None:
        """Under the state lock: the records that changed durably since the last collect, into the journal."""
        for name in self.changes:
            rec = state.nodes.get(name)
            if rec is None:
                continue
            key = durable_key(rec)
            if key != self.keys.get(name):
                self.keys[name] = key
                text = record_text(rec)
                self._journal_bytes += len(text) - len(self.journal.get(name, ""))
                self.journal[name] = text
                self._journal_text = None
        self.changes.clear()

    def journal_json(self) -> str:
        if self._journal_text is None:
            self._journal_text = records_json(self.journal)
        return self._journal_text

    def due(self) -> bool:
        return len(self.journal) >= JOURNAL_RECORDS or self._journal_bytes >= JOURNAL_BYTES

    def compaction(self, journal: dict[str, str]) -> list[tuple[str, str]]:
        """Under the write lock: the shard documents to write so that they hold `journal` (the journal of a core
        already written), each whole."""
        touched = set(self.stale)
        for name, text in journal.items():
            shard = shard_of(name)
            self.base.setdefault(shard, {})[name] = text
            touched.add(shard)
        return [(shard_document(shard), records_json(self.base.get(shard, {}))) for shard in sorted(touched)]

    def stored_shards(self) -> dict[int, str]:
        """Under the write lock: every shard as stored (shard -> records JSON), for a snapshot."""
        return {shard: records_json(texts) for shard, texts in self.base.items() if texts}

    def preloaded(self, records: dict[str, str]) -> None:
        """Under the state lock, once the shards hold `records`: no longer to preload."""
        self.stale.clear()
        for name, text in records.items():
            if self.preload.get(name) == text:
                del self.preload[name]

    def compacted(self, journal: dict[str, str]) -> None:
        """Under the state lock, once the shards are written: those records leave the journal (unless they changed
        again meanwhile)."""
        self.stale.clear()
        for name, text in journal.items():
            if self.journal.get(name) == text:
                del self.journal[name]
                self._journal_bytes -= len(text)
                self._journal_text = None
