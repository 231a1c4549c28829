"""Leader election on shared storage (ha_ops.remediation.lease) with injected clocks, and the state store that
writes only under the lease (ha_ops.remediation.store)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from ha_ops.remediation.documents import DirectoryDocuments
from ha_ops.remediation.lease import Lease, LeaseLost, RecordedHead
from ha_ops.remediation.model import ControllerState, NodeRecord
from ha_ops.remediation.store import StateError, StateStore, read_state


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def pair(directory: Path, clock: Clock) -> tuple[Lease, Lease]:
    return (
        Lease(directory, "ctl1", ttl_s=3.0, margin_s=0.5, clock=clock),
        Lease(directory, "ctl2", ttl_s=3.0, margin_s=0.5, clock=clock),
    )


def on_disk(directory: Path) -> dict:
    return json.loads((directory / "lease.json").read_text())


# --- election ---------------------------------------------------------------------------------------------------
def test_only_one_leads(tmp_path: Path, clock: Clock) -> None:
    a, b = pair(tmp_path, clock)
    assert a.acquire_or_renew() and a.token == 1
    assert not b.acquire_or_renew() and b.token is None
    assert on_disk(tmp_path) == {"holder": "ctl1", "token": 1, "expires_at": 1003.0}
    assert a.read() is not None and a.read().holder == "ctl1"  # type: ignore[union-attr]


def test_renew_keeps_the_token_and_extends(tmp_path: Path, clock: Clock) -> None:
    a, b = pair(tmp_path, clock)
    a.acquire_or_renew()
    for _ in range(5):
        clock.now += 2.0  # within the TTL each time
        assert a.acquire_or_renew() and a.token == 1
        assert not b.acquire_or_renew()
    assert on_disk(tmp_path)["expires_at"] == clock.now + 3.0


def test_expiry_lets_the_other_take_over_with_a_new_token(tmp_path: Path, clock: Clock) -> None:
    a, b = pair(tmp_path, clock)
    a.acquire_or_renew()
    clock.now += 2.99
    assert not b.acquire_or_renew()
    clock.now += 0.01  # expired exactly
    assert b.acquire_or_renew() and b.token == 2
    assert not a.acquire_or_renew() and a.token is None
    clock.now += 3.0
    assert a.acquire_or_renew() and a.token == 3  # every change of holder: +1
    assert on_disk(tmp_path)["holder"] == "ctl1"


def test_the_lease_carries_the_audit_head_from_holder_to_holder(tmp_path: Path, clock: Clock) -> None:
    """Issue 44, finding 5: a record of where the audit log ends outside the log and the state. Each renewal writes
    the holder's latest; a new term carries the last holder's, never the taker's own older one; a release keeps it."""
    a, b = pair(tmp_path, clock)
    a.acquire_or_renew()
    assert "audit_head" not in on_disk(tmp_path)  # (nothing saved yet)
    a.audit_head = RecordedHead(7, "h7", "m7")
    clock.now += 1.0
    assert a.renew(1)
    assert on_disk(tmp_path)["audit_head"] == {"seq": 7, "hash": "h7", "mac": "m7"}
    clock.now += 3.0  # a stops; b's term carries a's record
    assert b.acquire_or_renew() and b.audit_head == RecordedHead(7, "h7", "m7")
    b.audit_head = RecordedHead(9, "h9", "m9")
    b.release()
    assert on_disk(tmp_path)["audit_head"]["seq"] == 9 and b.read().audit_head == RecordedHead(9, "h9", "m9")  # type: ignore[union-attr]
    assert a.acquire_or_renew() and a.audit_head == RecordedHead(9, "h9", "m9")  # not its own older seq 7
    (tmp_path / "lease.json").write_text(json.dumps(on_disk(tmp_path) | {"audit_head": {"seq": "x"}}))
    assert a.read().audit_head is None  # type: ignore[union-attr]  # (damaged: as a lease from before it)


def test_a_restarted_process_with_the_same_name_gets_a_new_token(tmp_path: Path, clock: Clock) -> None:
    a, _ = pair(tmp_path, clock)
    a.acquire_or_renew()
    again = Lease(tmp_path, "ctl1", clock=clock)  # the same controller, restarted: it never held token 1
    assert again.acquire_or_renew() and again.token == 2
    with pytest.raises(LeaseLost):
        a.check(1)


# --- fencing ----------------------------------------------------------------------------------------------------
def test_check_raises_for_a_deposed_leader(tmp_path: Path, clock: Clock) -> None:
    a, b = pair(tmp_path, clock)
    a.acquire_or_renew()
    a.check(1)
    clock.now += 3.0
    b.acquire_or_renew()
    with pytest.raises(LeaseLost, match=r"ctl1 with token 1 is not the leader.*ctl2 \(token 2\)"):
        a.check(1)
    assert a.token is None
    b.check(2)
    with pytest.raises(LeaseLost):
        b.check(1)  # the right holder, the wrong term


def test_check_raises_within_the_margin(tmp_path: Path, clock: Clock) -> None:
    a, _ = pair(tmp_path, clock)
    a.acquire_or_renew()
    clock.now += 2.4  # 0.6 s left
    a.check(1)
    clock.now += 0.2  # 0.4 s left, margin 0.5
    with pytest.raises(LeaseLost, match="under the margin"):
        a.check(1)
    clock.now += 1.0  # expired: still nobody else's
    with pytest.raises(LeaseLost):
        a.check(1)


def test_check_raises_without_a_lease_file(tmp_path: Path, clock: Clock) -> None:
    a, _ = pair(tmp_path, clock)
    with pytest.raises(LeaseLost, match="nobody"):
        a.check(1)


def test_fenced_holds_the_lock_against_another_thread(tmp_path: Path, clock: Clock) -> None:
    a, b = pair(tmp_path, clock)
    a.acquire_or_renew()
    inside, hold = threading.Event(), 0.3
    done: dict[str, float] = {}

    def leader() -> None:
        with a.fenced(1):
            inside.set()
            time.sleep(hold)
            done["leader_out"] = time.monotonic()

    def other() -> None:
        inside.wait(5)
        started = time.monotonic()
        clock.now += 10  # a's lease has expired: b would take it at once if it could get the lock
        done["took"] = float(b.acquire_or_renew())
        done["waited"] = time.monotonic() - started
        done["other_out"] = time.monotonic()

    threads = [threading.Thread(target=leader), threading.Thread(target=other)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert not any(t.is_alive() for t in threads)
    assert done["took"] == 1.0
    assert done["waited"] >= hold - 0.05  # blocked on the flock until the leader's write was done
    assert done["other_out"] >= done["leader_out"]


def test_fenced_refuses_before_yielding(tmp_path: Path, clock: Clock) -> None:
    a, b = pair(tmp_path, clock)
    a.acquire_or_renew()
    clock.now += 3
    b.acquire_or_renew()
    ran = []
    with pytest.raises(LeaseLost), a.fenced(1):
        ran.append(1)
    assert ran == []


# --- a damaged lease file ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "garbage", ["not json {", "", "[]", "null", '{"holder": "ctl2"}', '{"holder": "x", "token": "y"}']
)
def test_corrupt_lease_is_free_but_the_token_never_goes_back(tmp_path: Path, clock: Clock, garbage: str) -> None:
    a, b = pair(tmp_path, clock)
    assert a.acquire_or_renew() and a.token == 1
    clock.now += 3
    assert b.acquire_or_renew() and b.token == 2
    (tmp_path / "lease.json").write_text(garbage)
    assert a.read() is None
    assert a.acquire_or_renew()  # treated as free
    assert a.token is not None and a.token > 2
    # Fencing: a deposed term of ctl1 (token 1) must not pass as the new one.
    with pytest.raises(LeaseLost):
        a.check(1)
    with pytest.raises(LeaseLost):
        b.check(2)
    a.check(a.token)


def test_corrupt_lease_seen_by_a_fresh_process_keeps_the_token_growing(tmp_path: Path, clock: Clock) -> None:
    a, b = pair(tmp_path, clock)
    a.acquire_or_renew()
    clock.now += 3
    b.acquire_or_renew()
    (tmp_path / "lease.json").write_text("\x00\x00")
    fresh = Lease(tmp_path, "ctl1", clock=clock)  # knows nothing from memory
    assert fresh.acquire_or_renew() and fresh.token == 3


def test_release_frees_the_lease(tmp_path: Path, clock: Clock) -> None:
    a, b = pair(tmp_path, clock)
    a.acquire_or_renew()
    b.release()  # not the holder: changes nothing
    assert on_disk(tmp_path)["holder"] == "ctl1"
    a.release()
    assert a.token is None
    assert on_disk(tmp_path) == {"holder": "", "token": 1, "expires_at": 0}
    assert b.acquire_or_renew() and b.token == 2  # at once, no waiting for the TTL
    with pytest.raises(LeaseLost):
        a.check(1)


# --- the state store --------------------------------------------------------------------------------------------
def test_save_needs_the_current_token(tmp_path: Path, clock: Clock) -> None:
    a, b = pair(tmp_path, clock)
    a.acquire_or_renew()
    path = tmp_path / "state.json"
    store_a, store_b = StateStore(DirectoryDocuments(tmp_path), a), StateStore(DirectoryDocuments(tmp_path), b)
    state = ControllerState(nodes={"n1": NodeRecord(name="n1", pool="p")})
    store_a.save(state, 1)
    saved = path.read_bytes()
    assert store_b.load() == state
    clock.now += 3
    b.acquire_or_renew()
    state.nodes["n1"].reason = "written by a deposed leader"
    with pytest.raises(LeaseLost):
        store_a.save(state, 1)
    assert path.read_bytes() == saved
    with pytest.raises(LeaseLost):
        store_b.save(state, 1)  # the holder, with a stale token
    assert path.read_bytes() == saved
    store_b.save(state, 2)
    assert read_state(path).nodes["n1"].reason == "written by a deposed leader"


def test_load_missing_gives_a_fresh_state(tmp_path: Path, clock: Clock) -> None:
    a, _ = pair(tmp_path, clock)
    state = StateStore(DirectoryDocuments(tmp_path / "nope"), a).load()
    assert state == ControllerState()
    assert state.nodes == {} and state.next_intent == 1


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("{not json", "unreadable"),
        ("", "unreadable"),
        ('{"version": 99, "nodes": {}}', "version 99, expected 2"),
        ("{}", "version None"),
        ("[1, 2]", "state.json"),
        ("null", "state.json"),
        ('{"version": 1, "nodes": {"n1": {"name": "n1"}}}', "state.json"),
    ],
)
def test_load_refuses_a_damaged_file_naming_it(tmp_path: Path, clock: Clock, content: str, match: str) -> None:
    a, _ = pair(tmp_path, clock)
    path = tmp_path / "state.json"
    path.write_text(content)
    with pytest.raises(StateError, match=match) as info:
        StateStore(DirectoryDocuments(tmp_path), a).load()
    assert str(path) in str(info.value)
    assert info.value.exit_code == 3


# --- across hosts: each term claimed once, no lock held on the shared storage -----------------------------------
def claim_from_another_host(directory: Path, token: int, holder: str = "ctl2") -> None:
    """What a controller on another host leaves after claiming a term, before it writes the lease."""
    (directory / "terms").mkdir(exist_ok=True)
    (directory / "terms" / str(token)).write_text(json.dumps({"holder": holder, "at": 0}))


def test_a_term_claimed_elsewhere_is_never_issued_again(tmp_path: Path, clock: Clock) -> None:
    a, _ = pair(tmp_path, clock)
    assert a.acquire_or_renew() and a.token == 1
    clock.now += 3.0
    claim_from_another_host(tmp_path, 2)  # ctl2 won term 2 but has not written the lease yet
    assert a.acquire_or_renew() and a.token == 3  # the next free term, not 2
    assert json.loads((tmp_path / "terms" / "3").read_text())["holder"] == "ctl1"


def test_a_later_claim_deposes_the_holder_before_its_lease_says_so(tmp_path: Path, clock: Clock) -> None:
    a, _ = pair(tmp_path, clock)
    a.acquire_or_renew()
    claim_from_another_host(tmp_path, 2)  # its renewal raced a takeover: the lease may still name ctl1
    with pytest.raises(LeaseLost, match="claimed term 2"):
        a.check(1)
    assert a.token is None
    assert a.acquire_or_renew() and a.token == 3  # it may lead again, in a term of its own


def test_two_claimants_of_one_term_one_wins(tmp_path: Path, clock: Clock) -> None:
    a, b = pair(tmp_path, clock)
    assert a._claim(7) and not b._claim(7)
    assert json.loads((tmp_path / "terms" / "7").read_text())["holder"] == "ctl1"
    assert [p.name for p in (tmp_path / "terms").iterdir()] == ["7"]  # no temporary file left behind


def test_no_lock_is_left_on_the_shared_storage_and_old_claims_go(tmp_path: Path, clock: Clock) -> None:
    a, b = pair(tmp_path, clock)
    for _ in range(40):
        clock.now += 3.0
        assert (a if clock.now % 2 else b).acquire_or_renew()
    assert not list(tmp_path.glob("*.lock"))
    claims = sorted(int(p.name) for p in (tmp_path / "terms").iterdir())
    assert claims[-1] == 40 and len(claims) <= 16 + 8


def test_controller_status_from_the_shared_state_names_the_lease_holder(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from ha_ops.cli.main import app

    a, b = pair(tmp_path, Clock(time.time()))
    assert a.acquire_or_renew() and not b.acquire_or_renew()
    StateStore(DirectoryDocuments(tmp_path), a).save(ControllerState(), 1)
    done = CliRunner().invoke(app, ["controller", "status", "--state-dir", str(tmp_path)], catch_exceptions=False)
    assert done.exit_code == 0 and "lease: ctl1 (token 1)" in done.output, done.output
