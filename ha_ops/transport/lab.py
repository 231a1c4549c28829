"""Transport into a lab node: enter the namespaces (network, hostname, mounts) of the node's holder process."""

from __future__ import annotations

from collections.abc import Mapping

from ha_ops.transport.local import LocalTransport


class LabTransport(LocalTransport):
    def __init__(self, name: str, holder_pid: int, env: Mapping[str, str] | None = None) -> None:
        super().__init__(name, env)
        self.holder_pid = holder_pid

    def enter_prefix(self) -> list[str]:
        # nsenter without a pid namespace execs the command directly, so PIDs it starts are the commands' own.
        return ["nsenter", "-t", str(self.holder_pid), "-n", "-u", "-m", "--"]

    def __repr__(self) -> str:
        return f"LabTransport({self.name!r}, holder={self.holder_pid})"
