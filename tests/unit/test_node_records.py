"""Node records written per change (issue 43, node_records.py): at 25,000 nodes no stored document is over 256 KiB
and a heartbeat writes no record; the journal, its compaction, and a leader that dies in between; a state of
version 1 and shards left beside no state."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from ha_ops.remediation.config import StateSnapshots
from ha_ops.remediation.documents import DirectoryDocuments
from ha_ops.remediation.leadership import PRELOAD_AT_TAKEOVER
from ha_ops.remediation.model import LastReport
from ha_ops.remediation.node_records import FOLDER, JOURNAL_RECORDS, SHARDS, durable_key, shard_document, shard_of
from ha_ops.remediation.store import load_state, state_text
from tests.unit.test_remediation_controller import Rig, report

LIMIT = 256 << 10  # the bound on any stored object at 25,000 nodes


class Writes:
    """Every document written through the controller's documents: (name, bytes)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.log: list[tuple[str, int]] = []
        write = DirectoryDocuments.write

        def counting(documents: DirectoryDocuments, name: str, text: str) -> None:
            self.log.append((name, len(text.encode())))
            write(documents, name, text)

        monkeypatch.setattr(DirectoryDocuments, "write", counting)

    def since(self, mark: int) -> list[tuple[str, int]]:
        """The state's documents written since `mark` (not the views every lease step writes)."""
        return [(name, size) for name, size in self.log[mark:] if not name.startswith("views/")]


def fleet(count: int) -> tuple[str, ...]:
    return tuple(f"gpu{i:05d}" for i in range(count))


def stored(rig: Rig) -> dict[str, str]:
    return {name: durable_key(rec) for name, rec in load_state(rig.c.documents).nodes.items()}


def held(rig: Rig) -> dict[str, str]:
    assert rig.c.state is not None
    return {name: durable_key(rec) for name, rec in rig.c.state.nodes.items()}


def report_everyone(rig: Rig, names: tuple[str, ...], at: float, seq: int, batch: int = 200) -> None:
    """Each node's last report set as its agent's report does (a group commit per `batch` reports, as a storm of
    reports is written: term.py)."""
    for start in range(0, len(names), batch):
        with rig.c.term.lock:
            assert rig.c.state is not None
            for name in names[start : start + batch]:
                rig.c.state.nodes[name].last_report = LastReport(state="healthy", action="none", reason="",
                                                                 seq=seq, agent_id="a1", at=at)  # fmt: skip
        rig.c.term.persist()


def test_25000_nodes_are_stored_in_documents_under_256_kib_and_a_heartbeat_writes_no_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes = Writes(monkeypatch)
    names = fleet(25_000)
    rig = Rig(tmp_path, nodes=names, spares=("s1",), update={"state_snapshots": StateSnapshots(keep=2, every_s=1.0)})
    rig.c.lease_step()  # the takeover: every record into its shard, then the core
    report_everyone(rig, names, at=100.0, seq=1)  # a last report per node
    rig.clock.now += 1.5
    rig.c.lease_step()
    with rig.c.term.lock:  # a change once a snapshot is due: the core, and the snapshot with its shards' copies
        assert rig.c.state is not None
        rig.c.state.nodes[names[3]].tier = "standard"
    rig.c.term.persist()
    assert stored(rig) == held(rig)
    sizes = dict(writes.log)
    biggest = max(writes.log, key=lambda w: w[1])
    assert biggest[1] <= LIMIT, biggest
    assert sum(1 for name in sizes if name.startswith(f"{FOLDER}/")) == SHARDS  # every shard holds nodes
    assert any(name.startswith("snapshot-records/") for name in sizes)  # and the snapshot copied them
    # A heartbeat from every node: only the freshness of the last report changes; nothing is written.
    mark = len(writes.log)
    report_everyone(rig, names, at=110.0, seq=2)
    assert writes.since(mark) == []
    # A tick with a poll of every node, each as Slurm reports it, writes nothing either.
    with rig.c.term.lock:
        rig.c.reconciler.states_polled({name: ("idle", "") for name in names}, rig.clock.now)
    rig.step()
    assert writes.since(mark) == []
    journal = json.loads((rig.dir / "state.json").read_text())["journal"]
    rig.c.handle_report(report(names[7]))  # a real change: its record and its spare's, in the core's journal
    written = writes.since(mark)
    assert {name for name, _ in written} == {"state.json"}, written
    assert set(json.loads((rig.dir / "state.json").read_text())["journal"]) - set(journal) == {names[7], "s1"}
    for name in names:  # every agent heard, as each report is (server.py): the view a lease step writes
        rig.c.heard_from(name)
    rig.c.lease_step()
    assert [size for name, size in writes.log if name == "views/ctl1.json"][-1] < 1024  # (issue 43: was 730 KiB)


def test_a_new_leader_loads_what_the_last_one_held_at_every_step_of_the_journal(tmp_path: Path) -> None:
    names = fleet(600)
    rig = Rig(tmp_path, nodes=names, spares=("s1",))
    rig.c.lease_step()
    core = json.loads((rig.dir / "state.json").read_text())
    assert core["version"] == 2 and core["journal"] == {}  # the takeover put every record in its shard
    for round_ in range(3):  # over JOURNAL_RECORDS changed records: compacted into the shards once or more
        report_everyone(rig, names[: JOURNAL_RECORDS + 50], at=100.0 + round_, seq=round_ + 1, batch=40)
        with rig.c.term.lock:
            assert rig.c.state is not None
            for name in names[: JOURNAL_RECORDS + 50]:
                rig.c.state.nodes[name].reason = f"round {round_}"  # (a durable change to each)
        rig.c.term.persist()
        assert stored(rig) == held(rig)
        journal = json.loads((rig.dir / "state.json").read_text())["journal"]
        assert len(journal) < JOURNAL_RECORDS  # compacted, not grown without bound


def test_a_leader_dead_between_the_shards_and_the_core_leaves_records_alike_in_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = fleet(400)
    rig = Rig(tmp_path, nodes=names, spares=("s1",))
    rig.c.lease_step()
    before = stored(rig)
    died: dict[str, Any] = {}
    save = rig.c.term.store.save_text

    def dies_after_the_shards(text: str, token: int) -> None:
        if died.get("shards"):  # the core after the compaction: never written
            raise KeyboardInterrupt("the leader died")
        save(text, token)

    document = rig.c.term.store.save_document

    def shards_noted(name: str, text: str, token: int) -> None:
        document(name, text, token)
        if name.startswith(f"{FOLDER}/"):
            died["shards"] = True

    monkeypatch.setattr(rig.c.term.store, "save_text", dies_after_the_shards)
    monkeypatch.setattr(rig.c.term.store, "save_document", shards_noted)
    with rig.c.term.lock:
        assert rig.c.state is not None
        for name in names[: JOURNAL_RECORDS + 1]:
            rig.c.state.nodes[name].reason = "drained by a person"
    with pytest.raises(KeyboardInterrupt):
        rig.c.term.persist()
    after = stored(rig)  # the core with the journal was written, then the shards: the records alike in both
    assert after != before and after == held(rig)


def test_a_state_of_version_1_is_read_and_written_again_as_version_2(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    rig.c.lease_step()
    rig.c.handle_report(report("n1"))
    rig.step(ticks=2)
    whole = load_state(rig.c.documents)
    old = json.loads(state_text(whole))
    old["version"], old["nodes"] = 1, old.pop("journal")
    for shard in (rig.dir / FOLDER).iterdir():
        shard.unlink()
    (rig.dir / "state.json").write_text(json.dumps(old))
    assert durable(load_state(rig.c.documents)) == durable(whole)  # read as it was
    rig.c.lease.release()
    successor = Rig(tmp_path, "ctl2", rig.clock)
    successor.clock.now += 5.0
    successor.c.lease_step()
    assert successor.c.is_leader
    assert json.loads((rig.dir / "state.json").read_text())["version"] == 2
    assert durable(load_state(rig.c.documents)) == durable(whole)
    assert (rig.dir / shard_document(shard_of("n1"))).exists()


def test_shards_left_beside_no_state_are_not_adopted(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    rig.c.lease_step()
    rig.c.handle_report(report("n1"))
    rig.step(ticks=2)
    assert load_state(rig.c.documents).nodes["n1"].episode == 1
    (rig.dir / "state.json").unlink()
    (rig.dir / "audit.jsonl").unlink()  # a history removed whole (the lab's reset): a fresh start
    rig.c.lease.release()
    (rig.dir / "lease.json").unlink()  # (whole: the lease's record of the audit head too)
    fresh = Rig(tmp_path, "ctl2", rig.clock)
    fresh.clock.now += 5.0
    fresh.c.lease_step()
    assert fresh.c.is_leader and load_state(fresh.c.documents).nodes["n1"].episode == 0


def durable(state: Any) -> dict[str, str]:
    return {name: durable_key(rec) for name, rec in state.nodes.items()}


def test_a_heartbeat_changes_the_freshness_in_memory_only() -> None:
    from ha_ops.remediation.model import NodeRecord

    rec = NodeRecord(name="n1", pool="p", slurm_state="idle")
    rec.last_report = LastReport(state="healthy", action="none", reason="", seq=1, agent_id="a", at=1.0)
    key = durable_key(rec)
    rec.last_report = LastReport(state="healthy", action="none", reason="", seq=2, agent_id="b", at=time.time())
    rec.slurm_state = "down*"
    assert durable_key(rec) == key
    rec.last_report = LastReport(state="unhealthy", action="reset_gpu", reason="XID 79", seq=3, agent_id="b", at=9.0)
    assert durable_key(rec) != key


def configmap_controller(tmp_path: Path, api: Any, me: str, clock: Any, names: tuple[str, ...]) -> Any:
    """A controller whose documents are ConfigMaps (the Kubernetes layer's), on the fake API server."""
    from ha_ops.remediation.app import Controller
    from ha_ops.remediation.audit import AuditLog
    from ha_ops.remediation.k8s_documents import ConfigMapDocuments
    from ha_ops.remediation.lease import Lease
    from ha_ops.remediation.snapshots import SnapshotRing
    from ha_ops.remediation.store import StateStore
    from ha_ops.remediation.wiring import Parts
    from tests.unit.test_remediation_controller import StubExecutor, make_config

    config = make_config(tmp_path / "shared", me, nodes=names, spares=("s1",))
    docs = ConfigMapDocuments(api, "ha-ops", "hao")
    lease = Lease(tmp_path, me, 3.0, 0.5, clock)
    parts = Parts(lease=lease, leader_label=None, documents=docs, store=StateStore(docs, lease),
                  snapshots=SnapshotRing(docs, StateSnapshots(keep=2, every_s=1.0), lease, clock), certificates=None,
                  shipper=None, audit=AuditLog(docs))  # fmt: skip
    return Controller(config, StubExecutor(), parts, clock)  # type: ignore[arg-type]


def test_on_configmaps_no_object_is_over_256_kib_and_a_successor_loads_every_record(tmp_path: Path) -> None:
    from tests.unit.test_remediation_controller import Clock
    from tests.unit.test_remediation_documents import ApiServer

    api, clock, names = ApiServer(), Clock(), fleet(3_000)
    first = configmap_controller(tmp_path, api, "ctl1", clock, names)
    first.lease_step()
    assert first.is_leader
    for start in range(0, len(names), 200):
        with first.term.lock:
            for name in names[start : start + 200]:
                first.state.nodes[name].last_report = LastReport(state="healthy", action="none", reason="", seq=1,
                                                                 agent_id="a", at=100.0)  # fmt: skip
        first.term.persist()
    sizes = {name: len(((obj.data or {}).get("text") or "").encode()) for name, obj in api.objects.items()}
    assert max(sizes.values()) <= LIMIT, max(sizes.items(), key=lambda kv: kv[1])
    assert sum(1 for name in sizes if ".shard-" in name and "snapshot" not in name) == SHARDS
    writes = len([c for c in api.calls if c.startswith(("create", "replace"))])
    for start in range(0, len(names), 200):  # a heartbeat from every node: no object written
        with first.term.lock:
            for name in names[start : start + 200]:
                first.state.nodes[name].last_report = LastReport(state="healthy", action="none", reason="", seq=2,
                                                                 agent_id="a", at=110.0)  # fmt: skip
        first.term.persist()
    assert len([c for c in api.calls if c.startswith(("create", "replace"))]) == writes
    first.lease.release()
    clock.now += 5.0
    successor = configmap_controller(tmp_path, api, "ctl2", clock, names)
    successor.lease_step()
    assert successor.is_leader
    assert {n: durable_key(r) for n, r in successor.state.nodes.items()} == {
        n: durable_key(r) for n, r in first.state.nodes.items()
    }


def test_a_large_fleet_first_led_writes_its_core_at_the_takeover_and_its_records_right_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """25,000 nodes new to the state are 256 shards to write: on a busy API server longer than a lease term, so the
    takeover writes its core alone and the records follow in the background (PRELOAD_AT_TAKEOVER). (A new leader
    dead in between loses nothing: each record is one a takeover makes fresh from the config.)"""
    writes = Writes(monkeypatch)
    names = fleet(PRELOAD_AT_TAKEOVER + 1)
    rig = Rig(tmp_path, nodes=names, spares=())
    rig.c.lease_step()
    first = [name for name, _ in writes.since(0)]
    assert first[0] == "state.json"  # the core first, not after 256 shards
    assert rig.c.is_leader
    flush = rig.c.term._flushing
    assert flush.acquire(timeout=60)  # the background write of the records is done
    flush.release()
    assert rig.c.records_unwritten == 0  # (its metric, which the storm benchmark waits for)
    assert 'ha_ops_controller_records_unwritten{id="ctl1"} 0.0' in generate_latest(rig.c.registry).decode()
    assert stored(rig) == held(rig) and len(stored(rig)) == len(names)
    assert {n for n, _ in writes.since(0) if n.startswith(f"{FOLDER}/")} == {shard_document(i) for i in range(SHARDS)}
