"""A controllers' shared state with a history, for the snapshot and restore tests: a leader (keyed audit log) took n1
out and returned it; its snapshots are the term's first (audit seq 0) and one at the audit head; then the state is
damaged from outside and the leader is gone."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ha_ops.remediation.app import open_controller
from ha_ops.remediation.config import StateSnapshots
from ha_ops.remediation.documents import DirectoryDocuments
from ha_ops.remediation.restore import snapshot_state
from ha_ops.remediation.snapshots import FOLDER, Snapshot, read_all
from ha_ops.remediation.store import load_state
from tests.unit.test_remediation_controller import Clock, Rig, report

KEY = b"0123456789abcdef0123456789abcdef"
GARBAGE = '{"version": 1, "nodes": {"n1": {"name": "n1", "pool"'  # a write cut short


def keyed_rig(tmp_path: Path, me: str = "ctl1", clock: Clock | None = None, every_s: float = 5.0) -> Rig:
    key = tmp_path / "audit.key"  # (beside, not in, the shared folder)
    key.write_bytes(KEY)
    rig = Rig(tmp_path, me, clock)
    rig.config = rig.config.model_copy(
        update={"audit_key_file": key, "state_snapshots": StateSnapshots(keep=10, every_s=every_s)}
    )
    rig.c = open_controller(rig.config, rig.executor, clock=rig.clock)  # type: ignore[arg-type]
    return rig


@dataclass
class History:
    rig: Rig
    docs: DirectoryDocuments
    first: Snapshot  # the term's first, at audit seq 0
    at_head: Snapshot
    head_seq: int
    phases: dict[str, tuple[str, bool, int]]  # node -> (phase, in main, episode) when the leader stopped

    @property
    def dir(self) -> Path:
        return self.rig.dir

    def files(self) -> dict[str, bytes]:
        return {str(p.relative_to(self.dir)): p.read_bytes() for p in sorted(self.dir.rglob("*")) if p.is_file()}


def node_phases(nodes: dict) -> dict[str, tuple[str, bool, int]]:
    return {name: (rec.phase.value, rec.in_main, rec.episode) for name, rec in nodes.items()}


def history(tmp_path: Path, snapshot_at_head: bool = True, damage: bool = True) -> History:
    rig = keyed_rig(tmp_path)
    rig.c.lease_step()
    assert rig.c.is_leader
    rig.c.handle_report(report())
    rig.step(1.0, ticks=4)  # the episode: drain, spare in, requeue, reset, validate, resume, spare out
    assert [e["what"] for e in rig.audit()][-1] == "spare_out", rig.audit()
    if snapshot_at_head:
        rig.clock.now += 5.0
        rig.c.lease_step()
        rig.c.handle_report(report("n2", seq=1, state="healthy"))  # a write once every_s has passed: a snapshot
    docs = DirectoryDocuments(rig.dir)
    snapshots, _ = read_all(docs)
    head_seq = rig.audit()[-1]["seq"]
    phases = node_phases(rig.state().nodes)
    assert snapshots[0].audit_seq == 0
    if snapshot_at_head:
        assert snapshots[-1].audit_seq == head_seq, [s.id for s in snapshots]
    if damage:
        (rig.dir / "state.json").write_text(GARBAGE)
    rig.clock.now += 10.0  # the leader is gone: its lease has expired
    return History(rig, docs, snapshots[0], snapshots[-1], head_seq, phases)


def write_snapshot(h: History, slot: str, header: dict, state: dict | str) -> None:
    """A snapshot document written by hand (a foreign, newer or damaged one)."""
    body = state if isinstance(state, str) else json.dumps(state)
    (h.dir / FOLDER / slot).write_text(json.dumps(header) + "\n" + body)


def altered(snap: Snapshot, **changes: object) -> tuple[dict, dict]:
    """`snap`'s header and state with the same changes to both (a consistent snapshot of another history)."""
    header = {"snapshot": 1, "id": snap.id, "audit_seq": snap.audit_seq, "audit_hash": snap.audit_hash, "at": snap.at,
              "by": snap.by}  # fmt: skip
    state = json.loads(snap.text)
    for key, value in changes.items():
        if key in header:
            header[key] = value
        state[key] = value
    return header, state


def restored(h: History, snap: Snapshot | None = None) -> bool:
    """Whether the state stored now is the snapshot's (`h.at_head` by default), record for record: its core and the
    node records stored beside it (node_records.py)."""
    snap = snap or h.at_head
    return load_state(h.docs) == snapshot_state(snap, snap.slot, None, h.docs)
