"""Repair steps on a node, over SSH with verified host keys: reset a GPU, reboot, validate.

The commands come from the controller's config (`access`), so the same code drives a real node (`nvidia-smi -r`,
`systemctl reboot`, `ha-ops health check`) and a lab node (the fake GPU reset).
"""

from __future__ import annotations

import logging
import time

from ha_ops.errors import TransportError
from ha_ops.remediation.config import NodeAccess
from ha_ops.transport.ssh import SSHTransport
from ha_ops.util.command_template import fill
from ha_ops.util.proc import CommandResult, run

log = logging.getLogger(__name__)


class SshNodeOps:
    def __init__(self, access: NodeAccess) -> None:
        self.access = access

    def _run(self, node: str, command: str, connect_timeout_s: float | None = None) -> CommandResult:
        transport = SSHTransport(
            node,
            self.access.addresses.get(node, node),
            user=self.access.ssh_user,
            key_file=self.access.ssh_key,
            known_hosts=self.access.known_hosts,
            connect_timeout=connect_timeout_s or self.access.connect_timeout_s,
        )
        try:
            return transport.run(["sh", "-c", command], timeout=self.access.command_timeout_s, check=False)
        finally:
            transport.close()

    def reset_gpu(self, node: str, gpu: int) -> CommandResult:
        return self._run(node, fill(self.access.reset_gpu_command, gpu=gpu, node=node))

    def reboot(self, node: str) -> CommandResult:
        """Reboot through the OS; a node that does not answer ssh (lost, hung) is power-cycled through its BMC when
        a `power_cycle_command` is configured."""
        try:
            return self._run(node, fill(self.access.reboot_command, node=node))
        except TransportError as exc:
            if self.access.power_cycle_command is None:
                raise
            log.warning("%s does not answer ssh (%s); power-cycling it", node, exc)
            return self.run_here(fill(self.access.power_cycle_command, node=node))

    def run_command(self, node: str, command: str, connect_timeout_s: float | None = None) -> CommandResult:
        return self._run(node, command, connect_timeout_s)

    def run_here(self, command: str) -> CommandResult:
        return run(["sh", "-c", command], check=False, timeout=self.access.command_timeout_s)

    def validate(self, node: str) -> CommandResult:
        """Run the validation, first waiting (up to `boot_wait_s`) for a node that is still rebooting to answer."""
        deadline = time.monotonic() + self.access.boot_wait_s
        while True:
            try:
                return self._run(node, fill(self.access.validate_command, node=node))
            except TransportError as exc:
                if time.monotonic() >= deadline:
                    raise
                log.info("%s does not answer yet (%s); waiting for it to boot", node, exc)
                time.sleep(2.0)
