"""When the remediation controller fences a hung Slurm primary (ha_ops.remediation.slurm_fence)."""

from __future__ import annotations

from ha_ops.errors import TransportError
from ha_ops.remediation.slurm_fence import FenceOutcome, FenceWatch, fence_primary
from ha_ops.util.proc import CommandResult

UP_UP = [("ctl1", "UP"), ("ctl2", "UP")]
HUNG = [("ctl1", "DOWN"), ("ctl2", "UP")]


def test_a_primary_down_with_the_backup_up_is_fenced_once_after_the_delay() -> None:
    watch = FenceWatch(after_s=10)
    assert watch.observe(HUNG, 100, heard_at=100) is None
    assert watch.observe(HUNG, 109, heard_at=109) is None
    assert watch.observe(HUNG, 110, heard_at=110) == "ctl1"
    assert watch.observe(HUNG, 130, heard_at=130) is None  # once per outage


def test_a_leader_that_heard_no_agent_since_the_primary_went_silent_fences_nothing() -> None:
    # Cut off itself, the leader finds the primary silent and its own host's backup UP: the cluster's reports stop
    # reaching it at the same moment. Only a report that arrives after the silence began makes the primary the one.
    watch = FenceWatch(after_s=5)
    assert watch.observe(HUNG, 106, asked_at=101, heard_at=99.5) is None
    assert watch.observe(HUNG, 130, asked_at=125, heard_at=99.5) is None  # however long it lasts
    assert watch.observe(HUNG, 131, asked_at=126, heard_at=130.2) == "ctl1"  # an agent got through: it was the primary


def test_a_primary_that_answers_again_is_watched_afresh() -> None:
    watch = FenceWatch(after_s=10)
    watch.observe(HUNG, 100, heard_at=100)
    assert watch.observe(HUNG, 110, heard_at=110) == "ctl1"
    watch.observe(UP_UP, 120, heard_at=120)
    assert watch.observe(HUNG, 121, heard_at=121) is None
    assert watch.observe(HUNG, 131, heard_at=131) == "ctl1"


def test_no_fence_without_a_backup_up_or_with_a_single_controller() -> None:
    watch = FenceWatch(after_s=0)
    assert watch.observe([("ctl1", "DOWN"), ("ctl2", "DOWN")], 100) is None  # fencing would leave no controller
    assert watch.observe([("ctl1", "DOWN")], 100) is None
    assert watch.observe([("ctl1", "UP"), ("ctl2", "DOWN")], 100) is None  # a hung backup holds no client


def test_a_blip_resets_the_clock() -> None:
    watch = FenceWatch(after_s=10)
    watch.observe(HUNG, 100, heard_at=100)
    watch.observe(UP_UP, 105, heard_at=105)
    assert watch.observe(HUNG, 111, heard_at=111) is None
    assert watch.observe(HUNG, 121, heard_at=121) == "ctl1"


# --- how: over ssh, else through the BMC -------------------------------------------------------------------------
def _result(code: int, text: str = "") -> CommandResult:
    return CommandResult(["sh", "-c", "..."], code, text, "")


class Ops:
    def __init__(self, ssh: CommandResult | Exception, bmc: CommandResult | None = None) -> None:
        self.ssh, self.bmc = ssh, bmc
        self.ran: list[str] = []

    def run_on(self, host: str, command: str) -> CommandResult:
        self.ran.append(f"ssh {host}: {command}")
        if isinstance(self.ssh, Exception):
            raise self.ssh
        return self.ssh

    def run_here(self, command: str) -> CommandResult:
        self.ran.append(f"here: {command}")
        assert self.bmc is not None
        return self.bmc


def fence(ops: Ops, power_off: str | None = "ha-ops power off {node} -i hosts.yml") -> FenceOutcome:
    return fence_primary("ctl1", "pkill -KILL -x slurmctld", power_off, ops.run_on, ops.run_here)


def test_a_primary_ssh_reaches_is_fenced_over_ssh_and_never_powered_off() -> None:
    ops = Ops(_result(0, "killed slurmctld 42"))
    assert fence(ops) == FenceOutcome(True, "ssh", "fenced over ssh: killed slurmctld 42")
    assert ops.ran == ["ssh ctl1: pkill -KILL -x slurmctld"]
    failed = Ops(_result(1, "permission denied"))  # it answers: a power off would kill a node that can be reached
    assert fence(failed) == FenceOutcome(False, "", "fence command failed: permission denied")
    assert len(failed.ran) == 1


def test_a_primary_ssh_cannot_reach_is_powered_off_through_its_bmc_and_fenced_only_once_it_reports_off() -> None:
    ops = Ops(TransportError("cannot reach ctl1:22"), _result(0, "ctl1: power off done; the BMC reports off"))
    outcome = fence(ops)
    assert outcome.fenced and outcome.how == "bmc" and "powered off through its BMC" in outcome.said
    assert ops.ran[-1] == "here: ha-ops power off ctl1 -i hosts.yml"
    refused = fence(Ops(TransportError("cannot reach ctl1:22"), _result(4, "the BMC does not answer")))
    assert not refused.fenced and "power off through its BMC failed: the BMC does not answer" in refused.said
    unarmed = Ops(TransportError("cannot reach ctl1:22"))
    assert fence(unarmed, power_off=None) == FenceOutcome(
        False, "", "ctl1 does not answer ssh (cannot reach ctl1:22); no power_off_command: left unfenced"
    )
    assert len(unarmed.ran) == 1


def test_the_outage_counts_from_when_the_unanswered_ping_was_sent() -> None:
    # A primary cut off answers nothing: the ping returns DOWN only after MessageTimeout (here 5 s).
    watch = FenceWatch(after_s=8)
    assert watch.observe(HUNG, 105, asked_at=100, heard_at=104) is None
    assert watch.observe(HUNG, 108.5, asked_at=103.5, heard_at=104) == "ctl1"  # 8.5 s after the first unanswered ping


def test_a_new_term_watches_afresh() -> None:
    # This controller fenced the primary in term 4 and lost the lease before it saw the primary answer again; the
    # primary came back while another controller led. Leading again in term 9, it must fence the primary's new outage,
    # and count that outage from this term's pings.
    watch = FenceWatch(after_s=5)
    watch.observe(HUNG, 100, heard_at=100, term=4)
    assert watch.observe(HUNG, 105, heard_at=105, term=4) == "ctl1"
    assert watch.observe(HUNG, 300, heard_at=300, term=9) is None  # the old outage's clock is not this one's
    assert watch.observe(HUNG, 305, heard_at=305, term=9) == "ctl1"
    assert watch.observe(HUNG, 310, heard_at=310, term=9) is None  # still once per outage within a term
