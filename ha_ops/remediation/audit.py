"""Append-only, hash-chained audit log (JSON lines). Each entry holds the hash of the previous one, so a changed,
inserted or removed line breaks the chain; the controller's state keeps the head (seq and hash), so a cut-off tail
is detected too.

With a key (the controller's `audit_key_file`, kept off the shared storage) each hash is an HMAC-SHA256 and the
entry says so (`"mac": "hmac-sha256"`): whoever can write the log but not read the key cannot recompute the chain
after editing it. Without a key the hash is a plain SHA-256, which shows accidents but not an attacker.

Entry: seq, at, who, what, node, why, before, after, intent, prev, [mac], hash.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ha_ops.errors import SpecError
from ha_ops.remediation.documents import DirectoryDocuments, Documents
from ha_ops.remediation.lease import RecordedHead


class Sink(Protocol):
    """Where every entry written is shipped too (audit_sink.py's AuditShipper)."""

    def ship(self, entries: list[dict[str, Any]]) -> None: ...

    def catch_up(self, entries: list[dict[str, Any]]) -> None: ...


GENESIS = "0" * 64
ENTRY_FIELDS = ("at", "who", "what", "node", "why", "before", "after", "intent")


MAC = "hmac-sha256"


def _digest(entry: dict[str, Any], key: bytes | None = None) -> str:
    body = json.dumps({k: v for k, v in entry.items() if k != "hash"}, sort_keys=True, separators=(",", ":")).encode()
    if key is None:
        return hashlib.sha256(body).hexdigest()
    return hmac.new(key, body, hashlib.sha256).hexdigest()


def read_key(path: Path) -> bytes:
    """The audit key from its file (at least 32 bytes once surrounding whitespace is stripped)."""
    try:
        key = Path(path).read_bytes().strip()
    except OSError as exc:
        raise SpecError("audit_key_file", [f"{path}: cannot read ({exc.strerror})"]) from None
    if len(key) < 32:
        raise SpecError("audit_key_file", [f"{path}: an audit key needs at least 32 bytes, it has {len(key)}"])
    return key


@dataclass(frozen=True)
class AuditHead:
    seq: int
    hash: str


def head_mac(head: AuditHead, key: bytes) -> str:
    """The audit key's HMAC over the head the state records: without the key, nobody can move the state's record of
    where the log ends (cut the log's tail, then point the state at the last entry kept)."""
    return hmac.new(key, f"ha-ops audit head {head.seq} {head.hash}".encode(), hashlib.sha256).hexdigest()


def chain_hashes(text: str) -> dict[int, str]:
    """seq -> hash of each readable entry of a log (0: the genesis), to find a recorded head in it."""
    hashes = {0: GENESIS}
    for entry in readable_entries(text):
        seq = entry.get("seq")
        if type(seq) is int:
            hashes[seq] = str(entry.get("hash"))
    return hashes


def _forged(whose: str, record: RecordedHead, key: bytes | None) -> str | None:
    head = AuditHead(record.seq, record.hash)
    if key is None or not record.mac or hmac.compare_digest(record.mac, head_mac(head, key)):
        return None
    return f"{whose} records the audit head (seq {record.seq}) with an HMAC the audit key did not make: it was edited"


@dataclass(frozen=True)
class RecordCheck:
    problems: list[str]  # a record of the head edited (its HMAC not the key's), or the log cut below the lease's
    lease_cut: bool  # the log does not hold the head the lease records (a record the key made, where keyed)


def check_records(text: str, state: RecordedHead | None, lease: RecordedHead | None, key: bytes | None) -> RecordCheck:
    """The records of where the log ends, checked with the audit key and against the log `text`: the state's (a
    state at seq 0 without an HMAC is one nothing was audited in yet, or written before ha-ops keyed it) and the
    lease's (as the last leader saved it, outside the log and the state: a log that does not hold it was cut, with
    its state or without it)."""
    problems = []
    if state is None:
        pass  # (no state's record to check: its HMAC was not given)
    elif key is not None and state.seq > 0 and not state.mac:
        problems.append(f"the controller's state records the audit head (seq {state.seq}) without the audit key's "
                        "HMAC: edited, or written before ha-ops keyed it (the next leader's save keys it)")  # fmt: skip
    elif (forged := _forged("the controller's state", state, key)) is not None:
        problems.append(forged)
    lease_cut = False
    if lease is not None:
        hashes = chain_hashes(text)
        if (forged := _forged("the lease", lease, key)) is not None:
            problems.append(forged)
        elif hashes.get(lease.seq) != lease.hash:
            end = max(hashes)
            held = f"the log ends at seq {end}" if end < lease.seq else "the log holds another entry there"
            problems.append(f"the lease records the audit head at seq {lease.seq} as the last leader saved it, but "
                            f"{held}: the log was cut or rewritten (and the state with it, where the state says "
                            "less)")  # fmt: skip
            lease_cut = True
    return RecordCheck(problems, lease_cut)


@dataclass(frozen=True)
class Prepared:
    """Entries chained and not yet written: their lines, the head after them, their intents, the entries."""

    text: str
    head: AuditHead
    intents: tuple[str, ...]
    entries: tuple[dict[str, Any], ...]


class AuditLog:
    def __init__(
        self,
        documents: Documents,
        name: str = "audit.jsonl",
        key: bytes | None = None,
        sink: Sink | None = None,
    ) -> None:
        self.documents = documents
        self.name = name
        self.key = key
        self.sink = sink  # where every entry written is shipped too (audit_sink.py)
        # The head and the audited intents, read once and then kept up to date by append(); read again only when
        # the log changed underneath (another controller appended), so a tick does not re-read the whole log.
        self._seen: Hashable | None = None
        self._head = AuditHead(0, GENESIS)
        self._intents: set[str] = set()
        # Set by resume(), at the start of a leader's term: from then on this process is the only writer (every
        # append is fenced by the lease), so appends chain onto the head as written without reading the log again
        # (a ConfigMap log costs several reads of its last segment per check).
        self._sole_writer = False
        self._prepared_head: AuditHead | None = None  # the head after the batches prepared and not yet written
        self._prepared_intents: set[str] = set()
        # The leader prepares under its state lock and writes outside it, from more than one thread: the in-memory
        # head and intent sets change only under this guard (no I/O is done under it).
        self._guard = threading.Lock()

    @classmethod
    def at(cls, path: Path, key: bytes | None = None, sink: Sink | None = None) -> AuditLog:
        """The log in a file."""
        return cls(DirectoryDocuments(Path(path).parent), Path(path).name, key, sink)

    def _load(self) -> None:
        signature = self.documents.version(self.name)
        if signature == self._seen:
            return
        head, intents = AuditHead(0, GENESIS), set()
        for entry in self._entries():
            head = AuditHead(int(entry["seq"]), str(entry["hash"]))
            if entry.get("intent"):
                intents.add(str(entry["intent"]))
        self._head, self._intents, self._seen = head, intents, signature

    def head(self) -> AuditHead:
        """The last entry's seq and hash (seq 0 and the genesis hash for an empty log)."""
        self._load()
        return self._head

    def text(self) -> str:
        return self.documents.read(self.name) or ""

    def _entries(self) -> list[dict[str, Any]]:
        return readable_entries(self.text())

    def intents(self) -> set[str]:
        """Intent ids already audited: an action re-run after a failover is not written twice."""
        self._load()
        return set(self._intents)

    def resume(
        self, recorded: AuditHead, mac: str | None = None, lease: RecordedHead | None = None
    ) -> tuple[list[str], bool]:
        """At the start of a leader's term: check the chain against the head the state recorded (the key's HMACs too)
        and the records of that head (check_records): the state's, with its HMAC `mac` (None: not checked), and the
        lease's. Return the problems, and whether the log lacks the head the lease records. Where the log does not
        hold the state's head (cut, or rewritten), the chain goes on from the recorded head, not from the log's end,
        and from the lease's when that is further: no head is ever overwritten from the log, and every later `audit
        verify` still shows the break where it was made."""
        text = self.text()
        chain = verify_text(text, recorded, self.key)
        state = RecordedHead(recorded.seq, recorded.hash, mac) if mac is not None else None
        check = check_records(text, state, lease, self.key)
        self._load()
        self._sole_writer = True
        self._prepared_head, self._prepared_intents = None, set()  # (a term's own)
        if any(p.startswith("the controller's state records seq") for p in chain):
            self._head = recorded
        if check.lease_cut and lease is not None and lease.seq > self._head.seq:
            self._head = AuditHead(lease.seq, lease.hash)
        if self.sink is not None:  # what the predecessor appended but may not have shipped
            self.sink.catch_up(self._entries())
        return check.problems + chain, check.lease_cut

    def head_as_written(self) -> AuditHead:
        """The head as this process last read or wrote it, without asking the documents (a read of the whole log
        where it is a ConfigMap): for the lease holder, the only writer, once it has read the log at the start of
        its term (head())."""
        return self._head

    def intents_as_written(self) -> set[str]:
        """intents(), under the same condition as head_as_written(), and those of the batches prepared (a copy)."""
        with self._guard:
            return self._intents | self._prepared_intents

    def append(
        self,
        *,
        at: float,
        who: str,
        what: str,
        node: str | None,
        why: str,
        before: Any = None,
        after: Any = None,
        intent: str | None = None,
    ) -> AuditHead:
        entry = {"at": at, "who": who, "what": what, "node": node, "why": why, "before": before, "after": after,
                 "intent": intent}  # fmt: skip
        return self.append_many([entry])

    def append_many(self, entries: list[dict[str, Any]]) -> AuditHead:
        """Several entries (each with the fields of `append`), chained in order and written in one append: a
        storm's actions cost one write of the log, not one each."""
        batch = self._chain(entries, self._head if self._sole_writer else self.head())
        if batch is not None:
            self._write(batch)
        return self._head

    def prepare(self, entries: list[dict[str, Any]]) -> Prepared | None:
        """The sole writer's entries chained in memory, onto the last prepared (or written) head, to be written by
        `write_prepared` in the order prepared: the controller chains under its state lock (the state records the
        new head) and writes outside it, before the state that records them."""
        assert self._sole_writer, "prepare() is for the lease holder, after resume()"
        with self._guard:
            batch = self._chain(entries, self._prepared_head or self._head)
            if batch is not None:
                self._prepared_head = batch.head
                self._prepared_intents.update(batch.intents)
        return batch

    def prepared_head(self) -> AuditHead:
        """The head once every prepared batch is written (the head as written when none is waiting)."""
        return self._prepared_head or self._head

    def write_prepared(self, batch: Prepared) -> None:
        self._write(batch)
        with self._guard:  # (a batch prepared meanwhile keeps its head)
            if self._prepared_head == batch.head:
                self._prepared_head = None  # (all written)

    def _chain(self, entries: list[dict[str, Any]], head: AuditHead) -> Prepared | None:
        lines, intents, chained = [], [], []
        for fields in entries:
            entry: dict[str, Any] = {"seq": head.seq + 1, **{k: fields.get(k) for k in ENTRY_FIELDS}, "prev": head.hash}
            if self.key is not None:
                entry["mac"] = MAC
            entry["hash"] = _digest(entry, self.key)
            lines.append(json.dumps(entry, sort_keys=True) + "\n")
            chained.append(entry)
            head = AuditHead(entry["seq"], entry["hash"])
            if entry["intent"]:
                intents.append(str(entry["intent"]))
        return Prepared("".join(lines), head, tuple(intents), tuple(chained)) if lines else None

    def _write(self, batch: Prepared) -> None:
        self.documents.append(self.name, batch.text)
        with self._guard:
            self._head = batch.head
            self._intents.update(batch.intents)
        # (the sole writer knows what it wrote; anyone else notes the version, to see a later change underneath)
        self._seen = None if self._sole_writer else self.documents.version(self.name)
        if self.sink is not None:
            self.sink.ship(list(batch.entries))


def readable_entries(text: str) -> list[dict[str, Any]]:
    """A log's readable entries, in order; a line torn by a crash or not an entry is skipped here (and named by
    `verify`)."""
    entries = []
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(entry, dict) and isinstance(entry.get("seq"), int) and "hash" in entry:
            entries.append(entry)
    return entries


def verify(path: Path, expected_head: AuditHead | None = None, key: bytes | None = None) -> list[str]:
    """Problems in the chain of the log in a file, each naming the line; empty when the log is intact."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError as exc:
        if isinstance(exc, FileNotFoundError) and expected_head is not None and expected_head.seq == 0:
            return []  # nothing was ever done: no log yet, and the state agrees
        return [f"{path}: cannot read ({exc.strerror})"]
    return verify_text(text, expected_head, key)


def _hash_problem(entry: dict[str, Any], key: bytes | None) -> str | None:
    """Why an entry's own hash does not hold, or None. With the key every entry must be keyed and match: an entry
    rewritten with a plain SHA-256 (all that someone without the key can compute) is refused. Without the key a
    keyed entry's hash cannot be checked, only its place in the chain."""
    keyed = entry.get("mac") == MAC
    if key is not None and not keyed:
        return "not keyed (written or rewritten without the audit key)"
    if keyed and key is None:
        return None
    if entry.get("hash") != _digest(entry, key if keyed else None):
        return "content does not match its hash (changed)"
    return None


def keyed_entries(text: str) -> int:
    """How many entries say they are keyed (`"mac": "hmac-sha256"`): without the key, their HMACs go unchecked, and an
    edited keyed entry whose hash was left alone still chains (issue 44, finding 6)."""
    count = 0
    for line in text.splitlines():
        if f'"mac": "{MAC}"' in line or f'"mac":"{MAC}"' in line:
            try:
                entry = json.loads(line)
            except (ValueError, RecursionError):
                continue
            count += isinstance(entry, dict) and entry.get("mac") == MAC
    return count


def verify_text(text: str, expected_head: AuditHead | None = None, key: bytes | None = None) -> list[str]:
    """Problems in the chain, each naming the line; empty when the log is intact. Give the key to check keyed
    entries' HMACs (and to refuse unkeyed ones)."""
    problems: list[str] = []
    prev_hash, prev_seq = GENESIS, 0
    hashes = {0: GENESIS}  # seq -> hash, to find the state's head in the log
    lines = text.splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError):
            problems.append(f"line {number}: not valid JSON")
            prev_hash, prev_seq = "?", prev_seq + 1
            continue
        if not isinstance(entry, dict):
            problems.append(f"line {number}: not an audit entry (a JSON {type(entry).__name__}, not an object)")
            prev_hash, prev_seq = "?", prev_seq + 1
            continue
        seq = entry.get("seq")
        if seq != prev_seq + 1:
            problems.append(f"line {number}: seq {seq} follows {prev_seq} (an entry is missing or moved)")
        if entry.get("prev") != prev_hash and prev_hash != "?":
            problems.append(f"line {number}: does not chain to the previous entry (removed or changed before it)")
        if why := _hash_problem(entry, key):
            problems.append(f"line {number}: {why}")
        valid_seq = isinstance(seq, int) and not isinstance(seq, bool)
        prev_hash, prev_seq = str(entry.get("hash")), seq if valid_seq else prev_seq + 1
        hashes[prev_seq] = prev_hash
    if expected_head is not None and hashes.get(expected_head.seq) != expected_head.hash:
        # The log may run past the state's head (a leader that appended, then stopped before its state was written),
        # never short of it.
        problems.append(
            f"the controller's state records seq {expected_head.seq} but the log "
            + (f"ends at seq {prev_seq}" if prev_seq < expected_head.seq else "holds another entry there")
            + ": entries were removed or changed"
        )
    return problems
