"""Transport for commands on this machine (the agent on its own node, `ha-ops health check`)."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence

from ha_ops.util.proc import CommandResult, run


class LocalTransport:
    def __init__(self, name: str | None = None, env: Mapping[str, str] | None = None) -> None:
        self.name = name or socket.gethostname()
        self._env = dict(env or {})

    def enter_prefix(self) -> list[str]:
        """What runs a command where this transport's commands run (nothing: here)."""
        return []

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float = 30.0,
        check: bool = True,
        input: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult:
        full_env = {**os.environ, **self._env, **(env or {})}
        return run(
            [*self.enter_prefix(), *argv], timeout=timeout, check=check, input=input, env=full_env, where=self.name
        )

    def read_file(self, path: str, timeout: float = 10.0) -> str:
        return self.run(["cat", path], timeout=timeout).stdout

    def close(self) -> None:
        return None
