"""Text from outside, as ha-ops stores and logs it: control characters replaced by spaces (no forged log lines, no
NUL in a Slurm reason or a state file) and a bounded length (a 1 MiB reason was once copied into every state write
and audit entry). Too long is refused, naming the field, rather than cut: an honest sender never comes near it."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, Field

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def without_controls(text: str) -> str:
    return _CONTROL.sub(" ", text)


def bounded_text(max_chars: int) -> Any:
    """A pydantic field type: text of at most `max_chars` characters, control characters replaced by spaces."""
    return Annotated[str, Field(max_length=max_chars), AfterValidator(without_controls)]


# What reports and alerts carry: a line for people (a reason, a message) and a short token (an id, a check's name).
Line = bounded_text(1024)
Token = bounded_text(128)
