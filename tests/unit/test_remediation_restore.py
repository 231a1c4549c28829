"""`controller state restore` (ha_ops.remediation.restore, replay): a damaged state put back from a snapshot only when
the snapshot is exactly at the keyed audit chain's head, under a lease term of its own, the damaged file kept; a
standby then leads with every node as it was. Older, newer, foreign, damaged and missing snapshots are refused,
naming them, with nothing changed; the rebuild from the audit log re-runs nothing already done."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ha_ops.errors import SpecError
from ha_ops.remediation.audit import AuditHead, verify
from ha_ops.remediation.lease import Lease
from ha_ops.remediation.model import ControllerState, NodePhase, NodeRecord, Rung
from ha_ops.remediation.replay import replay
from ha_ops.remediation.restore import Chain, RestoreRefused, apply, plan, read_chain
from ha_ops.remediation.snapshots import SnapshotError
from ha_ops.remediation.store import parse_state, read_state
from tests.unit.state_history import (
    GARBAGE,
    KEY,
    History,
    altered,
    history,
    keyed_rig,
    node_phases,
    restored,
    write_snapshot,
)

NODES = {"n1", "n2", "n3", "n4", "s1"}


@pytest.fixture
def h(tmp_path: Path) -> History:
    return history(tmp_path)


def chain(h: History, key: bytes | None = KEY) -> Chain:
    return read_chain(h.docs.read("audit.jsonl"), key)


def restore_lease(h: History) -> Lease:
    return Lease(h.dir, "restore@test", 10.0, 0.5, h.rig.clock)


def test_the_newest_snapshot_at_the_head_is_restored_the_damage_kept_and_a_standby_leads_as_before(h: History) -> None:
    the_plan = plan(h.docs, chain(h), nodes=NODES)
    assert (the_plan.how, the_plan.source, the_plan.head.seq) == ("snapshot", h.at_head.id, h.head_seq)
    assert the_plan.current.startswith("damaged: controller state ") and "unreadable" in the_plan.current
    done = apply(the_plan, h.docs, restore_lease(h), KEY, h.rig.clock)
    assert restored(h)  # record for record as the leader wrote it
    kept = [p for p in h.dir.iterdir() if p.name.startswith("state.json.damaged-")]
    assert [p.read_text() for p in kept] == [GARBAGE] and done["kept"] == str(kept[0])
    entry = json.loads((h.dir / "audit.jsonl").read_text().splitlines()[-1])
    assert entry["what"] == "state_restore" and entry["who"].startswith("restore@test (token ")
    assert entry["seq"] == h.head_seq + 1 and f"snapshot {h.at_head.id}, at audit seq {h.head_seq}" in entry["after"]
    state = read_state(h.dir / "state.json")
    assert verify(h.dir / "audit.jsonl", AuditHead(state.audit_seq, state.audit_hash), KEY) == []
    standby = keyed_rig(h.dir.parent, "ctl2", h.rig.clock)
    standby.c.lease_step()
    assert standby.c.is_leader
    assert standby.c.state is not None and node_phases(standby.c.state.nodes) == h.phases
    assert standby.c.state.audit_problems == []  # the chain, the restore's entry included, is intact


def test_a_restore_audits_no_action_so_the_snapshot_still_matches_and_a_restored_state_is_left_alone(
    h: History,
) -> None:
    apply(plan(h.docs, chain(h)), h.docs, restore_lease(h), KEY, h.rig.clock)
    with pytest.raises(RestoreRefused, match="nothing to restore"):
        plan(h.docs, chain(h))  # run twice: the second finds it done
    (h.dir / "state.json").write_text(GARBAGE)  # damaged again before any controller wrote it
    assert plan(h.docs, chain(h)).source == h.at_head.id


def test_a_snapshot_older_than_the_audit_head_is_refused_naming_both_and_nothing_changes(h: History) -> None:
    before = h.files()
    with pytest.raises(SnapshotError) as refused:
        plan(h.docs, chain(h), from_name=h.first.id)
    said = str(refused.value)
    assert f"snapshot {h.first.id} is at audit seq 0, older than the audit log's head (seq {h.head_seq})" in said
    assert f"the {h.head_seq} action(s) audited after it would be forgotten" in said
    assert h.files() == before


def test_a_snapshot_past_the_head_or_not_in_the_chain_is_refused(h: History) -> None:
    header, state = altered(h.at_head, audit_seq=h.head_seq + 1, id="newer")
    write_snapshot(h, "slot-08.json", header, state)
    with pytest.raises(SnapshotError, match=rf"at audit seq {h.head_seq + 1}, past the audit log's head \(seq"):
        plan(h.docs, chain(h), from_name="newer")
    header, state = altered(h.at_head, audit_hash="f" * 64, id="foreign")
    write_snapshot(h, "slot-09.json", header, state)
    with pytest.raises(SnapshotError, match="is not in this audit chain: another cluster's"):
        plan(h.docs, chain(h), from_name="slot-09")
    assert plan(h.docs, chain(h)).source == h.at_head.id  # by default neither is taken


def test_a_snapshot_of_another_clusters_nodes_is_refused_with_the_config(h: History) -> None:
    with pytest.raises(SnapshotError, match="another cluster's: it names nodes this config does not have: n1, n2"):
        plan(h.docs, chain(h), from_name=h.at_head.id, nodes={"n3", "n4", "s1"})


def test_a_damaged_or_missing_snapshot_is_refused_naming_it(h: History) -> None:
    (h.dir / "snapshots" / "slot-07.json").write_text("not a snapshot")
    with pytest.raises(SnapshotError) as refused:
        plan(h.docs, chain(h), from_name="slot-07")
    assert refused.value.source == str(h.dir / "snapshots" / "slot-07.json") and "damaged" in str(refused.value)
    header, _ = altered(h.at_head, id="torn")
    write_snapshot(h, "slot-06.json", header, GARBAGE)
    with pytest.raises(SnapshotError, match="damaged: its state is not JSON"):
        plan(h.docs, chain(h), from_name="torn")
    header, state = altered(h.at_head, id="invalid")
    state["journal"]["n1"]["phase"] = "on fire"  # (its node records: the journal, node_records.py)
    write_snapshot(h, "slot-04.json", header, state)
    with pytest.raises(SnapshotError, match=r"damaged: snapshot .*slot-04.json is invalid \(1 error"):
        plan(h.docs, chain(h), from_name="invalid")
    with pytest.raises(SnapshotError, match="no such snapshot") as missing:
        plan(h.docs, chain(h), from_name="0000000099-nope")
    assert missing.value.source == "0000000099-nope"
    (h.dir / "snapshots" / "slot-05.json").write_bytes(b"\xff\xfe\x00 not even text")
    # By default the damaged ones are passed over, and named.
    chosen = plan(h.docs, chain(h))
    assert chosen.source == h.at_head.id
    named = {note.partition(": ")[0] for note in chosen.notes}
    assert named == {str(h.dir / "snapshots" / f"slot-0{i}.json") for i in (4, 5, 6, 7)}, chosen.notes


def test_while_a_controller_holds_the_lease_nothing_is_restored(h: History) -> None:
    leader = Lease(h.dir, "ctl2", 3.0, 0.5, h.rig.clock)
    assert leader.acquire_or_renew()
    before = h.files()
    clock = h.rig.clock

    def sleep(seconds: float) -> None:
        clock.now += seconds  # (the wait for a controller that holds it for moments, on the test's clock)

    with pytest.raises(RestoreRefused, match=r"a controller holds the lease: ctl2 \(token \d+, [\d.]+ s left\)"):
        apply(plan(h.docs, chain(h)), h.docs, restore_lease(h), KEY, clock, sleep)
    assert h.files() == before


def test_a_term_a_racing_controller_supersedes_at_once_is_given_up_and_the_next_taken(h: History) -> None:
    """Seen in the lab (1 run in 17): a blocked controller read the lease free at the moment the restore took it,
    and claimed the next term before the restore's first write (claims give distinct terms; the later one wins).
    The restore lets its term settle, finds it superseded, and takes the lease again."""
    clock = h.rig.clock
    lease = restore_lease(h)
    take, raced = lease.acquire_or_renew, []

    def taken_and_raced() -> bool:
        won = take()
        if won and not raced:  # the racer's claim of the next term, made as it read the lease free
            (h.dir / "terms" / str(lease.token + 1)).write_text('{"holder": "ctl2"}')  # type: ignore[operator]
            raced.append(lease.token)
        return won

    lease.acquire_or_renew = taken_and_raced  # type: ignore[method-assign]

    def sleep(seconds: float) -> None:
        clock.now += seconds

    done = apply(plan(h.docs, chain(h)), h.docs, lease, KEY, clock, sleep)
    assert raced and done["source"] == h.at_head.id
    assert restored(h)


def test_an_audit_log_that_does_not_verify_refuses_every_restore(h: History) -> None:
    with pytest.raises(SpecError, match="the audit log's entries are keyed: give the audit key"):
        plan(h.docs, chain(h, key=None))  # (bad input: exit 2, naming --audit-key-file)
    lines = (h.dir / "audit.jsonl").read_text().splitlines()
    lines[2] = lines[2].replace('"requeue_jobs"', '"resume"')
    (h.dir / "audit.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(RestoreRefused, match=r"does not verify.*line 3: content does not match its hash"):
        plan(h.docs, chain(h))
    with pytest.raises(RestoreRefused, match="does not verify"):
        plan(h.docs, chain(h), rebuild=True)


def test_an_intact_state_at_the_head_is_not_replaced_and_a_missing_one_is_restored(tmp_path: Path) -> None:
    h = history(tmp_path, damage=False)
    with pytest.raises(RestoreRefused, match=r"loads and is at the audit log's head \(seq \d+\): nothing to restore"):
        plan(h.docs, chain(h))
    (h.dir / "state.json").unlink()
    the_plan = plan(h.docs, chain(h))
    assert the_plan.current == "missing"
    assert apply(the_plan, h.docs, restore_lease(h), KEY, h.rig.clock)["kept"] is None
    assert restored(h)


def test_without_a_snapshot_at_the_head_the_rebuild_replays_the_log_and_runs_nothing_again(tmp_path: Path) -> None:
    h = history(tmp_path, snapshot_at_head=False)
    with pytest.raises(RestoreRefused, match=r"no snapshot is at the audit log's head \(seq 7\); the newest is 0+-"):
        plan(h.docs, chain(h))
    the_plan = plan(h.docs, chain(h), rebuild=True, nodes=NODES)
    assert (the_plan.how, the_plan.source, the_plan.replayed) == ("rebuild", h.first.id, h.head_seq)
    apply(the_plan, h.docs, restore_lease(h), KEY, h.rig.clock)
    rebuilt = read_state(h.dir / "state.json")
    assert node_phases(rebuilt.nodes) == h.phases
    audited = [e["intent"] for e in map(json.loads, (h.dir / "audit.jsonl").read_text().splitlines()) if e["intent"]]
    assert rebuilt.next_intent > max(int(i.split("-")[0]) for i in audited)  # no new intent reuses an audited id
    standby = keyed_rig(tmp_path, "ctl2", h.rig.clock)
    standby.step(1.0, ticks=3)
    assert standby.c.is_leader and standby.executor.calls == []  # nothing done again
    assert standby.c.state is not None and standby.c.state.audit_problems == []


def test_the_rebuild_without_any_snapshot_starts_from_a_fresh_state_with_the_configs_nodes(h: History) -> None:
    for snapshot in (h.dir / "snapshots").iterdir():
        snapshot.unlink()

    def init(state: ControllerState) -> None:
        for name in sorted(NODES):
            state.nodes[name] = NodeRecord(name=name, pool="p", spare=name == "s1", in_main=name != "s1")

    the_plan = plan(h.docs, chain(h), rebuild=True, init=init)
    assert the_plan.source == "a fresh state"
    assert node_phases(parse_state(json.loads(the_plan.text), "the plan").nodes) == h.phases


# --- the replay, alone ------------------------------------------------------------------------------------------
def entry(seq: int, what: str, node: str | None, why: str = "", after: str = "", intent: str | None = None) -> dict:
    return {"seq": seq, "at": 100.0 + seq, "what": what, "node": node, "why": why, "after": after, "intent": intent}


def test_replay_sets_each_nodes_phase_from_its_last_audited_action() -> None:
    state = ControllerState(nodes={n: NodeRecord(name=n, pool="p") for n in ("a", "b", "c", "d")})
    skipped = replay(state, [
        entry(1, "drain", "a", "XID 79", "DRAIN; drain ok", "00000007-a-drain"),
        entry(2, "reset_gpu", "a", "XID 79", "DRAIN; reset_gpu ok", "00000009-a-reset_gpu"),
        entry(3, "drain", "b", "lost", "DRAIN; drain ok", "00000010-b-drain"),
        entry(4, "reboot_node", "b", "fence: lost", "DOWN; rebooted", "00000011-b-reboot_node"),
        entry(5, "maintenance_start", "c", "driver 550 (by rollout)", "until 900: driver 550"),
        entry(6, "lease_step_down", None, "blind"),
        entry(7, "drain", "zz", "?", "", "00000012-zz-drain"),
    ])  # fmt: skip
    a, b, c = state.nodes["a"], state.nodes["b"], state.nodes["c"]
    assert (a.phase, a.rung, a.episode) == (NodePhase.DRAINED, Rung.RESET_GPU, 1)  # its rung runs again
    assert (b.phase, b.rung) == (NodePhase.CORDONED, None)  # a fence's power cycle is not a repair rung
    assert [i.id for i in state.intents] == ["00000007-a-drain", "00000010-b-drain"]
    assert c.maintenance is not None and (c.maintenance.until, c.maintenance.reason) == (900.0, "driver 550")
    assert c.maintenance.by == "rollout" and state.nodes["d"].phase == NodePhase.HEALTHY
    assert state.next_intent == 13 and skipped == ["seq 7: drain on 'zz', a node the base state does not know"]


def test_a_state_written_between_the_plan_and_the_restore_is_not_replaced(h: History) -> None:
    # A leader took over (the state restored by someone else, say) and wrote after the plan was made: its newer
    # state must not be overwritten with the older plan.
    the_plan = plan(h.docs, chain(h), nodes=NODES)
    newer = h.at_head.text
    h.docs.write("state.json", newer)
    before = {p.name: p.read_bytes() for p in h.dir.iterdir() if p.is_file()}
    with pytest.raises(RestoreRefused, match="changed since the restore was planned"):
        apply(the_plan, h.docs, restore_lease(h), KEY, h.rig.clock)
    after = {p.name: p.read_bytes() for p in h.dir.iterdir() if p.is_file() and not p.name.startswith("lease")}
    assert after == {n: b for n, b in before.items() if not n.startswith("lease")}
