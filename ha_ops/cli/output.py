"""All terminal output goes through here: diagnostics and progress to stderr, results (and --json) to stdout."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console


@cache
def _console(stderr: bool) -> Console:
    # Made on first use: importing rich costs start-up time that `--json` output (plain JSON) does not need.
    from rich.console import Console

    return Console(stderr=stderr, soft_wrap=True)


def quiet() -> bool:
    return os.environ.get("HA_OPS_QUIET", "") not in ("", "0")


def result(text: Any) -> None:
    _console(False).print(text)


def emit_json(data: Any) -> None:
    # Plain print: rich would wrap or colour JSON meant for scripts.
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    sys.stdout.flush()


def info(message: str) -> None:
    if not quiet():
        _console(True).print(message, highlight=False)


def warning(message: str) -> None:
    """Something the user should act on, though the command went on: shown even when HA_OPS_QUIET hides progress."""
    from rich.markup import escape

    _console(True).print(f"[bold yellow]warning:[/] {escape(message)}", highlight=False)


def error(message: str) -> None:
    from rich.markup import escape  # (the message is text, not markup: `ha-ops[plan]` and `[a@b]` stay as written)

    _console(True).print(f"[bold red]error:[/] {escape(message)}", highlight=False)


@contextmanager
def progress(message: str) -> Iterator[None]:
    """A spinner on a terminal, one line otherwise; for long steps such as `lab up`."""
    if quiet() or not _console(True).is_terminal:
        info(message)
        yield
        return
    with _console(True).status(message):
        yield
