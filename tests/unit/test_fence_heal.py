"""Fencing that heals (ha_ops.remediation.fence_heal, issue 42): a fenced Slurm primary is brought back as the standby
by itself, from scripted observations: after a BMC fence with action reboot, after one with action off (once its BMC
answers and the partition is over), not while a person holds it, and a heal that times out. A killed primary (its
fence finds no slurmctld: its none_found_exit) counts as fenced, and is restarted over ssh."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ha_ops.errors import TransportError
from ha_ops.remediation import fence_heal
from ha_ops.remediation.config import SlurmFence
from ha_ops.remediation.fence_heal import Decision, FenceRecord, Run, Seen
from ha_ops.remediation.slurm_fence import FenceOutcome, fence_primary
from ha_ops.util.proc import CommandResult

CFG = SlurmFence(
    power_off_command="ha-ops power off {node} -i hosts.yml",
    power_on_command="ha-ops power on {node} -i hosts.yml",
    power_status_command="ha-ops power status {node} -i hosts.yml",
    rejoin_timeout_s=60,
)
OFF = CFG.model_copy(update={"action": "off"})
T0 = 1000.0  # the fence; the takeover 2 s later
FENCED_OFF = Seen(controllers={"ctl1": "DOWN", "ctl2": "UP"}, views={"ctl2": T0}, whole=True, held=False)


def fenced(how: str = "bmc", cfg: SlurmFence = CFG) -> FenceRecord:
    started = fence_heal.start("ctl1", how, "ctl2", True, T0, None, cfg)  # type: ignore[arg-type]
    assert started.audit == () and started.record.phase == "fenced"
    return fence_heal.took_over(started.record, T0 + 2)


def back(at: float, views: float) -> Seen:
    """Both slurmctlds answer, and ctl1's remediation controller last wrote its view at `views`."""
    return Seen(controllers={"ctl1": "UP", "ctl2": "UP"}, views={"ctl1": views, "ctl2": at}, whole=True, held=False)


def whats(*decisions: Decision) -> list[str]:
    return [e.what for d in decisions for e in d.audit]


def test_a_primary_powered_off_through_its_bmc_is_powered_on_after_the_hand_back_delay_and_rejoins() -> None:
    record = fenced()
    early = fence_heal.decide(record, FENCED_OFF, T0 + 16.9, CFG)  # the backup in control for 14.9 s
    assert early.run is None and "15 s first" in early.record.note
    due = fence_heal.decide(early.record, FENCED_OFF, T0 + 17, CFG)
    assert due.run == Run("power_on", "ctl1", "ha-ops power on ctl1 -i hosts.yml", ssh=False)
    on = fence_heal.ran(due.record, due.run, True, "ctl1: power on done; the BMC reports on", T0 + 19, CFG)
    assert on.record.phase == "rejoining" and on.audit[0].after == "ctl1: power on done; the BMC reports on"
    # It boots: slurmctld answers (it takes control back), but its remediation controller has not written yet.
    booting = fence_heal.decide(on.record, back(T0 + 25, views=T0 - 5), T0 + 25, CFG)
    assert booting.record.phase == "rejoining" and "remediation controller on ctl1" in booting.record.note
    done = fence_heal.decide(booting.record, back(T0 + 27, views=T0 + 26), T0 + 27, CFG)
    assert done.record.phase == "rejoined" and not done.record.active
    assert whats(on, done) == ["power_on", "rejoined"]
    assert "its remediation controller runs as standby" in done.audit[0].after
    assert fence_heal.decide(done.record, back(T0 + 99, T0 + 99), T0 + 99, CFG) == Decision(done.record)  # over


def test_a_host_fenced_off_waits_for_the_partitions_end_and_its_bmc_before_it_is_powered_on() -> None:
    record = fenced(cfg=OFF)
    partitioned = replace(FENCED_OFF, whole=False)  # the leader itself does not hear the cluster
    waiting = fence_heal.decide(record, partitioned, T0 + 60, OFF)
    assert waiting.run is None and "partition is over" in waiting.record.note
    ask = fence_heal.decide(waiting.record, FENCED_OFF, T0 + 61, OFF)  # the partition is over: ask the BMC
    assert ask.run == Run("power_status", "ctl1", "ha-ops power status ctl1 -i hosts.yml", ssh=False)
    silent = fence_heal.decide(waiting.record, replace(FENCED_OFF, bmc=False), T0 + 61, OFF)
    assert silent.run is None and "BMC answers" in silent.record.note and silent.record.not_before == T0 + 71
    assert fence_heal.decide(silent.record, FENCED_OFF, T0 + 65, OFF).run is None  # asked again only after 10 s
    answered = fence_heal.decide(silent.record, replace(FENCED_OFF, bmc=True), T0 + 71, OFF)
    assert answered.run is not None and answered.run.kind == "power_on"
    assert whats(waiting, ask, silent, answered) == []  # waiting is no step: only what was done is audited


def test_a_held_host_is_neither_powered_on_nor_restarted_until_released() -> None:
    for how in ("bmc", "ssh"):
        held = fence_heal.decide(fenced(how), replace(FENCED_OFF, held=True), T0 + 600, CFG)
        assert held.run is None and held.record.phase == "fenced" and "held by a person" in held.record.note
        released = fence_heal.decide(held.record, FENCED_OFF, T0 + 601, CFG)
        assert released.run is not None and released.run.kind == ("power_on" if how == "bmc" else "restart")


def test_a_hold_names_what_it_changed_and_refuses_an_unknown_node() -> None:
    known = {"ctl1", "ctl2", "gpu1"}
    with pytest.raises(ValueError, match="unknown node 'ctl9'"):
        fence_heal.change_hold({}, "ctl9", False, "new PSU", "operator alice", T0, known)
    held = fence_heal.change_hold({}, "ctl1", False, "new PSU", "operator alice", T0, known)
    assert held.entry is not None and (held.entry.what, held.entry.why) == ("held", "new PSU (by operator alice)")
    assert held.held["ctl1"].reason == "new PSU"
    again = fence_heal.change_hold(held.held, "ctl1", False, "new PSU", "operator bob", T0, known)
    assert again.entry is None and again.held == held.held  # nothing changed, nothing audited
    released = fence_heal.change_hold(held.held, "ctl1", True, "", "operator bob", T0, known)
    assert released.held == {} and released.entry is not None and released.entry.what == "released"
    assert fence_heal.change_hold({}, "ctl1", True, "", "operator bob", T0, known).entry is None


def test_a_heal_that_does_not_come_back_in_time_fails_and_the_next_fences_heal_it_again_up_to_max_heals() -> None:
    record = fenced()
    on = fence_heal.ran(record, Run("power_on", "ctl1", "on", False), True, "on", T0 + 17, CFG)
    still = fence_heal.decide(on.record, FENCED_OFF, T0 + 76.9, CFG)
    assert still.record.phase == "rejoining" and still.audit == ()
    late = fence_heal.decide(still.record, FENCED_OFF, T0 + 77, CFG)  # 60 s after the power on
    assert late.record.phase == "failed" and whats(late) == ["heal_failed"]
    assert "not back 60 s after it was powered on through its BMC" in late.audit[0].why
    assert late.audit[0].after == "may be fenced again" and not fence_heal.left_to_person(late.record, CFG)
    previous = late.record
    for heals in (2, 3):  # each fenced again (it came back unreachable) and healed again
        again = fence_heal.start("ctl1", "bmc", "ctl2", True, T0 + 100 * heals, previous, CFG)
        assert again.record.phase == "fenced" and again.record.heals == heals
        previous = again.record.model_copy(update={"phase": "failed"})
    assert fence_heal.left_to_person(previous, CFG)
    gave_up = fence_heal.start("ctl1", "bmc", "ctl2", True, T0 + 400, previous, CFG)
    assert gave_up.record.phase == "failed" and "3 heals in a row" in gave_up.audit[0].why


def test_a_power_on_that_fails_is_tried_again_then_fails_the_heal() -> None:
    record, run = fenced(), Run("power_on", "ctl1", "on", False)
    first = fence_heal.ran(record, run, False, "the BMC does not answer", T0 + 17, CFG)
    assert first.record.phase == "fenced" and "failed (try 1 of 3)" in first.audit[0].after
    assert fence_heal.decide(first.record, FENCED_OFF, T0 + 20, CFG).run is None  # heal_retry_s
    assert fence_heal.decide(first.record, FENCED_OFF, T0 + 27, CFG).run is not None
    second = fence_heal.ran(first.record, run, False, "the BMC does not answer", T0 + 27, CFG)
    third = fence_heal.ran(second.record, run, False, "the BMC does not answer", T0 + 37, CFG)
    assert third.record.phase == "failed" and whats(third) == ["power_on", "heal_failed"]
    assert third.audit[1].after == "left off"
    no_power_on = CFG.model_copy(update={"power_on_command": None})
    stays_off = fence_heal.decide(fenced(), FENCED_OFF, T0 + 17, no_power_on)
    assert stays_off.record.phase == "failed" and "no power_on_command" in stays_off.audit[0].why


def test_a_backup_that_stops_answering_after_the_hand_back_is_restarted() -> None:
    rejoining = fence_heal.ran(fenced("ssh"), Run("restart", "ctl1", "x", True), True, "", T0 + 17, CFG).record
    handed_back = Seen(controllers={"ctl1": "UP", "ctl2": "DOWN"}, views={"ctl1": T0 + 18}, whole=True, held=False)
    first = fence_heal.decide(rejoining, handed_back, T0 + 18, CFG)
    assert first.run is None and first.record.up_at == T0 + 18 and "backup on ctl2" in first.record.note
    due = fence_heal.decide(first.record, handed_back, T0 + 28, CFG)
    assert due.run == Run("restart_backup", "ctl2", "systemctl restart slurmctld", ssh=True)
    restarted = fence_heal.ran(due.record, due.run, True, "", T0 + 29, CFG)
    assert (restarted.audit[0].what, restarted.audit[0].node) == ("restart_slurmctld", "ctl2")
    assert fence_heal.decide(restarted.record, handed_back, T0 + 30, CFG).run is None  # given BACKUP_GRACE_S
    done = fence_heal.decide(restarted.record, back(T0 + 33, T0 + 33), T0 + 33, CFG)
    assert done.record.phase == "rejoined"


# --- a killed primary: its fence finds nothing to kill ------------------------------------------------------------
def _run(code: int, text: str = "") -> CommandResult:
    return CommandResult(["sh", "-c", "pkill -KILL -x slurmctld"], code, text, "")


def test_a_killed_primary_found_down_is_fenced_and_its_slurmctld_is_restarted_over_ssh() -> None:
    def fence(code: int, none_found_exit: int | None = SlurmFence().none_found_exit) -> FenceOutcome:
        powered: list[str] = []
        outcome = fence_primary("ctl1", SlurmFence().command, "power off {node}", lambda h, c: _run(code),
                                lambda c: powered.append(c) or _run(0), none_found_exit)  # fmt: skip
        assert powered == []  # it answers ssh: never powered off
        return outcome

    assert fence(3) == FenceOutcome(True, "down", "already down: no slurmctld runs there (exit 3)")  # pgrep: none
    assert not fence(1).fenced  # still running after the kill (or pgrep failed): no takeover
    assert not fence(3, none_found_exit=None).fenced
    record = fenced("down")
    restart = fence_heal.decide(record, FENCED_OFF, T0 + 17, CFG)
    assert restart.run == Run("restart", "ctl1", "systemctl start slurmctld", ssh=True)
    started = fence_heal.ran(record, restart.run, True, "", T0 + 18, CFG)
    assert started.audit[0].what == "restart_slurmctld" and started.audit[0].before == "slurmctld down (fenced)"


def test_a_primary_ssh_cannot_reach_is_still_powered_off_with_none_found_exit_set() -> None:
    def unreachable(host: str, command: str) -> CommandResult:
        raise TransportError(f"cannot reach {host}:22")

    outcome = fence_primary("ctl1", "pkill -KILL -x slurmctld", "off {node}", unreachable, lambda c: _run(0), 1)
    assert outcome.fenced and outcome.how == "bmc"


def test_old_states_load_without_fences_or_holds() -> None:
    from ha_ops.remediation.model import ControllerState

    old = ControllerState.model_validate({"version": 1, "nodes": {}, "intents": []})
    assert old.fences == {} and old.held == {}
    kept = ControllerState(fences={"ctl1": fenced()}, held={"ctl1": fence_heal.Hold(reason="x", by="y", since=1)})
    assert ControllerState.model_validate_json(kept.model_dump_json()) == kept
