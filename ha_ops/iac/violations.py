"""What a broken high-availability rule looks like, and the error that refuses a build because of it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ha_ops.errors import SpecError


@dataclass(frozen=True)
class Violation:
    """One broken rule: its id (see `ha_ops.iac.policy.RULES`), the offending field or object, and why."""

    rule: str
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.rule} {self.field}: {self.message}"


class PolicyViolationError(SpecError):
    """The cluster (or a component's arguments) breaks high-availability rules; nothing was created.

    A SpecError, so the CLI exits 2 and prints one line per violation, each starting with the rule id.
    """

    def __init__(self, source: str, violations: Sequence[Violation]) -> None:
        self.violations = tuple(violations)
        super().__init__(source, [str(v) for v in self.violations])

    @property
    def rules(self) -> set[str]:
        return {v.rule for v in self.violations}


def enforce(violations: Sequence[Violation], source: str) -> None:
    """Raise PolicyViolationError naming every violation, or return when there is none."""
    if violations:
        raise PolicyViolationError(source, violations)
