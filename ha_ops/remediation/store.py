"""The controller's state in the shared documents (documents.py): read by whoever leads, written only by the lease
holder (fenced). Its layout (a core with a journal, node records in shards): node_records.py."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from ha_ops.errors import HaOpsError
from ha_ops.remediation.documents import DirectoryDocuments, Documents
from ha_ops.remediation.lease import LeaderLease
from ha_ops.remediation.model import STATE_VERSION, ControllerState, NodeRecord
from ha_ops.remediation.node_records import (
    FOLDER,
    Stored,
    record_text,
    records_json,
    shard_document,
    shard_number,
    shard_of,
)
from ha_ops.util.parsing import read_text

READABLE_VERSIONS = (1, STATE_VERSION)  # version 1: one document with every node record (before issue 43)


class StateError(HaOpsError):
    exit_code = 3


class StateStore:
    def __init__(self, documents: Documents, lease: LeaderLease, name: str = "state.json") -> None:
        self.documents = documents
        self.name = name
        self.lease = lease

    def load(self) -> ControllerState:
        return load_state(self.documents, self.name)

    def load_stored(self) -> tuple[ControllerState, Stored]:
        """The state, and where its node records are stored (node_records.py): for the leader that writes next."""
        return load_stored(self.documents, self.name)

    def exists(self) -> bool:
        """Whether a state was ever written (a leader writes one as it takes over, before any audit entry)."""
        return self.documents.read(self.name) is not None

    def save(self, state: ControllerState, token: int) -> None:
        """Write atomically, only while this controller holds the lease with `token` (else LeaseLost): the whole
        state, every node record in the journal."""
        self.save_text(state_text(state), token)

    def save_text(self, text: str, token: int) -> None:
        """`save` of a state already serialized (a snapshot taken under the controller's lock)."""
        self.save_document(self.name, text, token)

    def save_document(self, name: str, text: str, token: int) -> None:
        """A document of the state (the core, or a shard of the node records), fenced by the lease."""
        with self.lease.fenced(token):
            self.documents.write(name, text)


def core_text(state: ControllerState, journal_json: str) -> str:
    """The core document: the state less its node records, fields at their defaults left out (read back, they are
    the defaults again), the version first, the journal of node records last."""
    body = state.model_dump_json(exclude_defaults=True, exclude={"version", "nodes"})
    return f'{{"version":{state.version},' + ("" if body == "{}" else body[1:-1] + ",") + f'"journal":{journal_json}}}'


def state_text(state: ControllerState) -> str:
    """The whole state in one document: every node record in the journal (a restore, a test; the leader writes
    only the records that changed: node_records.py)."""
    return core_text(state, records_json({name: record_text(rec) for name, rec in state.nodes.items()}))


def load_state(documents: Documents, name: str = "state.json") -> ControllerState:
    """The state as stored (a fresh one when there is none yet); damage is refused, naming where it is."""
    return load_stored(documents, name)[0]


def load_stored(documents: Documents, name: str = "state.json") -> tuple[ControllerState, Stored]:
    where = f"controller state {documents.describe(name)}"
    try:
        text = documents.read(name)
        if text is None:  # shards beside no state (removed with it): rewritten, not adopted
            return ControllerState(), Stored(stale={n for d in _shard_texts(documents) if (n := shard_number(d))
                                                    is not None})  # fmt: skip
        data = json.loads(text)
    except (OSError, ValueError, RecursionError) as exc:
        # Writes replace the whole, so this is damage from outside: refuse rather than forget what was done.
        raise StateError(f"{where} is unreadable ({exc}); restore it or move it away") from exc
    if isinstance(data, dict) and data.get("version") == 1:  # one document, every record in it (before issue 43)
        return parse_state(data, where), Stored(migrating=True)
    state = parse_state(data, where)
    stored = Stored(journal={n: record_text(r) for n, r in state.nodes.items()})
    journaled = dict(state.nodes)
    try:
        shards = _shard_texts(documents)
    except OSError as exc:
        raise StateError(f"the node records beside {where} are unreadable ({exc})") from exc
    for document, shard_text in shards.items():
        shard = shard_number(document)
        if shard is None:
            continue
        records = parse_records(shard_text, f"node records {documents.describe(f'{FOLDER}/{document}')}")
        stored.shards[shard] = {n: record_text(r) for n, r in records.items()}
        state.nodes.update({n: r for n, r in records.items() if n not in journaled})
    return state, stored


def whole_documents(state: ControllerState, documents: Documents) -> list[tuple[str, str]]:
    """The documents that store `state` whole (a restore): every shard of its node records, a shard stored now that
    holds none of them emptied, and the core (with an empty journal) last."""
    shards: dict[int, dict[str, str]] = {}
    for name, rec in state.nodes.items():
        shards.setdefault(shard_of(name), {})[name] = record_text(rec)
    existing = {n for d in _shard_texts(documents) if (n := shard_number(d)) is not None}
    out = [(shard_document(n), records_json(shards.get(n, {}))) for n in sorted(existing | set(shards))]
    return [*out, ("state.json", core_text(state, "{}"))]


def _shard_texts(documents: Documents) -> dict[str, str]:
    return documents.folder(FOLDER)


def parse_records(text: str, where: str) -> dict[str, NodeRecord]:
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise StateError(f"{where} is unreadable ({exc}); restore the state or move them away") from exc
    if not isinstance(data, dict):
        raise StateError(f"{where} is not a JSON object of node records; restore the state or move them away")
    try:
        return {name: NodeRecord.model_validate(record) for name, record in data.items()}
    except ValidationError as exc:
        raise StateError(f"{where} are invalid ({exc.error_count()} error(s): {exc})") from exc


def parse_state(data: object, where: str) -> ControllerState:
    """A state document parsed (version 2: its journal's records as the nodes; version 1: every record)."""
    if not isinstance(data, dict):
        raise StateError(f"{where} is not a JSON object; restore it or move it away")
    if data.get("version") not in READABLE_VERSIONS:
        raise StateError(f"{where} has version {data.get('version')}, expected {STATE_VERSION}")
    if data.get("version") != 1 and "journal" in data:  # (a document as stored; the API's answer has `nodes`)
        journal = data["journal"]
        if not isinstance(journal, dict):
            raise StateError(f"{where} has a journal that is not an object of node records")
        data = {**{k: v for k, v in data.items() if k != "journal"}, "nodes": journal, "version": STATE_VERSION}
    else:
        data = {**data, "version": STATE_VERSION}  # (read as version 1, written as the current one)
    try:
        return ControllerState.model_validate(data)
    except ValidationError as exc:
        raise StateError(f"{where} is invalid ({exc.error_count()} error(s): {exc})") from None
    except RecursionError:
        raise StateError(f"{where} is nested too deeply; restore it or move it away") from None


def read_state(path: Path) -> ControllerState:
    """Read-only access for `controller status` and `audit verify`: the state file and the node records beside it."""
    if not Path(path).exists():
        where = f"controller state {path}"
        read_text(path, where)  # (names why it cannot be read)
    return load_state(DirectoryDocuments(Path(path).parent), Path(path).name)
