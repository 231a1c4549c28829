"""One way to run commands on a node, whether it is a lab namespace or a real machine over SSH.

The SSH and lab transports load on first use: paramiko alone costs ~0.2 s of every command's start-up, and most
commands (`ha-ops gpu fake-fault` on a node, the agent) never open an SSH connection."""

from typing import TYPE_CHECKING, Any

from ha_ops.transport.base import Transport

if TYPE_CHECKING:
    from ha_ops.transport.lab import LabTransport
    from ha_ops.transport.ssh import SSHTransport

__all__ = ["LabTransport", "SSHTransport", "Transport"]


def __getattr__(name: str) -> Any:
    if name == "SSHTransport":
        from ha_ops.transport.ssh import SSHTransport

        return SSHTransport
    if name == "LabTransport":
        from ha_ops.transport.lab import LabTransport

        return LabTransport
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
