"""Durations as the CLI takes them ("30s", "13.3m", "3.1h", "2d", or bare seconds) and as it prints them."""

from __future__ import annotations

import math
import re

from ha_ops.errors import SpecError

UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"\s*([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*([smhd]?)\s*")


def parse_duration(text: str, field: str, *, allow_zero: bool = False) -> float:
    """Seconds in `text`; a SpecError naming `field` (the flag) if it is not a positive duration."""
    match = _DURATION.fullmatch(text)
    if not match:
        raise SpecError(field, [f"{text!r} is not a duration (a number with s, m, h or d: 30s, 3.1h)"])
    value = float(match.group(1)) * UNITS[match.group(2) or "s"]
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        wanted = "zero or more" if allow_zero else "above zero"
        raise SpecError(field, [f"{text!r} must be {wanted}"])
    return value


def format_duration(seconds: float) -> str:
    """The unit a reader expects: 42 s, 13.3 min, 3.1 h, 47.7 d."""
    if not math.isfinite(seconds):
        return str(seconds)
    if abs(seconds) < 90:
        return f"{seconds:.3g} s" if abs(seconds) < 10 else f"{seconds:.0f} s"
    if abs(seconds) < 90 * 60:
        return f"{seconds / 60:.1f} min"
    if abs(seconds) < 72 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"
