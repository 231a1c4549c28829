"""Bounded polling: every wait in ha-ops is a condition checked until a deadline, never a bare sleep."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from ha_ops.errors import WaitTimeout

T = TypeVar("T")


def wait_for(
    what: str,
    probe: Callable[[], T],
    *,
    timeout: float,
    interval: float = 0.1,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Call `probe` until it returns a truthy value and return it; raise WaitTimeout naming `what` otherwise.

    The probe may raise; its last exception (or last falsy value) is reported in the timeout message.
    """
    deadline = clock() + timeout
    last: object = None
    while True:
        try:
            value = probe()
            if value:
                return value
            last = value
        except Exception as exc:  # the probe's failure is an observation, not the end of the wait
            last = exc
        if clock() >= deadline:
            raise WaitTimeout(f"timed out after {timeout:g} s waiting for {what} (last: {last!r})")
        sleep(interval)
