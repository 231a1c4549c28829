"""Transport into a lab node: enter the namespaces (network, hostname, mounts) of the node's holder process."""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence

from ha_ops.util.proc import CommandResult, run


class LabTransport:
    def __init__(self, name: str, holder_pid: int, env: Mapping[str, str] | None = None) -> None:
        self.name = name
        self.holder_pid = holder_pid
        self._env = dict(env or {})

    def enter_prefix(self) -> list[str]:
        # nsenter without a pid namespace execs the command directly, so PIDs it starts are the commands' own.
        return ["nsenter", "-t", str(self.holder_pid), "-n", "-u", "-m", "--"]

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
            [*self.enter_prefix(), *argv],
            timeout=timeout,
            check=check,
            input=input,
            env=full_env,
            where=self.name,
        )

    def sh(self, script: str, **kwargs: object) -> CommandResult:
        return self.run(["sh", "-c", script], **kwargs)  # type: ignore[arg-type]

    def read_file(self, path: str, timeout: float = 10.0) -> str:
        return self.run(["cat", path], timeout=timeout).stdout

    def close(self) -> None:
        return None

    def __repr__(self) -> str:
        return f"LabTransport({self.name!r}, holder={self.holder_pid})"


def quote(argv: Sequence[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv)
