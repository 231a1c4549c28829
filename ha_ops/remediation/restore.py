"""`ha-ops controller state restore`: a damaged shared state put back from a snapshot (snapshots.py), checked against
the keyed audit chain, or rebuilt from one and the audit entries after it (replay.py, best effort).

The audit log is what was done; a state that forgets part of it would act again on a node already dealt with, or
forget one it took out. So a snapshot is restored only when it is exactly at the log's head: the log must verify
(with the key, when its entries are keyed), and the snapshot's (audit_seq, audit_hash) must be the head's. One older
is refused, naming both seqs (the actions after it would be forgotten); one newer, or whose hash is not the chain's
at its seq, is refused too (a cut log, or another cluster's snapshot). With the cluster's config, a snapshot naming
nodes the config does not have is another cluster's.

Restoring takes a lease term of its own (the controllers' lease: refused, naming the holder, while a controller holds
it and it has not expired), so that no controller takes over half way; the damaged state is kept beside it
(`state.json.damaged-<time>`), the new one written whole (a reader sees the old text or the new), and the restore
audited. The controllers, which retry their takeover at each lease step, take it up by themselves.

Pure where it can be: `read_chain`, `judge` and `replay` decide over data, `plan` only reads; `apply` writes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ha_ops.errors import HaOpsError, SpecError
from ha_ops.remediation.audit import GENESIS, MAC, AuditHead, AuditLog, head_mac, readable_entries, verify_text
from ha_ops.remediation.documents import Documents
from ha_ops.remediation.lease import LeaderLease, LeaseLost, RecordedHead
from ha_ops.remediation.model import ControllerState
from ha_ops.remediation.replay import replay
from ha_ops.remediation.snapshots import Snapshot, SnapshotError, read_all, shard_records
from ha_ops.remediation.store import (
    StateError,
    load_state,
    parse_records,
    parse_state,
    state_text,
    whole_documents,
)
from ha_ops.util.parsing import parse_json

STATE = "state.json"
RESTORED = "state_restore"  # the restore's own audit entry: no action, so a state before it forgets nothing
LEASE_WAIT_S = 2.0  # a controller that cannot load the state holds the lease for moments, once a lease step
# How long a term just taken must stand before the restore writes under it. A blocked controller that read the lease
# free at the same moment claims the next term (claims give distinct terms, and the later one wins): seen in the lab,
# the restore's term 9 ended by a controller's claim of 10 before its first write (1 run in 17).
TERM_SETTLE_S = 0.5


class RestoreRefused(HaOpsError):
    """The cluster is not in a state to restore into (the lease held, the audit chain broken, nothing damaged)."""


@dataclass(frozen=True)
class Chain:
    """The audit log as read: its head, each seq's hash, its entries, and what is wrong with it."""

    head: AuditHead
    hashes: dict[int, str]
    entries: list[dict[str, Any]]
    problems: list[str]
    keyed_without_key: bool = False

    @property
    def acted(self) -> int:
        """The seq of the last entry that records an action (not a restore): a state at it forgets nothing."""
        return next((int(e["seq"]) for e in reversed(self.entries) if e.get("what") != RESTORED), 0)

    def actions_after(self, seq: int) -> int:
        return sum(1 for e in self.entries if int(e["seq"]) > seq and e.get("what") != RESTORED)


def read_chain(text: str | None, key: bytes | None) -> Chain:
    text = text or ""
    entries = readable_entries(text)
    problems = verify_text(text, None, key)
    keyed_without_key = key is None and any(e.get("mac") == MAC for e in entries)
    hashes = {0: GENESIS} | {int(e["seq"]): str(e["hash"]) for e in entries}
    head = AuditHead(int(entries[-1]["seq"]), str(entries[-1]["hash"])) if entries else AuditHead(0, GENESIS)
    return Chain(head, hashes, entries, problems, keyed_without_key)


def judge(snap: Snapshot, chain: Chain) -> str | None:
    """Why `snap` may not be restored over this chain, or None when it is exactly at the head (or only restores were
    audited after it)."""
    seq, head = snap.audit_seq, chain.head
    if seq > head.seq:
        return (f"snapshot {snap.id} is at audit seq {seq}, past the audit log's head (seq {head.seq}): the log was "
                "cut, or the snapshot is another cluster's")  # fmt: skip
    if chain.hashes.get(seq) != snap.audit_hash:
        return (f"snapshot {snap.id}'s audit head (seq {seq}) is not in this audit chain: another cluster's "
                "snapshot, or a rewritten log")  # fmt: skip
    if seq >= chain.acted:
        return None
    return (f"snapshot {snap.id} is at audit seq {seq}, older than the audit log's head (seq {head.seq}): the "
            f"{chain.actions_after(seq)} action(s) audited after it would be forgotten; restore one at seq "
            f"{head.seq}, or --rebuild-from-audit")  # fmt: skip


def snapshot_state(snap: Snapshot, where: str, nodes: set[str] | None, documents: Documents) -> ControllerState:
    """The snapshot's state (its core, and the node records of its copies of the shards), checked whole:
    SnapshotError naming it when damaged, or another cluster's."""
    try:
        state = parse_state(parse_json(snap.text, f"snapshot {where}"), f"snapshot {where}")
        journaled = set(state.nodes)
        for shard, text in shard_records(documents, snap).items():
            records = parse_records(text, f"snapshot {where}, shard {shard}")
            state.nodes.update({n: r for n, r in records.items() if n not in journaled})
    except SpecError as exc:  # (parse_json: not JSON, or nested too deeply)
        if isinstance(exc, SnapshotError):
            raise
        raise SnapshotError(where, [f"damaged: its state is not JSON: {'; '.join(exc.problems)}"]) from None
    except StateError as exc:
        raise SnapshotError(where, [f"damaged: {exc}"]) from None
    if (state.audit_seq, state.audit_hash) != (snap.audit_seq, snap.audit_hash):
        raise SnapshotError(where, ["damaged: its header and its state name different audit heads"])
    if nodes is not None and (foreign := sorted(set(state.nodes) - nodes)):
        raise SnapshotError(where, [f"another cluster's: it names nodes this config does not have: "
                                    f"{', '.join(foreign[:10])}"])  # fmt: skip
    return state


def find(snapshots: list[Snapshot], damaged: dict[str, str], name: str, where: Callable[[str], str]) -> Snapshot:
    """The snapshot `name` (its id, or its slot with or without .json); SnapshotError if missing or damaged."""
    for snap in snapshots:
        if name in (snap.id, snap.slot, snap.slot.removesuffix(".json")):
            return snap
    for slot, why in damaged.items():
        if name in (slot, slot.removesuffix(".json")):
            raise SnapshotError(where(slot), [why])
    raise SnapshotError(name, [f"no such snapshot in {where('')} (`ha-ops controller state list` shows them)"])


@dataclass
class Plan:
    """What a restore does: the state text to write, where it comes from, and what it found."""

    how: str  # "snapshot" or "rebuild"
    source: str  # the snapshot's id, or "a fresh state"
    state: ControllerState  # the state to write, whole
    head: AuditHead
    current: str  # what is wrong with the state now
    replayed: int = 0
    notes: list[str] = field(default_factory=list)
    state_before: str | None = None  # the state document as planned on: apply refuses if it changed since

    @property
    def text(self) -> str:
        """The state as one document (every node record in its journal)."""
        return state_text(self.state)

    def describe(self) -> dict[str, Any]:
        return {"how": self.how, "source": self.source, "audit_seq": self.head.seq, "audit_hash": self.head.hash,
                "current": self.current, "replayed": self.replayed, "notes": self.notes}  # fmt: skip


def current_problem(documents: Documents, chain: Chain) -> str:
    """What is wrong with the state now; RestoreRefused when nothing is (it loads, at the audit head)."""
    if documents.read(STATE) is None:
        return "missing"
    try:
        state = load_state(documents, STATE)
    except StateError as exc:
        return f"damaged: {exc}"
    if chain.hashes.get(state.audit_seq) == state.audit_hash and state.audit_seq >= chain.acted:
        raise RestoreRefused(f"{documents.describe(STATE)} loads and is at the audit log's head (seq "
                             f"{chain.head.seq}): nothing to restore")  # fmt: skip
    return f"behind the audit log: it records seq {state.audit_seq}, the log's head is seq {chain.head.seq}"


def plan(
    documents: Documents,
    chain: Chain,
    *,
    from_name: str | None = None,
    rebuild: bool = False,
    nodes: set[str] | None = None,
    init: Callable[[ControllerState], None] | None = None,
) -> Plan:
    """Decide the restore (reads only). `nodes`: the cluster's, from its config (a snapshot naming others is
    another cluster's); `init`: adds the config's nodes to a rebuilt state (policy.init_state)."""
    if chain.keyed_without_key:
        raise SpecError("--audit-key-file", ["the audit log's entries are keyed: give the audit key to check them"])
    if chain.problems:
        raise RestoreRefused(f"the audit log {documents.describe('audit.jsonl')} does not verify, so no state can be "
                             f"checked against it: {'; '.join(chain.problems[:5])}")  # fmt: skip
    planned = _plan(documents, chain, from_name, rebuild, nodes, init)
    planned.state_before = documents.read(STATE)
    return planned


def _plan(
    documents: Documents,
    chain: Chain,
    from_name: str | None,
    rebuild: bool,
    nodes: set[str] | None,
    init: Callable[[ControllerState], None] | None,
) -> Plan:
    snapshots, damaged = read_all(documents)

    def where(slot: str) -> str:
        return documents.describe(f"snapshots/{slot}")

    current = current_problem(documents, chain)
    if rebuild:
        return _rebuild(snapshots, chain, current, nodes, init, where, documents)
    if from_name is not None:
        snap = find(snapshots, damaged, from_name, where)
        state = snapshot_state(snap, where(snap.slot), nodes, documents)  # damaged or foreign: before the chain
        if (why := judge(snap, chain)) is not None:
            raise SnapshotError(where(snap.slot), [why])
        return Plan("snapshot", snap.id, state, chain.head, current)
    notes = [f"{where(slot)}: {why}" for slot, why in damaged.items()]
    for snap in reversed(snapshots):  # the newest that matches
        if judge(snap, chain) is not None:
            continue
        try:
            state = snapshot_state(snap, where(snap.slot), nodes, documents)
        except SnapshotError as exc:
            notes.append(str(exc))
            continue
        return Plan("snapshot", snap.id, state, chain.head, current, notes=notes)
    newest = f"the newest is {snapshots[-1].id} (seq {snapshots[-1].audit_seq})" if snapshots else "there is none"
    raise RestoreRefused(
        f"no snapshot is at the audit log's head (seq {chain.head.seq}); {newest}. "
        "--rebuild-from-audit rebuilds one from the newest before it and the log (best effort)"
    )


def _rebuild(
    snapshots: list[Snapshot],
    chain: Chain,
    current: str,
    nodes: set[str] | None,
    init: Callable[[ControllerState], None] | None,
    where: Callable[[str], str],
    documents: Documents,
) -> Plan:
    notes: list[str] = []
    base, source = ControllerState(), "a fresh state"
    for snap in reversed(snapshots):  # the newest at or before the head, in this chain
        if snap.audit_seq > chain.head.seq or chain.hashes.get(snap.audit_seq) != snap.audit_hash:
            notes.append(f"{snap.id}: not in this audit chain, skipped")
            continue
        try:
            base, source = snapshot_state(snap, where(snap.slot), nodes, documents), snap.id
            break
        except SnapshotError as exc:
            notes.append(str(exc))
    if init is not None:
        init(base)
    after = [e for e in chain.entries if int(e["seq"]) > base.audit_seq]
    notes += replay(base, after)
    base.audit_seq, base.audit_hash = chain.head.seq, chain.head.hash
    base.leading_since = 0.0
    return Plan("rebuild", source, base, chain.head, current, replayed=len(after), notes=notes)


def damaged_name(now: float) -> str:
    return f"{STATE}.damaged-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(now))}"


def take_lease(lease: LeaderLease, clock: Callable[[], float], sleep: Callable[[float], None]) -> int:
    """A term of the restore's own; RestoreRefused naming the holder while a controller holds an unexpired lease.
    Tried for LEASE_WAIT_S: a controller that cannot load the state holds it for moments at each lease step."""
    deadline = clock() + LEASE_WAIT_S
    while True:
        if lease.acquire_or_renew() and (token := lease.token) is not None:
            sleep(TERM_SETTLE_S)
            try:
                lease.check(token)  # (no later term claimed meanwhile: the racer's term ends as it fails to load)
                return token
            except LeaseLost:
                pass
        if clock() >= deadline:
            break
        sleep(0.1)
    return _refuse_held(lease, clock)


def _refuse_held(lease: LeaderLease, clock: Callable[[], float]) -> int:
    record = lease.read()
    holder = f"{record.holder} (token {record.token}, {record.expires_at - clock():.1f} s left)" if record else "?"
    raise RestoreRefused(f"a controller holds the lease: {holder}. A leader has the state it needs; stop it first, "
                         "or wait until its lease expires")  # fmt: skip


def lease_holder(lease: LeaderLease, clock: Callable[[], float]) -> None:
    """For --dry-run: refuse as a restore would, without taking a term."""
    record = lease.read()
    if record is not None and record.holder and record.expires_at > clock():
        _refuse_held(lease, clock)


def apply(
    the_plan: Plan,
    documents: Documents,
    lease: LeaderLease,
    audit_key: bytes | None,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """Write the plan's state under a lease term of the restore's own, the damaged one kept beside it; audited."""
    token = take_lease(lease, clock, sleep)
    try:
        now = clock()
        kept = None
        with lease.fenced(token):
            old = documents.read(STATE)
            head = AuditLog(documents, key=audit_key).head()
            if old != the_plan.state_before or head != the_plan.head:
                # A leader wrote between the plan and this term: its newer state (or actions) must not be replaced.
                raise RestoreRefused(f"{documents.describe(STATE)} or the audit log changed since the restore was "
                                     f"planned (the log's head is seq {head.seq}, planned at {the_plan.head.seq}): "
                                     "nothing changed; run it again")  # fmt: skip
            if old is not None:  # (copied, not moved: a reader never finds no state at all)
                kept = damaged_name(now)
                documents.write(kept, old)
        # Audited before the state is written, as the controllers do: a restore never lands unaudited.
        audited = _audit(the_plan, documents, lease, token, audit_key, kept, now)
        if audit_key is not None:  # (its record of the head keyed, as a leader's save keys it)
            recorded = AuditHead(the_plan.state.audit_seq, the_plan.state.audit_hash)
            the_plan.state.audit_head_mac = head_mac(recorded, audit_key)
        for name, text in whole_documents(the_plan.state, documents):  # (the core last; each write fenced)
            with lease.fenced(token):
                documents.write(name, text)
        # The lease's record of the audit head follows the state restored (written as the lease is released): a
        # person restored it, after a cut that left the log short of the old record.
        state = the_plan.state
        lease.audit_head = RecordedHead(state.audit_seq, state.audit_hash, state.audit_head_mac)
    finally:
        lease.release()
    return {**the_plan.describe(), "state": documents.describe(STATE),
            "kept": documents.describe(kept) if kept else None, "audited": audited}  # fmt: skip


def _audit(
    the_plan: Plan, documents: Documents, lease: LeaderLease, token: int, key: bytes | None, kept: str | None,
    now: float,
) -> bool:  # fmt: skip
    """The restore as an audit entry after the head the state records (a leader's log may run past its state's
    head). Not written into an empty log without the key: an unkeyed first entry would break a keyed chain."""
    log = AuditLog(documents, key=key)
    if key is None and log.head().seq == 0:
        return False
    source = f"snapshot {the_plan.source}" if the_plan.how == "snapshot" else f"rebuilt from {the_plan.source} " \
        f"and {the_plan.replayed} audit entries (best effort)"  # fmt: skip
    entry = {"at": now, "who": f"{lease.me} (token {token})", "what": "state_restore", "node": None,
             "why": f"{STATE} was {the_plan.current}"[:2000], "before": f"kept as {kept}" if kept else "none",
             "after": f"{source}, at audit seq {the_plan.head.seq}"}  # fmt: skip
    with lease.fenced(token):
        log.append_many([entry])
    return True


def restore_who(host: str) -> str:
    return f"restore@{host}"


def check_input(from_name: str | None, rebuild: bool) -> None:
    if from_name is not None and rebuild:
        raise SpecError("--from", ["give --from SNAPSHOT or --rebuild-from-audit, not both"])
