"""`ha-ops controller state list|restore` as a user runs it (the console entry point in-process, for its exit codes):
0 restored, or what a dry run would do with nothing changed; 2 for a missing, damaged, foreign or older snapshot and
for bad options, naming it, nothing changed; 1 when refused (the lease held, the chain unverifiable)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from ha_ops.remediation import restore
from ha_ops.remediation.lease import Lease
from tests.unit.cli_helpers import run_main
from tests.unit.state_history import GARBAGE, History, history, restored

Capture = pytest.CaptureFixture[str]


@pytest.fixture
def h(tmp_path: Path) -> History:
    return history(tmp_path)


def restore_cmd(h: History, *args: str) -> list[str]:
    return ["controller", "state", "restore", "--state-dir", str(h.dir),
            "--audit-key-file", str(h.dir.parent / "audit.key"), *args]  # fmt: skip


def test_list_shows_the_snapshots_and_which_is_at_the_head(h: History, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: Capture) -> None:  # fmt: skip
    assert run_main(monkeypatch, "controller", "state", "list", "--state-dir", str(h.dir), "--json") == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(s["id"], s["at_head"]) for s in listed["snapshots"]] == [(h.first.id, False), (h.at_head.id, True)]
    assert listed["audit_head_seq"] == h.head_seq and listed["damaged"] == {}
    assert run_main(monkeypatch, "controller", "state", "list", "--state-dir", str(h.dir)) == 0
    assert h.at_head.id in capsys.readouterr().out


def test_restore_puts_back_the_snapshot_at_the_head(h: History, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: Capture) -> None:  # fmt: skip
    assert run_main(monkeypatch, *restore_cmd(h)) == 0
    said = capsys.readouterr().out
    assert f"restored {h.dir / 'state.json'} from snapshot {h.at_head.id}, at audit seq {h.head_seq}" in said
    assert "it is kept as " + str(h.dir / "state.json.damaged-") in said
    assert restored(h)


def test_a_dry_run_says_what_it_would_do_and_changes_nothing(h: History, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: Capture) -> None:  # fmt: skip
    before = h.files()
    assert run_main(monkeypatch, *restore_cmd(h, "--dry-run", "--json")) == 0
    planned = json.loads(capsys.readouterr().out)
    assert (planned["dry_run"], planned["source"], planned["audit_seq"]) == (True, h.at_head.id, h.head_seq)
    assert planned["kept"].startswith(str(h.dir / "state.json.damaged-"))
    assert run_main(monkeypatch, *restore_cmd(h, "--dry-run")) == 0
    assert "would restore" in capsys.readouterr().out
    assert h.files() == before


@pytest.mark.parametrize("case", ["missing", "damaged", "foreign", "older"])
def test_a_bad_snapshot_exits_2_naming_it_and_changes_nothing(
    h: History, monkeypatch: pytest.MonkeyPatch, capsys: Capture, tmp_path: Path, case: str
) -> None:
    (h.dir / "snapshots" / "slot-09.json").write_text("{not a snapshot\n")
    config = tmp_path / "other.yaml"  # another cluster's controller config, over this state folder
    config.write_text(yaml.safe_dump({"id": "ctl9", "state_dir": str(h.dir), "pools": {"p": {"nodes": ["x1"]}},
                                      "audit_key_file": str(tmp_path / "audit.key"), "insecure": True}))  # fmt: skip
    args = {
        "missing": restore_cmd(h, "--from", "0000000042-nope"),
        "damaged": restore_cmd(h, "--from", "slot-09"),
        "foreign": ["controller", "state", "restore", "--config", str(config), "--from", h.at_head.id],
        "older": restore_cmd(h, "--from", h.first.id),
    }[case]
    before = h.files()
    assert run_main(monkeypatch, *args) == 2
    said = capsys.readouterr().err
    named = {"missing": "0000000042-nope: no such snapshot", "damaged": f"{h.dir}/snapshots/slot-09.json: damaged",
             "foreign": "another cluster's: it names nodes this config does not have: n1, n2, n3, n4, s1",
             "older": f"at audit seq 0, older than the audit log's head (seq {h.head_seq})"}[case]  # fmt: skip
    assert named in said.replace("\n", " "), said
    assert h.files() == before


def test_refusals_exit_1_naming_why(h: History, monkeypatch: pytest.MonkeyPatch, capsys: Capture) -> None:
    monkeypatch.setattr(restore, "LEASE_WAIT_S", 0.2)
    Lease(h.dir, "ctl2", 30.0).acquire_or_renew()  # a live controller's lease (on the real clock)
    before = h.files()
    assert run_main(monkeypatch, *restore_cmd(h)) == 1
    assert "a controller holds the lease: ctl2 (token" in capsys.readouterr().err
    assert run_main(monkeypatch, *restore_cmd(h, "--dry-run")) == 1  # the dry run says the same
    assert "a controller holds the lease: ctl2" in capsys.readouterr().err
    assert h.files() == before and (h.dir / "state.json").read_text() == GARBAGE


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--from", "x", "--rebuild-from-audit"], "--from: give --from SNAPSHOT or --rebuild-from-audit, not both"),
        (["--state-dir", "/nonexistent/ha-ops"], "--state-dir: /nonexistent/ha-ops: not a folder"),
        ([], "--state-dir: give --state-dir DIR or --config FILE"),
        (["--state-dir", "DIR"], "--audit-key-file: the audit log's entries are keyed: give the audit key"),
    ],
)
def test_bad_options_exit_2_naming_them(
    h: History, monkeypatch: pytest.MonkeyPatch, capsys: Capture, args: list[str], named: str
) -> None:
    base = ["--state-dir", str(h.dir)] if args and args[0] == "--from" else []
    args = [str(h.dir) if a == "DIR" else a for a in args]
    before = h.files()
    assert run_main(monkeypatch, "controller", "state", "restore", *base, *args) == 2
    assert named in capsys.readouterr().err
    assert h.files() == before


def test_status_of_a_blocked_standby_says_why(h: History, monkeypatch: pytest.MonkeyPatch, capsys: Capture) -> None:
    from ha_ops.cli import controller as cli
    from ha_ops.remediation.server import public_state
    from tests.unit.state_history import keyed_rig

    standby = keyed_rig(h.dir.parent, "ctl2", h.rig.clock)
    standby.c.lease_step()  # cannot load the damaged state
    monkeypatch.setattr(cli, "call", lambda url, files=None: public_state(standby.c.describe()))
    assert run_main(monkeypatch, "controller", "status", "--url", "http://ctl2:8800") == 0
    said = capsys.readouterr()
    assert "ctl2 is standby" in said.out
    assert f"it cannot take over (state, 1 attempt(s)): controller state {h.dir / 'state.json'} is unreadable" in (
        said.err.replace("\n", " ")
    )
