"""All terminal output goes through here: diagnostics and progress to stderr, results (and --json) to stdout."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console

_stdout = Console(soft_wrap=True)
_stderr = Console(stderr=True, soft_wrap=True)


def quiet() -> bool:
    return os.environ.get("HA_OPS_QUIET", "") not in ("", "0")


def result(text: Any) -> None:
    _stdout.print(text)


def emit_json(data: Any) -> None:
    # Plain print: rich would wrap or colour JSON meant for scripts.
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    sys.stdout.flush()


def info(message: str) -> None:
    if not quiet():
        _stderr.print(message, highlight=False)


def error(message: str) -> None:
    _stderr.print(f"[bold red]error:[/] {message}", highlight=False)


@contextmanager
def progress(message: str) -> Iterator[None]:
    """A spinner on a terminal, one line otherwise; for long steps such as `lab up`."""
    if quiet() or not _stderr.is_terminal:
        info(message)
        yield
        return
    with _stderr.status(message):
        yield
