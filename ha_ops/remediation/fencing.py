"""The Slurm fence and its heal, as two runnables of the leader: the fence watches the Slurm controllers and fences
a primary that stopped answering while a backup is UP (slurm_fence.py); the heal brings a fenced host back and hands
control back to it (fence_heal.py). Each in a thread of its own: a ping waits a MessageTimeout per hung controller,
and a power on waits for the BMC.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from ha_ops.errors import TransportError
from ha_ops.remediation import fence_heal
from ha_ops.remediation.executor import Executor, NodeOps
from ha_ops.remediation.fence_heal import Entry, FenceRecord
from ha_ops.remediation.lease import LeaseLost
from ha_ops.remediation.runnable import Runnable
from ha_ops.remediation.slurm_fence import FenceWatch, fence_primary, last_line
from ha_ops.util.proc import CommandResult

log = logging.getLogger(__name__)

HOWS = {"bmc": "powered off through its BMC", "down": "found with no slurmctld running"}


@dataclass(eq=False)
class SlurmFencing(Runnable):
    controllers: Callable[[], list[tuple[str, str]]]  # `scontrol ping`: [(host, "UP" | "DOWN")], primary first
    executor: Executor  # (its node_ops: the commands run on the hosts and here)
    # The last `scontrol ping` read, [(host, "UP" | "DOWN")], exported as ha_ops_slurm_controller_up
    slurm_controllers: list[tuple[str, str]] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        self.watch = FenceWatch(self.config.slurm_fence.after_s)

    @property
    def node_ops(self) -> NodeOps:
        return self.executor.node_ops

    # --- the fence ----------------------------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        """Watch the Slurm controllers (each ping may take a MessageTimeout per hung controller: its own thread)."""
        while not stop.wait(self.config.node_poll_s):
            if not self.leadership.is_leader:
                continue
            asked_at = self.clock()
            try:
                self.step(self.controllers(), asked_at)
            except LeaseLost:
                continue
            except Exception as exc:
                log.warning("cannot check the Slurm controllers: %s", exc)
                self.slurm_controllers = []  # unknown now: no stale UP may hide an outage

    def step(self, controllers: list[tuple[str, str]], asked_at: float | None = None) -> None:
        self.slurm_controllers = list(controllers)
        term = self.term
        # When this controller last heard an agent itself: a peer's reports prove nothing of its own reach.
        heard_at = self.leadership.last_heard()
        with term.lock:
            fences = dict(term.state.fences) if term.state is not None else {}
            token = term.token
        host = self.watch.observe(controllers, self.clock(), asked_at, heard_at, token)
        if host is None or token is None:
            return
        previous = fences.get(host)
        if previous is not None and previous.active:
            return  # its heal owns it (off, or booting: a new leader must not fence a primary coming back)
        term.lease.check(token)  # only the leader fences, and a deposed one must not
        fence = self.config.slurm_fence
        why = f"slurmctld on {host} has not answered for {fence.after_s:g} s while a backup is UP"
        log.error("fencing the hung Slurm primary: %s", why)
        ops = self.node_ops

        def run_on(node: str, command: str) -> CommandResult:  # cut off, it costs this long before its BMC
            return ops.run_command(node, command, connect_timeout_s=fence.ssh_connect_timeout_s)

        outcome = fence_primary(host, fence.command, fence.power_off_command, run_on, ops.run_here,
                                fence.none_found_exit)  # fmt: skip
        backup = next((h for h, state in controllers[1:] if state == "UP"), None)
        entries = [Entry("fence_slurmctld", host, why, "DOWN (hung or cut off)", outcome.said)]
        heal = None
        if outcome.fenced:  # from now on its heal (fence_heal.py) brings it back, whichever controller leads
            ran_controller = host == self.config.id or any(v.id == host for v in self.leadership.peer_views)
            heal = fence_heal.start(host, outcome.how, backup or "", ran_controller, self.clock(), previous,  # type: ignore[arg-type]
                                    fence)  # fmt: skip
            entries += heal.audit
        self.write(token, entries, heal.record if heal else None)
        if heal is not None and fence.takeover_command and backup is not None:
            # At once, not after SlurmctldTimeout: while no controller is in control, a job that ends cannot report
            # it (slurmstepd gives up after 1.5 x SlurmctldTimeout), and Slurm later requeues the finished job.
            result = ops.run_here(fence.takeover_command)
            said = "told to take control" if result.ok else f"takeover failed: exit {result.returncode}"
            how = HOWS.get(outcome.how, "fenced over ssh")
            # (the hand-back waits from here, whether or not the takeover was accepted: the later, the safer)
            took = fence_heal.took_over(heal.record, self.clock())
            self.write(token, [Entry("slurm_takeover", backup, f"{host} was {how}", "standby", said)], took)

    def write(self, token: int, entries: Iterable[Entry], record: FenceRecord | None = None) -> None:
        """Audit the entries and keep the fenced host's record with them, in one write of the state."""
        term = self.term
        with term.lock:
            if term.token != token or term.state is None:
                return
            if record is not None:
                term.state.fences[record.host] = record
            for e in entries:
                term.audit(token, e.what, e.node, e.why, e.before, e.after)
            term.save()

    # --- the heal -----------------------------------------------------------------------------------------------
    def heal_run(self, stop: threading.Event) -> None:
        """Bring fenced hosts back (fence_heal.py): a thread of its own, since a power on waits for the BMC."""
        while not stop.wait(self.config.node_poll_s):
            if not self.leadership.is_leader:
                continue
            try:
                self.heal_step()
            except LeaseLost:
                continue
            except Exception as exc:
                log.warning("cannot bring the fenced hosts back: %s", exc)

    def heal_step(self) -> None:
        """What the leader sees, handed to fence_heal for each host it is bringing back; the commands it names run
        here, and their results are audited with the host's record."""
        fence, now, window = self.config.slurm_fence, self.clock(), self.config.blind_after_s
        term = self.term
        with term.lock:
            if term.state is None or term.token is None:
                return
            token, records, held = term.token, list(term.state.fences.values()), set(term.state.held)
        own = self.leadership.own_view()
        views = {v.id: v.at for v in self.leadership.peer_views} | {own.id: own.at}
        whole = own.hears_agents(now, window) and own.reaches_slurm(now, window)
        for record in (r for r in records if r.active):
            seen = fence_heal.Seen(dict(self.slurm_controllers), views, whole, record.host in held)
            decision = fence_heal.decide(record, seen, now, fence)
            if decision.run is not None and decision.run.kind == "power_status":
                answered = self.node_ops.run_here(decision.run.command).ok
                decision = fence_heal.decide(record, replace(seen, bmc=answered), now, fence)
            if decision.run is not None:
                with term.lock:  # a hold that came meanwhile, or a deposed leader: nothing runs
                    if term.state is None or term.token != token or record.host in term.state.held:
                        return
                term.lease.check(token)
                result = self._heal_command(decision.run)
                decision = fence_heal.ran(decision.record, decision.run, result.ok, last_line(result), self.clock(),
                                          fence)  # fmt: skip
            if decision.record != record or decision.audit:
                self.write(token, decision.audit, decision.record)
            if decision.record.phase == "failed" and not fence_heal.left_to_person(decision.record, fence):
                self.watch.fenced.discard(record.host)  # not back: fenced again if it is DOWN while the backup is UP

    def _heal_command(self, run: fence_heal.Run) -> CommandResult:
        log.warning("bringing %s back: %s", run.node, run.command)
        if not run.ssh:
            return self.node_ops.run_here(run.command)
        try:
            return self.node_ops.run_command(run.node, run.command, self.config.slurm_fence.ssh_connect_timeout_s)
        except TransportError as exc:
            return CommandResult(["ssh", run.node, run.command], 255, "", str(exc))
