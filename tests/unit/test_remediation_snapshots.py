"""A controller that cannot load the shared state says so (ha_ops.remediation.blocked: the metric, its description,
one log line) and takes a state put back at its next lease step; the leader keeps a bounded ring of the states it
wrote (ha_ops.remediation.snapshots): one when its term begins, then at most every `every_s`, on files and on
ConfigMaps."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from ha_ops.health.report import AgentReport
from ha_ops.remediation.blocked import BlockedTracker, classify
from ha_ops.remediation.config import StateSnapshots
from ha_ops.remediation.documents import DirectoryDocuments
from ha_ops.remediation.k8s_documents import ConfigMapDocuments
from ha_ops.remediation.lease import Lease, LeaseLost
from ha_ops.remediation.model import ControllerState
from ha_ops.remediation.restore import snapshot_state
from ha_ops.remediation.snapshots import Snapshot, SnapshotRing, read_all, slot_name
from ha_ops.remediation.store import StateError, load_state
from tests.unit.state_history import history, keyed_rig
from tests.unit.test_remediation_controller import Clock, Rig, report
from tests.unit.test_remediation_documents import ApiServer

BLOCKED = "ha_ops_controller_blocked{"


def blocked_lines(rig: Rig) -> list[str]:
    return [line for line in generate_latest(rig.c.registry).decode().splitlines() if line.startswith(BLOCKED)]


# --- blocked ----------------------------------------------------------------------------------------------------
def test_a_standby_that_cannot_load_the_state_exports_it_says_why_and_leads_once_it_is_put_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    h = history(tmp_path)
    standby = keyed_rig(tmp_path, "ctl2", h.rig.clock)
    with caplog.at_level(logging.ERROR, logger="ha_ops.remediation.leadership"):
        for _ in range(3):  # it retries at every lease step
            standby.clock.now += 0.5
            standby.c.lease_step()
    path = str(h.dir / "state.json")
    assert not standby.c.is_leader and standby.c.lease.read().holder == ""  # (released)
    assert blocked_lines(standby) == [f'{BLOCKED}document="{path}",id="ctl2",reason="state"}} 1.0']
    described = standby.c.describe()["blocked"]
    assert (described["reason"], described["document"], described["attempts"]) == ("state", path, 3)
    assert described["error"].startswith(f"controller state {path} is unreadable")
    assert len([r for r in caplog.records if "cannot take over" in r.getMessage()]) == 1  # not one per retry
    assert len(read_all(h.docs)[0]) == 2  # a takeover that failed wrote no snapshot
    (h.dir / "state.json").write_text(h.at_head.text)  # put back
    standby.clock.now += 0.5
    standby.c.lease_step()
    assert standby.c.is_leader
    assert blocked_lines(standby) == [] and standby.c.describe()["blocked"] is None


def test_a_standby_blocked_once_says_nothing_after_its_peer_leads(tmp_path: Path) -> None:
    h = history(tmp_path)
    standby = keyed_rig(tmp_path, "ctl2", h.rig.clock)
    standby.c.lease_step()
    assert blocked_lines(standby)
    (h.dir / "state.json").write_text(h.at_head.text)
    h.rig.c.lease_step()  # the first controller, back, takes the lease first
    assert h.rig.c.is_leader
    h.rig.clock.now += 10.0  # (over fresh_s: 3 lease TTLs)
    h.rig.c.lease_step()
    standby.c.lease_step()  # not leading: no takeover tried
    assert blocked_lines(standby) == [] and standby.c.describe()["blocked"] is None


def test_what_blocks_a_takeover() -> None:
    assert classify(StateError("controller state x is unreadable"), "/s/state.json") == ("state", "/s/state.json")
    assert classify(OSError("no such file"), "/s/state.json") == ("takeover", "")
    tracker = BlockedTracker(fresh_s=9.0)
    assert tracker.failed(LeaseLost("ctl1 holds it"), "/s/state.json", 10.0)  # logged, not blocking
    assert tracker.current(10.0) is None
    assert tracker.failed(StateError("a"), "/s/state.json", 10.0)
    assert not tracker.failed(StateError("a"), "/s/state.json", 11.0)  # the same again: no new log line
    assert tracker.failed(StateError("b"), "/s/state.json", 12.0)  # another error is
    assert tracker.current(21.0) is not None and tracker.current(21.5) is None


def as_loaded(snap: Snapshot, docs: DirectoryDocuments) -> ControllerState:
    """A snapshot's state as a restore would write it: its core and its copies of the node records."""
    return snapshot_state(snap, snap.slot, None, docs)


def written_report(seq: int) -> AgentReport:
    """A report that changes what is written (its reason): a heartbeat that changes nothing durable writes nothing
    since issue 43 (node_records.py), and these tests count writes."""
    return report("n2", seq=seq, state="healthy").model_copy(update={"reason": f"sweep {seq}"})


# --- the ring ---------------------------------------------------------------------------------------------------
def test_a_term_begins_with_a_snapshot_of_what_it_wrote_and_takes_one_at_most_every_every_s(tmp_path: Path) -> None:
    rig = keyed_rig(tmp_path, every_s=60.0)
    rig.c.lease_step()
    docs = DirectoryDocuments(rig.dir)
    [first] = read_all(docs)[0]
    assert first.slot == slot_name(0) and as_loaded(first, docs) == load_state(docs)  # the whole state as written
    assert (first.audit_seq, first.by) == (0, "ctl1 (token 1)") and first.id.startswith("0000000000-19700101T0123")
    for seq in range(1, 30):  # commits every 2 s: one snapshot a minute, not one per commit
        rig.clock.now += 2.0
        rig.c.lease_step()
        rig.c.handle_report(written_report(seq))
    snapshots = read_all(docs)[0]
    assert len(snapshots) == 1
    rig.clock.now += 2.0
    rig.c.lease_step()
    rig.c.handle_report(written_report(30))
    assert [s.slot for s in read_all(docs)[0]] == [slot_name(0), slot_name(1)]
    assert as_loaded(read_all(docs)[0][-1], docs) == load_state(docs)


def test_the_ring_keeps_the_newest_few_and_a_new_term_goes_on_after_the_newest(tmp_path: Path) -> None:
    clock = Clock()
    a = keyed_rig(tmp_path, "ctl1", clock, every_s=1.0)
    a.c.snapshots.config = StateSnapshots(keep=3, every_s=1.0)
    a.c.lease_step()
    for seq in range(1, 5):  # 5 snapshots in all, into 3 slots
        clock.now += 1.0
        a.c.lease_step()
        a.c.handle_report(written_report(seq))
    docs = DirectoryDocuments(a.dir)
    snapshots = read_all(docs)[0]
    assert [s.slot for s in snapshots] == [slot_name(2), slot_name(0), slot_name(1)]  # oldest first
    assert [s.at for s in snapshots] == [clock.now - 2, clock.now - 1, clock.now]
    assert sorted(p.name for p in (a.dir / "snapshots").iterdir()) == [slot_name(i) for i in range(3)]
    clock.now += 10.0  # a is gone; b's term begins with a snapshot in the slot after the newest
    b = keyed_rig(tmp_path, "ctl2", clock)
    b.c.snapshots.config = StateSnapshots(keep=3, every_s=60.0)
    b.c.lease_step()
    newest = read_all(docs)[0][-1]
    assert (newest.slot, newest.by) == (slot_name(2), f"ctl2 (token {b.c.token})")


def test_keep_0_takes_none_and_a_failing_snapshot_never_fails_the_write(tmp_path: Path) -> None:
    rig = keyed_rig(tmp_path)
    rig.c.snapshots.config = StateSnapshots(keep=0)
    rig.c.lease_step()
    assert rig.c.is_leader and not (rig.dir / "snapshots").exists()

    class Full(DirectoryDocuments):
        def write(self, name: str, text: str) -> None:
            if name.startswith("snapshots/"):
                raise OSError(28, "No space left on device")
            super().write(name, text)

    (tmp_path / "b").mkdir()
    other = keyed_rig(tmp_path / "b")
    other.c.snapshots.documents = Full(other.dir)
    other.c.lease_step()
    assert other.c.is_leader and (other.dir / "state.json").exists() and not (other.dir / "snapshots").exists()


def test_the_ring_works_on_configmaps(tmp_path: Path) -> None:
    api = ApiServer()
    docs = ConfigMapDocuments(api, "ha-ops", "hao")  # type: ignore[arg-type]
    clock = Clock()
    lease = Lease(tmp_path, "ctl1", 3.0, 0.5, clock)
    assert lease.acquire_or_renew() and lease.token is not None
    ring = SnapshotRing(docs, StateSnapshots(keep=2, every_s=5.0), lease, clock)
    ring.begin_term()
    for seq in (3, 4, 5):
        ring.after_write(f'{{"version":1,"audit_seq":{seq},"audit_hash":"{seq:064d}"}}', lease.token, "ctl1 (token 1)")
        clock.now += 5.0
        assert lease.acquire_or_renew()  # (renewed, as the leader's lease thread does)
    snapshots, damaged = read_all(docs)
    assert damaged == {} and [s.audit_seq for s in snapshots] == [4, 5]
    assert sorted(n for n in api.objects if "snapshots" in n) == [
        "hao-snapshots.slot-00.json",
        "hao-snapshots.slot-01.json",
    ]


def test_a_deposed_leader_writes_no_snapshot(tmp_path: Path) -> None:
    clock = Clock()
    lease = Lease(tmp_path, "ctl1", 3.0, 0.5, clock)
    assert lease.acquire_or_renew() and lease.token is not None
    token = lease.token
    clock.now += 4.0
    assert Lease(tmp_path, "ctl2", 3.0, 0.5, clock).acquire_or_renew()
    ring = SnapshotRing(DirectoryDocuments(tmp_path), StateSnapshots(), lease, clock)
    ring.begin_term()
    ring.after_write('{"version":1}', token, "ctl1 (token 1)")
    assert read_all(DirectoryDocuments(tmp_path)) == ([], {})
