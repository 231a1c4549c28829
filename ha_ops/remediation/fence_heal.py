"""Fencing that heals: a fenced Slurm primary is brought back by itself, so that the next single failure still finds
a backup controller and a second remediation controller (issue 42). (Slurm 22.05's primary takes control back as it
starts: the backup that stood in for it returns to standby; its remediation controller comes back as the standby.)

Pure: each decision is a function of the fenced host's record, what the leader sees now, the time and the config.
The records live in the controller's shared state (ControllerState.fences), so a new leader finishes a heal its
predecessor began; the controller's heal loop only runs the commands these functions name and records the result.

A fenced host's record goes through these phases:

  fenced     Waiting to bring it back. First the backup stays in control for `hand_back_after_s` after the takeover:
             Slurm 22.05's restarted primary takes control back at once, and what the backup has not saved yet (a
             job's start) would be lost or run twice. Then:
             - fenced over ssh (a hung primary's slurmctld killed) or found down (pkill found no slurmctld): its
               slurmctld is started again over ssh (`restart_command`);
             - powered off through its BMC with action `reboot`: powered on again (`power_on_command`);
             - with action `off`: powered on again only once the leader hears the cluster again (the partition is
               over) and its BMC answers a power status (its management network is back).
             Never while a person holds the host (`ha-ops controller hold NODE`): it waits, held.
  rejoining  The command ran. Its slurmctld must answer `scontrol ping` (as must the backup: after a hand-back Slurm
             22.05's backup sometimes stops answering for good, and is restarted once it has been silent for
             BACKUP_GRACE_S), and the remediation controller it ran writes its view again, within `rejoin_timeout_s`.
  rejoined   Done: redundancy is back.
  failed     It did not come back, or the power on / restart failed `heal_tries` times. The fence watch may fence it
             again (a primary that came back unreachable must not stay in control beside the backup), and that fence
             starts another heal, up to `max_heals` in a row; then it is left to a person.

Every step is an audit entry (Entry), written by the controller with the record that goes with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal, NamedTuple

from pydantic import BaseModel

from ha_ops.remediation.fence_config import SlurmFence
from ha_ops.util.command_template import fill

BACKUP_GRACE_S = 10.0  # the backup silent this long after the primary answers again: restarted (hand-back fault)
BACKUP_RESTARTS = 2  # at most, per heal
HEALS_IN_A_ROW_S = 3600.0  # a fence within this of the last heal's failure counts as the same trouble

Phase = Literal["fenced", "rejoining", "rejoined", "failed"]
How = Literal["ssh", "bmc", "down"]  # killed over ssh, powered off through its BMC, found with no slurmctld


class FenceRecord(BaseModel):
    """One fenced host's heal, kept in the shared state."""

    host: str
    how: How
    action: Literal["reboot", "off"] = "reboot"  # (what a BMC fence asked for: only `bmc` records use it)
    backup: str = ""  # the backup told to take control ("" when none answered)
    controller: bool = False  # a remediation controller ran there (its view was shared): it must run again
    phase: Phase = "fenced"
    fenced_at: float
    took_over_at: float = 0.0  # when the backup was told to take control (0: it was not)
    since: float  # when this phase began
    tries: int = 0  # power ons (restarts) that failed in this phase
    not_before: float = 0.0  # nothing tried before this (a failed try, a BMC that did not answer)
    up_at: float = 0.0  # rejoining: when its slurmctld first answered
    backup_restarts: int = 0
    heals: int = 1  # heals of this host in a row, this one included (each after the last one failed)
    note: str = ""  # what it waits for, or why it failed

    @property
    def active(self) -> bool:
        """The heal owns the host: the fence watch must not fence it again (it is off, or coming back)."""
        return self.phase in ("fenced", "rejoining")


class Hold(BaseModel):
    """A person holds the host: ha-ops neither powers it on nor restarts its slurmctld."""

    reason: str
    by: str
    since: float


class Entry(NamedTuple):
    """An audit entry, as the controller's `_fence_write` writes it."""

    what: str
    node: str
    why: str
    before: str
    after: str


@dataclass(frozen=True)
class Seen:
    """What the leader sees now."""

    controllers: dict[str, str]  # its last `scontrol ping`: host -> "UP" | "DOWN" (empty: not read)
    views: dict[str, float]  # remediation controller id -> when it last wrote its view to the shared state
    whole: bool  # its own view hears agents and reads Slurm: it hears the cluster (no partition of its own)
    held: bool  # a person holds the host
    bmc: bool | None = None  # the host's BMC answered a power status; None: not asked


@dataclass(frozen=True)
class Run:
    """A command the heal loop runs: `command` on `node` over ssh, or (ssh False) on the controller's own host."""

    kind: Literal["power_status", "power_on", "restart", "restart_backup"]
    node: str
    command: str
    ssh: bool


@dataclass(frozen=True)
class Decision:
    record: FenceRecord
    run: Run | None = None
    audit: tuple[Entry, ...] = field(default_factory=tuple)


def start(
    host: str, how: How, backup: str, controller: bool, now: float, previous: FenceRecord | None, cfg: SlurmFence
) -> Decision:
    """The record of a fence that just succeeded (before the takeover: `took_over` sets its time)."""
    # Heals in a row: only after a heal that failed lately (one that failed long ago, a person has seen to since).
    chained = previous is not None and previous.phase == "failed" and now - previous.since < HEALS_IN_A_ROW_S
    heals = previous.heals + 1 if chained and previous is not None else 1
    record = FenceRecord(host=host, how=how, action=cfg.action, backup=backup, controller=controller,
                         fenced_at=now, since=now, heals=heals)  # fmt: skip
    if heals > cfg.max_heals:
        return _failed(record, now, f"{heals - 1} heals in a row did not bring it back: left to a person")
    return Decision(record)


def took_over(record: FenceRecord, now: float) -> FenceRecord:
    return record.model_copy(update={"took_over_at": now})


def left_to_person(record: FenceRecord, cfg: SlurmFence) -> bool:
    """A failed heal after which ha-ops tries nothing more: the host stays fenced for a person (the heal loop does not
    let the fence watch fence it again; a person brings it back, or it answers `scontrol ping` again)."""
    return record.phase == "failed" and record.heals >= cfg.max_heals


def hand_back_at(record: FenceRecord, cfg: SlurmFence) -> float:
    """The earliest time the primary may come back: the backup in control for `hand_back_after_s`."""
    return max(record.fenced_at, record.took_over_at) + cfg.hand_back_after_s


def decide(record: FenceRecord, seen: Seen, now: float, cfg: SlurmFence) -> Decision:
    """The next step for the record: a command to run (`run`), the record as it is now, and what to audit. A
    `power_status` run asks for the host's BMC: decide again with its answer in `seen.bmc`."""
    if record.phase == "fenced":
        return _bring_back(record, seen, now, cfg)
    if record.phase == "rejoining":
        return _watch_rejoin(record, seen, now, cfg)
    return Decision(record)


def _noted(record: FenceRecord, note: str, **update: float) -> Decision:
    return Decision(record.model_copy(update={"note": note, **update}))


def _bring_back(record: FenceRecord, seen: Seen, now: float, cfg: SlurmFence) -> Decision:
    host = record.host
    if seen.held:
        return _noted(record, "held by a person: not brought back until released")
    if now < hand_back_at(record, cfg):
        return _noted(record, f"the backup in control for {cfg.hand_back_after_s:g} s first (Slurm's hand-back)")
    if now < record.not_before:
        return Decision(record)
    if record.how != "bmc":
        return Decision(record, Run("restart", host, cfg.restart_command, ssh=True))
    if cfg.power_on_command is None:  # (a choice of the config, not a failure to try again: left to a person)
        return _failed(record.model_copy(update={"heals": cfg.max_heals}), now,
                       "no power_on_command: it stays off until a person powers it on")  # fmt: skip
    if record.action == "off":
        if not seen.whole:
            return _noted(record, "off until the partition is over (the leader hears the cluster again)")
        if cfg.power_status_command is None:  # (the config refuses action off without it)
            return _failed(record, now, "no power_status_command: nothing tells when its BMC answers")
        if seen.bmc is None:
            return Decision(record, Run("power_status", host, fill(cfg.power_status_command, node=host), ssh=False))
        if not seen.bmc:
            return _noted(record, "off until its BMC answers a power status (the management network)",
                          not_before=now + cfg.heal_retry_s)  # fmt: skip
    return Decision(record, Run("power_on", host, fill(cfg.power_on_command, node=host), ssh=False))


def _watch_rejoin(record: FenceRecord, seen: Seen, now: float, cfg: SlurmFence) -> Decision:
    host, backup = record.host, record.backup
    up = seen.controllers.get(host) == "UP"
    backup_up = not backup or seen.controllers.get(backup) == "UP"
    view_back = not record.controller or seen.views.get(host, 0.0) >= record.since
    wanted = [(f"slurmctld on {host} answering scontrol ping", up), (f"the backup on {backup} answering", backup_up),
              (f"the remediation controller on {host} running", view_back)]  # fmt: skip
    missing = [what for what, ok in wanted if not ok]
    if not missing:
        done = record.model_copy(update={"phase": "rejoined", "since": now, "note": ""})
        after = f"slurmctld answers scontrol ping{f', and so does the backup on {backup}' if backup else ''}"
        if record.controller:
            after += "; its remediation controller runs as standby"
        why = f"{_back(record)} {now - record.since:.0f} s before"
        return Decision(done, audit=(Entry("rejoined", host, why, "fenced", after),))
    if now - record.since >= cfg.rejoin_timeout_s:
        return _failed(record, now, f"not back {cfg.rejoin_timeout_s:g} s after it was {_back(record)}: no "
                                    + ", no ".join(missing))  # fmt: skip
    update: dict[str, object] = {"note": "waiting for " + ", ".join(missing)}
    if up and not record.up_at:
        update["up_at"] = now
    record = record.model_copy(update=update)
    silent_for = now - record.up_at if up else 0.0
    if (not backup_up and silent_for >= BACKUP_GRACE_S and cfg.backup_restart_command and now >= record.not_before
            and record.backup_restarts < BACKUP_RESTARTS):  # fmt: skip
        return Decision(record, Run("restart_backup", backup, cfg.backup_restart_command, ssh=True))
    return Decision(record)


def _back(record: FenceRecord) -> str:
    return "powered on through its BMC" if record.how == "bmc" else "restarted over ssh"


def _failed(record: FenceRecord, now: float, why: str) -> Decision:
    failed = record.model_copy(update={"phase": "failed", "since": now, "note": why})
    after = "left off" if record.how == "bmc" and record.phase == "fenced" else "may be fenced again"
    return Decision(failed, audit=(Entry("heal_failed", record.host, why, record.phase, after),))


def ran(record: FenceRecord, run: Run, ok: bool, said: str, now: float, cfg: SlurmFence) -> Decision:
    """The record after `run` (not a power_status) ran: `ok` its exit status, `said` its last line."""
    if run.kind == "restart_backup":
        update = {"backup_restarts": record.backup_restarts + 1, "not_before": now + BACKUP_GRACE_S}
        why = (f"it has not answered scontrol ping since {record.host} took control back (Slurm 22.05's backup "
               "sometimes fails to return to standby)")  # fmt: skip
        entry = Entry("restart_slurmctld", run.node, why, "DOWN", said if ok else f"failed: {said}")
        return Decision(record.model_copy(update=update), audit=(entry,))
    what = "power_on" if run.kind == "power_on" else "restart_slurmctld"
    before = "off (fenced through its BMC)" if record.how == "bmc" else "slurmctld down (fenced)"
    why = f"the backup has been in control for {now - max(record.fenced_at, record.took_over_at):.0f} s"
    if ok:
        back = record.model_copy(update={"phase": "rejoining", "since": now, "tries": 0, "not_before": 0.0,
                                         "up_at": 0.0, "note": "waiting for it to rejoin"})  # fmt: skip
        return Decision(back, audit=(Entry(what, record.host, why, before, said),))
    tries = record.tries + 1
    entry = Entry(what, record.host, why, before, f"failed (try {tries} of {cfg.heal_tries}): {said}")
    if tries >= cfg.heal_tries:
        failed = _failed(record, now, f"{what} failed {tries} times: {said}")
        return replace(failed, audit=(entry, *failed.audit))
    return Decision(record.model_copy(update={"tries": tries, "not_before": now + cfg.heal_retry_s}), audit=(entry,))


# --- a person's hold ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class HoldChange:
    held: dict[str, Hold]  # the holds afterwards
    entry: Entry | None  # what to audit (None: nothing changed)
    note: str


def change_hold(
    held: dict[str, Hold], node: str, release: bool, reason: str, by: str, now: float, known: set[str]
) -> HoldChange:
    """Hold `node` (or release it). ValueError naming a node that is not among the `known` controller hosts."""
    if node not in known:
        raise ValueError(f"unknown node {node!r}: not a Slurm or remediation controller host "
                         f"(known: {', '.join(sorted(known)) or 'none'})")  # fmt: skip
    was = held.get(node)
    if release:
        if was is None:
            return HoldChange(held, None, f"{node} is not held")
        rest = {n: h for n, h in held.items() if n != node}
        entry = Entry("released", node, f"released by {by}", f"held: {was.reason}", "ha-ops may bring it back")
        return HoldChange(rest, entry, f"{node} released: ha-ops may power it on or restart it again")
    if was is not None and was.reason == reason:
        return HoldChange(held, None, f"{node} is held already: {was.reason}")
    hold = Hold(reason=reason, by=by, since=now)
    entry = Entry("held", node, f"{reason} (by {by})", f"held: {was.reason}" if was else "not held",
                  "held: ha-ops neither powers it on nor restarts its slurmctld")  # fmt: skip
    return HoldChange({**held, node: hold}, entry, f"{node} held: {reason}")
