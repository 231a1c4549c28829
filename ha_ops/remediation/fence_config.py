"""The Slurm fence's configuration (`slurm_fence` in the controller's config): how a hung or cut-off primary is
fenced (slurm_fence.py) and brought back (fence_heal.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from ha_ops.util.command_template import NodeCommand
from ha_ops.util.models import ConfigModel

# Kill slurmctld and check it is gone; exit 3 only when pgrep finds none running (pgrep exits 1 for no match, 2-3
# for its own errors, which count as a failure: no takeover without a confirmed fence).
DEFAULT_FENCE_COMMAND = (
    "pgrep -x slurmctld >/dev/null; case $? in 1) echo 'no slurmctld running'; exit 3;; 0) ;; *) exit 1;; esac; "
    "pkill -KILL -x slurmctld; for i in 1 2 3 4 5 6 7 8 9 10; do pgrep -x slurmctld >/dev/null || "
    "{ echo 'slurmctld killed'; exit 0; }; sleep 0.2; done; echo 'slurmctld still runs'; exit 1"
)


class SlurmFence(ConfigModel):
    """Fencing a hung Slurm primary. A frozen slurmctld still accepts connections, so Slurm's clients keep waiting
    on it (MessageTimeout) and never reach the backup that took over; killing the hung one sends them there."""

    enabled: bool = True
    after_s: float = Field(
        20.0,
        gt=0,
        description="The primary DOWN and the backup UP for this long before fencing. Keep after_s plus the fence's "
        "time (ssh_connect_timeout_s, the BMC's power off) under 1.5 x SlurmctldTimeout: jobs that end while no "
        "controller is in control lose their completion after that and Slurm requeues them.",
    )
    command: str = Field(
        DEFAULT_FENCE_COMMAND,
        description="Run on the hung primary's host over ssh: exit 0 once no slurmctld runs there (killed, and "
        "checked gone), `none_found_exit` when none ran, anything else when it could not be killed.",
    )
    ssh_connect_timeout_s: float = Field(
        2.0, gt=0, description="How long ssh may take to reach the primary's host before its BMC fences it instead."
    )
    power_off_command: NodeCommand | None = Field(
        None,
        description="Run on the controller's host when the primary's host does not answer ssh (cut off, or hung): "
        "its BMC powers it off, and it must exit 0 only once the BMC reports off, e.g. "
        "'ha-ops power off {node} --inventory /etc/ha-ops/hosts.yml'. Without it such a primary stays unfenced.",
    )
    takeover_command: str | None = Field(
        "scontrol takeover",
        description="Run on the controller's host after a successful fence (over ssh or through the BMC): the backup "
        "takes control at once, not after SlurmctldTimeout (a cut-off primary's heartbeat stays fresh meanwhile).",
    )
    # Healing (remediation/fence_heal.py): the fenced host comes back as the standby by itself, so that the next
    # single failure still finds a backup controller.
    none_found_exit: int | None = Field(
        3,
        description="`command`'s exit code that means no slurmctld was running there (the default command's pgrep "
        "found none): the primary is down already, which fences it as surely as a kill. Never pkill's own exit 1, "
        "which also means a match it could not signal. None: every non-zero exit is a failure.",
    )
    action: Literal["reboot", "off"] = Field(
        "reboot",
        description="A host fenced through its BMC: 'reboot' powers it on again `hand_back_after_s` after the "
        "takeover; 'off' leaves it off until its BMC answers a power status and the leader hears the cluster again "
        "(the partition is over). Either way a host a person holds (`ha-ops controller hold`) stays as it is.",
    )
    power_on_command: NodeCommand | None = Field(
        None,
        description="Run on the controller's host to power a host fenced through its BMC on again; it exits 0 once "
        "the BMC reports on, e.g. 'ha-ops power on {node} --inventory /etc/ha-ops/hosts.yml'. Without it such a "
        "host stays off (heal_failed) until a person powers it on.",
    )
    power_status_command: NodeCommand | None = Field(
        None,
        description="Run on the controller's host to ask a host's BMC for its power state (exit 0: the BMC, and so "
        "the management network, answers), e.g. 'ha-ops power status {node} --inventory F'. Needed by action 'off'.",
    )
    restart_command: str = Field(
        "systemctl start slurmctld",
        description="Run over ssh on a host fenced over ssh (its slurmctld killed, or found dead) to start "
        "slurmctld again, `hand_back_after_s` after the takeover.",
    )
    backup_restart_command: str | None = Field(
        "systemctl restart slurmctld",
        description="Run over ssh on the backup when it stops answering `scontrol ping` after the primary took "
        "control back (a Slurm 22.05 fault: it logs 'heartbeat file creation failed' from then on). None: left so.",
    )
    hand_back_after_s: float = Field(
        15.0,
        ge=10.0,
        description="The backup in control this long before the fenced primary comes back: a restarted primary takes "
        "control back at once (Slurm 22.05), and a job's start the backup has not saved yet would be lost or run "
        "twice (at least 10 s: shared/LAB-NOTES.md).",
    )
    rejoin_timeout_s: float = Field(
        300.0,
        gt=0,
        description="From the power on (or restart) until its slurmctld answers `scontrol ping` (the backup too) and "
        "its remediation controller writes its view again; otherwise heal_failed, and it may be fenced again.",
    )
    heal_retry_s: float = Field(10.0, gt=0, description="A power on or restart that failed is tried again after this.")
    heal_tries: int = Field(3, ge=1, description="Tries of a power on or restart before heal_failed.")
    max_heals: int = Field(
        3,
        ge=1,
        description="Heals of one host that failed in a row (each fenced again) before it is left to a person.",
    )

    @model_validator(mode="after")
    def _off_needs_a_status(self) -> SlurmFence:
        if self.action == "off" and self.power_off_command and self.power_status_command is None:
            raise ValueError("action 'off' needs power_status_command: a host powered off comes back only once "
                             "its BMC answers")  # fmt: skip
        return self
