"""Fencing that heals, through the controller (issue 42): the fence's record is kept in the shared state, so that a
new leader finishes a heal its predecessor began; the heal's commands run and are audited with the record; a person
holds a host through the API and `ha-ops controller hold` (bad input: exit 2 naming it, nothing changed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from ha_ops.remediation.config import SlurmFence
from ha_ops.remediation.view import View, ViewStore
from tests.unit.cli_helpers import run_main
from tests.unit.test_remediation_controller import Clock, CutOffPrimary, Rig
from tests.unit.test_remediation_server import make_controller, serving

FENCE = SlurmFence(
    after_s=5,
    power_off_command="ha-ops power off {node} -i hosts.yml",
    power_on_command="ha-ops power on {node} -i hosts.yml",
    rejoin_timeout_s=60,
)
CUT = [("ctl1", "DOWN"), ("ctl2", "UP")]  # the primary cut off, the backup in standby
BACK = [("ctl1", "UP"), ("ctl2", "UP")]


def controller(tmp_path: Path, me: str, clock: Clock, ops: CutOffPrimary) -> Rig:
    rig = Rig(tmp_path, me, clock, update={"slurm_fence": FENCE})
    rig.executor.node_ops = ops  # type: ignore[attr-defined]
    return rig


def primary_controller_writes(rig: Rig) -> None:
    """ctl1's remediation controller (on the primary's host) writes its view, as it does at each lease step."""
    ViewStore(rig.c.documents, "ctl1").write(View(id="ctl1", at=rig.clock.now))


def test_a_new_leader_finishes_the_heal_of_a_primary_its_predecessor_fenced_and_never_fences_it_again(
    tmp_path: Path,
) -> None:
    clock, ops = Clock(), CutOffPrimary()
    a, b = controller(tmp_path, "ctl2", clock, ops), controller(tmp_path, "mon1", clock, ops)
    primary_controller_writes(a)
    a.c.lease_step()
    a.c.fencing.step(CUT)
    a.step(seconds=1.0, ticks=6)  # (renewing its lease)
    a.c.heard_from("n1")  # the silence is the primary's: an agent's report still arrives here
    a.c.fencing.step(CUT)
    assert ops.here == ["ha-ops power off ctl1 -i hosts.yml", "scontrol takeover"]
    record = a.state().fences["ctl1"]
    assert (record.phase, record.how, record.backup, record.controller) == ("fenced", "bmc", "ctl2", True)
    a.c.fencing.heal_step()
    assert len(ops.here) == 2  # inside the hand-back delay: nothing yet
    # The leader dies; the other controller takes the lease, with the record in the state it loads.
    clock.now += 16
    b.c.lease_step()
    assert b.c.is_leader
    b.c.fencing.step(CUT)
    b.c.heard_from("n1")
    b.step(seconds=1.0, ticks=6)
    b.c.fencing.step(CUT)  # its own fence watch finds the primary DOWN 6 s: the heal owns it, no second power off
    b.c.fencing.heal_step()
    assert ops.here[2:] == ["ha-ops power on ctl1 -i hosts.yml"]
    assert b.state().fences["ctl1"].phase == "rejoining"
    b.step(seconds=1.0, ticks=5)  # ctl1 boots: slurmctld answers, its remediation controller writes its view
    primary_controller_writes(b)
    b.c.lease_step()
    b.c.fencing.step(BACK)
    b.c.fencing.heal_step()
    assert b.state().fences["ctl1"].phase == "rejoined"
    steps = [(e["what"], e["node"], e["who"].split()[0]) for e in b.audit()]
    assert steps[-4:] == [("fence_slurmctld", "ctl1", "ctl2"), ("slurm_takeover", "ctl2", "ctl2"),
                          ("power_on", "ctl1", "mon1"), ("rejoined", "ctl1", "mon1")]  # fmt: skip
    assert len(ops.here) == 3


def test_a_controller_that_fenced_in_an_earlier_term_fences_the_primarys_next_outage(tmp_path: Path) -> None:
    # Seen in CI: ctl2's controller fenced the primary, lost the lease before it saw the primary answer again, and
    # the other controller healed it. Leading again, ctl2 kept the old outage in memory and never fenced the next one.
    clock, ops = Clock(), CutOffPrimary()
    a, b = controller(tmp_path, "ctl2", clock, ops), controller(tmp_path, "mon1", clock, ops)
    primary_controller_writes(a)
    a.c.lease_step()
    a.c.fencing.step(CUT)
    a.step(seconds=1.0, ticks=6)
    a.c.heard_from("n1")
    a.c.fencing.step(CUT)
    assert ops.here == ["ha-ops power off ctl1 -i hosts.yml", "scontrol takeover"]
    clock.now += 16  # ctl2's controller stalls; mon1's takes the lease and heals the primary
    b.c.lease_step()
    b.step(seconds=1.0, ticks=16)
    b.c.fencing.heal_step()
    primary_controller_writes(b)
    b.step(seconds=1.0, ticks=5)
    b.c.fencing.step(BACK)
    b.c.fencing.heal_step()
    assert b.state().fences["ctl1"].phase == "rejoined"
    clock.now += 16  # now mon1's stalls, and ctl2's leads again: the primary is cut off once more
    a.c.lease_step()
    assert a.c.is_leader
    a.c.fencing.step(CUT)
    a.step(seconds=1.0, ticks=6)
    a.c.heard_from("n1")
    a.c.fencing.step(CUT)
    assert ops.here[-2:] == ["ha-ops power off ctl1 -i hosts.yml", "scontrol takeover"]
    assert [e["what"] for e in a.audit()].count("fence_slurmctld") == 2


def test_a_held_host_stays_off_and_is_brought_back_once_released(tmp_path: Path) -> None:
    clock, ops = Clock(), CutOffPrimary()
    rig = controller(tmp_path, "ctl2", clock, ops)
    rig.c.lease_step()
    rig.c.fencing.step(CUT)
    rig.step(seconds=1.0, ticks=6)
    rig.c.heard_from("n1")
    rig.c.fencing.step(CUT)
    rig.c.hold_host("ctl1", False, "PSU replaced first", by="operator alice")
    rig.step(seconds=2.0, ticks=30)
    rig.c.fencing.heal_step()
    assert len(ops.here) == 2 and "held by a person" in rig.state().fences["ctl1"].note
    rig.c.hold_host("ctl1", True, "", by="operator alice")
    rig.c.fencing.heal_step()
    assert ops.here[-1] == "ha-ops power on ctl1 -i hosts.yml"
    assert [e["what"] for e in rig.audit()][-3:] == ["held", "released", "power_on"]


def test_hold_on_the_command_line_and_its_bad_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    from tests.unit.test_remediation_server import Clock as ServerClock

    c = make_controller(tmp_path / "shared", "ctl2", ServerClock())
    c.lease_step()
    c.fencing.slurm_controllers = [("ctl1", "UP"), ("ctl2", "UP")]  # the Slurm controllers, as the last ping named them

    def hold(*args: str) -> tuple[int, str, str]:
        code = run_main(monkeypatch, "controller", "hold", *args, "--url", api.base)
        out, err = capsys.readouterr()
        return code, out, err

    def unchanged() -> Any:
        audit = tmp_path / "shared" / "audit.jsonl"
        return (c.state.held if c.state else None, audit.read_text() if audit.exists() else "")

    with serving(c) as api:
        before = unchanged()
        bad = [(["ctl9"], "unknown node 'ctl9'"), (["ctl1;reboot"], "ctl1;reboot"),
               (["ctl1", "--reason", " "], "--reason"), (["ctl9", "--dry-run"], "unknown node 'ctl9'"),
               (["n1"], "n1 is a GPU node, which the controllers never fence")]  # fmt: skip
        for args, named in bad:
            code, _, err = hold(*args)
            assert code == 2 and named in err and "Traceback" not in err, (args, err)
        assert unchanged() == before
        code, out, _ = hold("ctl1", "--reason", "PSU swap", "--dry-run")
        assert code == 0 and out.strip() == "dry run, nothing changed: ctl1 held: PSU swap" and unchanged() == before
        code, out, _ = hold("ctl1", "--reason", "PSU swap", "--json")
        assert code == 0 and json.loads(out)["notes"] == ["ctl1 held: PSU swap"]
        assert c.state is not None and c.state.held["ctl1"].reason == "PSU swap"
        code, out, _ = hold("ctl1", "--release")
        assert code == 0 and "ctl1 released" in out and c.state.held == {}
        entries = [json.loads(line) for line in (tmp_path / "shared" / "audit.jsonl").read_text().splitlines()]
        assert [(e["what"], e["node"]) for e in entries] == [("held", "ctl1"), ("released", "ctl1")]


def test_the_heals_config_is_checked() -> None:
    with pytest.raises(ValidationError, match="hand_back_after_s"):
        SlurmFence(hand_back_after_s=5)  # inside Slurm's unsaved-state window
    with pytest.raises(ValidationError, match="action 'off' needs power_status_command"):
        SlurmFence(action="off", power_off_command="off {node}")
    with pytest.raises(ValidationError, match="power_on_command"):
        SlurmFence(power_on_command="on {host}")
    assert SlurmFence().action == "reboot" and SlurmFence().hand_back_after_s == 15
