"""Subprocess calls with a timeout on every one, and a result object instead of exceptions by default."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ha_ops.errors import CommandFailed, CommandTimeout


@dataclass(frozen=True)
class CommandResult:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def run(
    argv: Sequence[str],
    *,
    timeout: float = 30.0,
    check: bool = True,
    input: str | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    where: str = "",
) -> CommandResult:
    """Run argv to completion; raise CommandTimeout past `timeout`, CommandFailed on non-zero if `check`."""
    args = [str(a) for a in argv]
    try:
        proc = subprocess.run(
            args,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise CommandTimeout(args, timeout, where) from exc
    result = CommandResult(args, proc.returncode, proc.stdout, proc.stderr)
    if check and not result.ok:
        raise CommandFailed(args, proc.returncode, proc.stdout, proc.stderr, where)
    return result
