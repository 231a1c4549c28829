"""How long an experiment keeps its fault in: the `hold_fault` action waits its full time in a plain `chaos run`,
while a game day or a runbook verification running the experiment in the same process may end it early, once
what it watches for has been seen (the recovery, or every claim checked). Holding on after that only adds time:
nothing is judged in the rest of the hold, and the fault is undone (or, for a runbook, left for the manual steps)
either way."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

_seen = threading.Event()


def wait(seconds: float) -> tuple[float, bool]:
    """Hold for `seconds`, or until ended early; returns (seconds held, whether it was ended early)."""
    started = time.monotonic()
    early = _seen.wait(max(0.0, seconds))
    return time.monotonic() - started, early


def end_early() -> None:
    """What the running hold was for has been seen: let it end now (and any hold started later in this run)."""
    _seen.set()


@contextmanager
def endable() -> Iterator[None]:
    """A run whose holds may be ended early by end_early(): the signal starts unset and never outlives the run."""
    _seen.clear()
    try:
        yield
    finally:
        _seen.clear()
