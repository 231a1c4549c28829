"""One way to run commands on a node, whether it is a lab namespace or a real machine over SSH."""

from ha_ops.transport.base import Transport
from ha_ops.transport.lab import LabTransport
from ha_ops.transport.ssh import SSHTransport

__all__ = ["LabTransport", "SSHTransport", "Transport"]
