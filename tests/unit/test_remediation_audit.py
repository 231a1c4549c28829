"""The hash-chained audit log (ha_ops.remediation.audit) and `ha-ops audit verify`: every kind of tampering is
named by line; a cut-off tail is caught against the head recorded in the controller's state."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from ha_ops.cli.main import main
from ha_ops.remediation.audit import GENESIS, AuditHead, AuditLog, _digest, verify
from ha_ops.remediation.documents import DirectoryDocuments
from ha_ops.remediation.model import ControllerState


def write_log(path: Path, count: int = 4) -> AuditLog:
    log = AuditLog.at(path)
    for i in range(1, count + 1):
        log.append(
            at=100.0 + i,
            who="ctl1 (token 3)",
            what="drain" if i % 2 else "resume",
            node=f"n{i}",
            why=f"reason {i}",
            before="IDLE",
            after="IDLE+DRAIN; drained",
            intent=f"0000000{i}-n{i}-drain" if i != 2 else None,
        )
    return log


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def put(path: Path, entries: list[str]) -> None:
    path.write_text("".join(f"{e}\n" for e in entries))


@pytest.fixture
def log_path(tmp_path: Path) -> Path:
    path = tmp_path / "audit.jsonl"
    write_log(path)
    return path


# --- the log ----------------------------------------------------------------------------------------------------
def test_empty_log(tmp_path: Path) -> None:
    log = AuditLog.at(tmp_path / "none" / "audit.jsonl")
    assert log.head() == AuditHead(0, GENESIS)
    assert log.intents() == set()
    head = log.append(at=1.0, who="me", what="breaker_reset", node=None, why="test")
    assert head.seq == 1 and log.head() == head
    assert verify(tmp_path / "none" / "audit.jsonl") == []


def test_append_chains_and_head_follows(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = write_log(path, 3)
    entries = [json.loads(line) for line in lines(path)]
    assert [e["seq"] for e in entries] == [1, 2, 3]
    assert entries[0]["prev"] == GENESIS
    assert entries[1]["prev"] == entries[0]["hash"] and entries[2]["prev"] == entries[1]["hash"]
    assert all(e["hash"] == _digest(e) for e in entries)
    assert set(entries[0]) == {"seq", "at", "who", "what", "node", "why", "before", "after", "intent", "prev", "hash"}
    assert log.head() == AuditHead(3, entries[2]["hash"])
    assert log.intents() == {"00000001-n1-drain", "00000003-n3-drain"}
    path.write_text(path.read_text() + "\n\n")  # blank lines are not entries
    assert log.head() == AuditHead(3, entries[2]["hash"])
    assert verify(path) == []


def test_intact_log_verifies(log_path: Path) -> None:
    assert verify(log_path) == []
    assert verify(log_path, AuditLog.at(log_path).head()) == []


def test_changed_field(log_path: Path) -> None:
    entries = lines(log_path)
    entry = json.loads(entries[1])
    entry["why"] = "nothing to see here"
    entries[1] = json.dumps(entry, sort_keys=True)
    put(log_path, entries)
    assert verify(log_path) == ["line 2: content does not match its hash (changed)"]


def test_changed_field_with_its_hash_recomputed_breaks_the_next_link(log_path: Path) -> None:
    entries = lines(log_path)
    entry = json.loads(entries[1])
    entry["node"] = "n9"
    entry["hash"] = _digest(entry)
    entries[1] = json.dumps(entry, sort_keys=True)
    put(log_path, entries)
    assert verify(log_path) == ["line 3: does not chain to the previous entry (removed or changed before it)"]


def test_removed_middle_line(log_path: Path) -> None:
    entries = lines(log_path)
    del entries[1]
    put(log_path, entries)
    problems = verify(log_path)
    assert "line 2: seq 3 follows 1 (an entry is missing or moved)" in problems
    assert "line 2: does not chain to the previous entry (removed or changed before it)" in problems
    assert all(p.startswith("line 2:") for p in problems)  # line 3 (seq 4) follows seq 3 correctly


def test_swapped_lines(log_path: Path) -> None:
    entries = lines(log_path)
    entries[1], entries[2] = entries[2], entries[1]
    put(log_path, entries)
    problems = verify(log_path)
    assert any(p.startswith("line 2: seq 3 follows 1") for p in problems)
    assert any(p.startswith("line 3: seq 2 follows 3") for p in problems)


def test_inserted_forged_line(log_path: Path) -> None:
    entries = lines(log_path)
    first = json.loads(entries[0])
    forged = {
        "seq": 2, "at": 101.5, "who": "ctl1 (token 3)", "what": "resume", "node": "n7", "why": "forged",
        "before": None, "after": None, "intent": None, "prev": first["hash"],
    }  # fmt: skip
    forged["hash"] = _digest(forged)  # a well-formed entry that chains to line 1
    entries.insert(1, json.dumps(forged, sort_keys=True))
    put(log_path, entries)
    problems = verify(log_path)
    assert problems
    assert not any(p.startswith("line 2:") for p in problems)  # the forgery itself looks fine...
    assert "line 3: seq 2 follows 2 (an entry is missing or moved)" in problems  # ...the next line does not
    assert "line 3: does not chain to the previous entry (removed or changed before it)" in problems


def test_truncated_tail_is_caught_only_against_the_recorded_head(log_path: Path) -> None:
    head = AuditLog.at(log_path).head()
    put(log_path, lines(log_path)[:-1])
    assert verify(log_path) == []  # a prefix of a valid chain is a valid chain
    problems = verify(log_path, head)
    assert len(problems) == 1
    assert "ends at seq 3" in problems[0] and "records seq 4" in problems[0]


def test_invalid_json_line(log_path: Path) -> None:
    entries = lines(log_path)
    entries[1] = entries[1][:40]  # torn
    put(log_path, entries)
    problems = verify(log_path)
    assert problems == ["line 2: not valid JSON"]  # line 3 is not blamed for what line 2 lost


@pytest.mark.parametrize("junk", ["[1, 2]", "42", "null", '"text"', '{"seq": "x"}', '{"seq": null}'])
def test_valid_json_that_is_no_entry_is_reported_not_a_crash(log_path: Path, junk: str) -> None:
    entries = lines(log_path)
    entries[1] = junk
    put(log_path, entries)
    problems = verify(log_path)
    assert problems and problems[0].startswith("line 2:")
    if not junk.startswith("{"):
        assert problems == [problems[0]] and "not an audit entry" in problems[0]
    assert not any(p.startswith("line 4:") for p in problems)  # seq counting goes on


def test_unreadable_file(tmp_path: Path) -> None:
    assert verify(tmp_path / "missing.jsonl") == [
        f"{tmp_path / 'missing.jsonl'}: cannot read (No such file or directory)"
    ]


# --- ha-ops audit verify ----------------------------------------------------------------------------------------
def run_cli(monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    monkeypatch.setattr(sys, "argv", ["ha-ops", "audit", "verify", *args])
    try:
        main()
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def state_file(tmp_path: Path, head: AuditHead) -> Path:
    path = tmp_path / "state.json"
    path.write_text(ControllerState(audit_seq=head.seq, audit_hash=head.hash).model_dump_json())
    return path


def test_cli_intact(
    log_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    assert run_cli(monkeypatch, str(log_path)) == 0
    assert "4 entries, chain intact" in capsys.readouterr().out
    state = state_file(tmp_path, AuditLog.at(log_path).head())
    assert run_cli(monkeypatch, str(log_path), "--state", str(state)) == 0
    assert "matching the controller's state" in capsys.readouterr().out


def test_cli_json(log_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    assert run_cli(monkeypatch, str(log_path), "--json") == 0
    data = json.loads(capsys.readouterr().out)
    assert data == {"file": str(log_path), "entries": 4, "intact": True, "problems": []}


def test_cli_broken_chain_exits_1(
    log_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    entries = lines(log_path)
    del entries[2]
    put(log_path, entries)
    assert run_cli(monkeypatch, str(log_path)) == 1
    assert "line 3: seq 4 follows 2" in capsys.readouterr().err
    assert run_cli(monkeypatch, str(log_path), "--json") == 1
    data = json.loads(capsys.readouterr().out)
    assert data["intact"] is False and data["entries"] == 3 and data["problems"]


def test_cli_truncated_tail_against_the_state(
    log_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    state = state_file(tmp_path, AuditLog.at(log_path).head())
    put(log_path, lines(log_path)[:-2])
    assert run_cli(monkeypatch, str(log_path)) == 0
    capsys.readouterr()
    assert run_cli(monkeypatch, str(log_path), "--state", str(state)) == 1
    assert "records seq 4" in capsys.readouterr().err


def test_cli_junk_line_exits_1_not_internal_error(
    log_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    entries = lines(log_path)
    entries[0] = "[]"
    put(log_path, entries)
    assert run_cli(monkeypatch, str(log_path)) == 1
    assert "internal error" not in capsys.readouterr().err


def test_cli_missing_file_exits_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    assert run_cli(monkeypatch, str(tmp_path / "nope.jsonl")) == 1
    assert "cannot read" in capsys.readouterr().err


def test_no_log_yet_with_a_state_at_seq_0_is_intact(tmp_path: Path) -> None:
    from ha_ops.remediation.audit import GENESIS, AuditHead, verify

    assert verify(tmp_path / "audit.jsonl", AuditHead(0, GENESIS)) == []
    assert verify(tmp_path / "audit.jsonl", AuditHead(3, "x" * 64)) != []


def test_a_second_writer_is_seen_by_a_log_that_cached_its_head(tmp_path: Path) -> None:
    from ha_ops.remediation.audit import AuditLog

    path = tmp_path / "audit.jsonl"
    mine, theirs = AuditLog.at(path), AuditLog.at(path)
    mine.append(at=1.0, who="ctl1", what="drain", node="n1", why="x", intent="i1")
    assert mine.head().seq == 1 and theirs.head().seq == 1
    theirs.append(at=2.0, who="ctl2", what="resume", node="n1", why="y", intent="i2")
    assert mine.head().seq == 2 and mine.intents() == {"i1", "i2"}
    assert verify(path) == []


def test_a_torn_last_line_loses_no_other_entry(log_path: Path) -> None:
    """A crash mid-append leaves half a line with no newline: the next append starts a line of its own, so it is
    whole and chains to the last whole entry; only the torn line is named."""
    whole = lines(log_path)
    torn = whole[-1][: len(whole[-1]) // 2]
    log_path.write_text("".join(f"{line}\n" for line in whole[:-1]) + torn)  # the 4th entry was being written
    log = AuditLog.at(log_path)
    head = log.append(at=200.0, who="ctl2 (token 4)", what="drain", node="n9", why="after the crash")
    after = lines(log_path)
    assert after[:3] == whole[:3] and after[3] == torn
    entry = json.loads(after[4])
    assert entry["node"] == "n9" and entry["seq"] == 4 and entry["prev"] == json.loads(whole[2])["hash"]
    assert head == AuditHead(4, entry["hash"])
    assert verify(log_path) == ["line 4: not valid JSON", "line 5: seq 4 follows 4 (an entry is missing or moved)"]


# --- the keyed chain (HMAC) -------------------------------------------------------------------------------------
KEY = b"k" * 32


def keyed_log(path: Path) -> AuditLog:
    log = AuditLog.at(path, KEY)
    for i in range(1, 5):
        log.append(at=100.0 + i, who="ctl1 (token 3)", what="drain", node=f"n{i}", why=f"reason {i}")
    return log


def rechain_without_the_key(entries: list[dict]) -> list[str]:
    """What someone who can write the log but not read the key can do: fix every seq, prev and hash (SHA-256)."""
    out, prev = [], GENESIS
    for seq, entry in enumerate(entries, start=1):
        entry = {k: v for k, v in entry.items() if k not in ("hash", "mac")} | {"seq": seq, "prev": prev}
        entry["hash"] = prev = _digest(entry)
        out.append(json.dumps(entry, sort_keys=True))
    return out


@pytest.mark.parametrize("tamper", ["edit", "remove", "reorder", "truncate"])
def test_tampering_and_rechaining_without_the_key_is_detected(tmp_path: Path, tamper: str) -> None:
    path = tmp_path / "audit.jsonl"
    head = keyed_log(path).head()
    assert verify(path, head, KEY) == [] and json.loads(lines(path)[0])["mac"] == "hmac-sha256"
    entries = [json.loads(line) for line in lines(path)]
    if tamper == "edit":
        entries[1]["why"] = "nothing happened here"
    elif tamper == "remove":
        del entries[1]
    elif tamper == "reorder":
        entries[1], entries[2] = entries[2], entries[1]
    else:
        entries = entries[:2]
    put(path, rechain_without_the_key(entries))
    assert verify(path) == []  # a plain SHA-256 chain, recomputed: intact to anyone without the key
    problems = verify(path, head, KEY)
    assert "line 1: not keyed (written or rewritten without the audit key)" in problems, problems
    keyed_rewrite = [json.loads(line) | {"mac": "hmac-sha256"} for line in lines(path)]
    put(path, [json.dumps(e, sort_keys=True) for e in keyed_rewrite])  # claiming a key it does not have
    assert "line 1: content does not match its hash (changed)" in verify(path, head, KEY)


def test_a_keyed_log_without_the_key_checks_the_links_only(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    keyed_log(path)
    assert verify(path) == []
    entries = lines(path)
    put(path, [entries[0], entries[2], entries[3]])
    assert "line 2: does not chain to the previous entry (removed or changed before it)" in verify(path)
    other_key = b"another key, also 32 bytes long!"
    assert verify(path, key=other_key)[0] == "line 1: content does not match its hash (changed)"


def test_a_takeover_goes_on_from_the_states_head_when_the_log_was_cut(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    head = keyed_log(path).head()
    put(path, lines(path)[:2])  # the tail cut off
    successor = AuditLog.at(path, KEY)
    problems, _ = successor.resume(head)
    assert problems and "records seq 4 but the log ends at seq 2" in problems[0]
    successor.append(at=300.0, who="ctl2 (token 4)", what="audit_chain_broken", node=None, why=problems[0])
    after = [json.loads(line) for line in lines(path)]
    assert (after[-1]["seq"], after[-1]["prev"]) == (5, head.hash)  # not 3 after the cut: the state's head stands
    assert "line 3: seq 5 follows 2 (an entry is missing or moved)" in verify(path, key=KEY)


def test_a_log_that_runs_past_the_states_head_is_intact(tmp_path: Path) -> None:
    # A leader appended, then stopped before it wrote the state: the log is ahead, never short.
    path = tmp_path / "audit.jsonl"
    log = keyed_log(path)
    recorded = log.head()
    log.append(at=200.0, who="ctl1 (token 3)", what="resume", node="n1", why="after the last save")
    assert AuditLog.at(path, KEY).resume(recorded)[0] == [] and verify(path, recorded, KEY) == []


def test_an_audit_key_is_read_whole_and_refused_short_or_missing(tmp_path: Path) -> None:
    from ha_ops.errors import SpecError
    from ha_ops.remediation.audit import read_key

    (tmp_path / "key").write_bytes(KEY + b"\n")
    assert read_key(tmp_path / "key") == KEY
    (tmp_path / "short").write_bytes(b"abc")
    with pytest.raises(SpecError, match=r"audit_key_file: .*needs at least 32 bytes, it has 3"):
        read_key(tmp_path / "short")
    with pytest.raises(SpecError, match=r"audit_key_file: .*cannot read"):
        read_key(tmp_path / "none")


class CountedReads(DirectoryDocuments):
    """Files, counting every read of the log or its version."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.reads = 0

    def read(self, name: str) -> str | None:
        self.reads += 1
        return super().read(name)

    def version(self, name: str) -> Any:
        self.reads += 1
        return super().version(name)


def test_a_leader_appends_onto_the_head_it_wrote_without_reading_the_log_again(tmp_path: Path) -> None:
    """From its takeover (resume) the leader is the only writer: its appends chain onto the head as written, and a
    storm's appends cost no reads of the log (a ConfigMap log's last segment, read several times per append)."""
    write_log(tmp_path / "audit.jsonl", 2)
    docs = CountedReads(tmp_path)
    leader = AuditLog(docs)
    assert leader.resume(AuditHead(2, leader.head().hash))[0] == []
    docs.reads = 0
    leader.append_many([{"at": 1.0, "who": "ctl2 (token 4)", "what": "drain", "node": f"n{i}"} for i in range(3)])
    leader.append(at=2.0, who="ctl2 (token 4)", what="resume", node="n0", why="validated")
    assert docs.reads == 0
    assert leader.head_as_written().seq == 6
    assert verify(tmp_path / "audit.jsonl", leader.head_as_written()) == []


def test_cli_a_keyed_log_checked_without_its_key_exits_1_saying_its_hmacs_were_not_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    # Issue 44, finding 6: an edited keyed entry whose hash was left alone still chains; without the key nothing
    # can tell, so "chain intact" would be a lie.
    key = b"k" * 32
    path = tmp_path / "audit.jsonl"
    log = AuditLog.at(path, key=key)
    for n in range(3):
        log.append(at=float(n), who="ctl1", what="drain", node=f"n{n}", why="x", intent=f"i{n}")
    entries = lines(path)
    entries[1] = json.dumps(json.loads(entries[1]) | {"why": "nothing happened"}, sort_keys=True)
    put(path, entries)
    assert run_cli(monkeypatch, str(path)) == 1
    err = capsys.readouterr().err
    assert "3 keyed entries (HMAC-SHA256) whose HMACs were not checked" in err and "chain intact" not in err
    assert run_cli(monkeypatch, str(path), "--json") == 1
    data = json.loads(capsys.readouterr().out)
    assert data["hmacs_unchecked"] == 3 and data["problems"] == []
    (tmp_path / "key").write_bytes(key)
    assert run_cli(monkeypatch, str(path), "--key-file", str(tmp_path / "key")) == 1
    assert "line 2: content does not match its hash (changed)" in capsys.readouterr().err


@pytest.mark.parametrize("cut", ["tail", "tail and the state's head", "log deleted"])
def test_the_cuts_of_a_keyed_log_are_named_against_the_keyed_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, cut: str
) -> None:
    """Issue 44, finding 5: the state's record of the head carries the audit key's HMAC (audit.head_mac), so
    pointing the state at the last entry kept after a tail cut is named too, not "chain intact and matching"."""
    from ha_ops.remediation.audit import head_mac

    path = tmp_path / "audit.jsonl"
    (tmp_path / "key").write_bytes(KEY)
    head = keyed_log(path).head()
    state = tmp_path / "state.json"
    state.write_text(ControllerState(audit_seq=head.seq, audit_hash=head.hash,
                                     audit_head_mac=head_mac(head, KEY)).model_dump_json())  # fmt: skip
    args = [str(path), "--state", str(state), "--key-file", str(tmp_path / "key")]
    assert run_cli(monkeypatch, *args) == 0  # (intact and keyed: nothing to name)
    assert "chain intact and matching the controller's state" in capsys.readouterr().out
    kept = lines(path)[:-3]
    if cut == "log deleted":
        path.unlink()
    else:
        put(path, kept)
    if cut == "tail and the state's head":
        last = json.loads(kept[-1])
        data = json.loads(state.read_text()) | {"audit_seq": last["seq"], "audit_hash": last["hash"]}
        state.write_text(json.dumps(data))
    assert run_cli(monkeypatch, *args) == 1
    err = capsys.readouterr().err
    said = {"tail": "records seq 4 but the log ends at seq 1", "log deleted": "cannot read",
            "tail and the state's head": "with an HMAC the audit key did not make"}[cut]  # fmt: skip
    assert said in err, err
