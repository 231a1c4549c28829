"""The node transport protocol used by every adapter (Slurm, health, rollout, chaos)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

from ha_ops.util.proc import CommandResult


@runtime_checkable
class Transport(Protocol):
    """Runs commands on one node. Implementations: LabTransport (namespaces), SSHTransport (paramiko)."""

    name: str

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float = 30.0,
        check: bool = True,
        input: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult:
        """Run argv on the node; CommandTimeout past `timeout`, CommandFailed on non-zero exit if `check`."""
        ...

    def read_file(self, path: str, timeout: float = 10.0) -> str: ...

    def close(self) -> None: ...
