"""When and how to fence a hung Slurm primary.

When (FenceWatch, pure bookkeeping over `scontrol ping` answers): the primary counts as hung once it has been DOWN
(not answering pings) for `after_s` while a backup is UP. A primary that is frozen rather than dead still holds
clients until their MessageTimeout; one cut off from the network but alive keeps writing the heartbeat on shared
state, so the backup stays in standby. It is fenced once per outage; a primary that answers again is watched afresh,
and so is every primary when a new term begins: a watch kept from an earlier term of this controller (it fenced, lost
the lease, and the primary answered again while another controller led) would take a new outage for the old one and
never fence it (seen in CI: the cut-off primary left unfenced). Across terms the state's fence records, not this
memory, say that a fence is still being healed.
Two observers, as for a lost node: the leader's own pings, and an agent's report that reached the leader after the
primary went silent. A leader cut off from the network (its lease on storage it still reaches) finds the primary
silent too, and the backup on its own host UP; without the second observer it would power off a healthy primary
and hand Slurm to its own side of the cut (seen in the lab before a blind leader had stepped down).

How (fence_primary): over ssh first (kill its slurmctld). A host ssh cannot reach is powered off through its BMC,
and counts as fenced only once the BMC reports it off; then the backup is told to take control at once (`scontrol
takeover`: the heartbeat the isolated primary wrote is still fresh). Never two controllers in control: no takeover
without a confirmed fence. A primary whose fence command finds no slurmctld to kill (its pgrep found none: exit
`none_found_exit`; a killed primary, which nobody restarts) is down already: fenced as surely, and the backup takes
over. Bringing the fenced host back
is fence_heal.py's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ha_ops.errors import TransportError
from ha_ops.util.command_template import fill
from ha_ops.util.proc import CommandResult


@dataclass
class FenceWatch:
    after_s: float
    down_since: float | None = None
    fenced: set[str] = field(default_factory=set)
    term: int | None = None  # the leader's term (lease token) this watch has seen

    def observe(
        self,
        controllers: list[tuple[str, str]],
        now: float,
        asked_at: float | None = None,
        heard_at: float = 0.0,
        term: int | None = None,
    ) -> str | None:
        """The host to fence now, if any. `controllers`: [(host, "UP" | "DOWN")], the primary first, as answered
        by a ping sent at `asked_at` (default `now`): a DOWN means no answer since the ping was sent, which for a
        primary cut off is a whole MessageTimeout before the answer comes back. `heard_at`: when an agent's report
        last reached this controller; the primary is fenced only once one arrived after it went silent (the
        cluster still reaches this controller, so the silence is the primary's, not this side's). `term`: the
        leader's lease token; a new one starts the watch afresh."""
        if term != self.term:
            self.term, self.down_since, self.fenced = term, None, set()
        if len(controllers) < 2:
            return None
        primary, state = controllers[0]
        if state != "DOWN" or not any(s == "UP" for _, s in controllers[1:]):
            self.down_since = None if state == "UP" else self.down_since
            if state == "UP":
                self.fenced.discard(primary)
            return None
        if self.down_since is None:
            self.down_since = now if asked_at is None else asked_at
        if now - self.down_since < self.after_s or primary in self.fenced or heard_at < self.down_since:
            return None
        self.fenced.add(primary)
        return primary


@dataclass(frozen=True)
class FenceOutcome:
    fenced: bool
    how: str  # "ssh", "bmc", "down" (no slurmctld ran there), or "" when not fenced
    said: str  # for the audit log: each step and its result


def last_line(result: CommandResult) -> str:
    lines = (result.stdout or result.stderr).strip().splitlines()
    return lines[-1][:120] if lines else f"exit {result.returncode}"


def fence_primary(
    host: str,
    ssh_command: str,
    power_off_command: str | None,
    run_on: Callable[[str, str], CommandResult],
    run_here: Callable[[str], CommandResult],
    none_found_exit: int | None = None,
) -> FenceOutcome:
    """Fence `host`'s slurmctld: `ssh_command` on it (`run_on`), else, when ssh cannot reach it,
    `power_off_command` (with {node}) on the controller's host (`run_here`), which exits 0 once the BMC reports off.
    `ssh_command` exiting `none_found_exit` found nothing to kill: down already, which is fenced too."""
    try:
        result = run_on(host, ssh_command)
        if result.ok:
            return FenceOutcome(True, "ssh", f"fenced over ssh: {last_line(result)}")
        if none_found_exit is not None and result.returncode == none_found_exit:
            return FenceOutcome(True, "down", f"already down: no slurmctld runs there (exit {result.returncode})")
        return FenceOutcome(False, "", f"fence command failed: {last_line(result)}")  # it answers: no power off
    except TransportError as exc:
        unreachable = f"{host} does not answer ssh ({str(exc)[:120]})"
    if power_off_command is None:
        return FenceOutcome(False, "", f"{unreachable}; no power_off_command: left unfenced")
    off = run_here(fill(power_off_command, node=host))
    if not off.ok:
        return FenceOutcome(False, "", f"{unreachable}; power off through its BMC failed: {last_line(off)}")
    return FenceOutcome(True, "bmc", f"{unreachable}; powered off through its BMC: {last_line(off)}")
