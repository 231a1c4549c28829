"""What a rollout may do: the canary, the waves, how many nodes may be out at once, how to drain, when to halt.

Amounts are written the way operators say them: a count ("3"), a percentage ("5%"), and for waves "rest". They are
kept as text in the model (so a policy prints and persists as it was written) and parsed by `parse_amount`, which
plan.py calls again against the real fleet size.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import PydanticCustomError

from ha_ops.errors import SpecError
from ha_ops.spec.load import validation_problems

_COUNT = re.compile(r"[0-9]+")
_PERCENT = re.compile(r"([0-9]+(?:\.[0-9]+)?)%")
REST = "rest"
# The longest a rollout waits for one thing (a node's jobs, a soak, a burn-in): past what any job or soak takes, a
# timeout is no timeout (1e308 s was accepted; issue 44, finding 8).
MAX_WAIT_S = 30 * 86_400.0


@dataclass(frozen=True, slots=True)
class Amount:
    """A parsed amount: exactly one of `count`, `percent`, `rest`."""

    count: int | None = None
    percent: float | None = None
    rest: bool = False

    def of(self, total: int, *, at_least_one: bool = True) -> int:
        """How many nodes this amount is out of `total` (a percentage rounds up: 5% of 10 nodes is 1, not 0)."""
        if self.rest:
            return total
        if self.count is not None:
            return self.count
        assert self.percent is not None
        # The epsilon keeps 10% of 100 at 10 despite binary fractions.
        n = math.ceil(total * self.percent / 100 - 1e-9)
        return max(n, 1) if at_least_one and total else n


def _problem(message: str, **context: Any) -> PydanticCustomError:
    return PydanticCustomError("rollout_policy", message, context)


def parse_amount(text: str, *, allow_rest: bool = False) -> Amount:
    """'3' -> count 3, '5%' -> percent 5.0, 'rest' (waves only); ValueError with a readable message otherwise."""
    value = text.strip().lower()
    if allow_rest and value == REST:
        return Amount(rest=True)
    if _COUNT.fullmatch(value):
        count = int(value)
        if count < 1:
            raise ValueError(f"{text!r} must be at least 1")
        return Amount(count=count)
    if match := _PERCENT.fullmatch(value):
        percent = float(match.group(1))
        if not 0 < percent <= 100:
            raise ValueError(f"{text!r}: a percentage must be above 0% and at most 100%")
        return Amount(percent=percent)
    wanted = "a count (5), a percentage (5%) or 'rest'" if allow_rest else "a count (5) or a percentage (5%)"
    raise ValueError(f"{text!r} is not {wanted}")


def _amount_text(value: object) -> object:
    """Counts may be given as YAML integers; they are kept as text like every other amount."""
    if isinstance(value, bool):
        raise _problem("expected a count or a percentage, got a boolean")
    return str(value) if isinstance(value, int) else value


def _check(allow_rest: bool) -> AfterValidator:
    def check(value: str) -> str:
        try:
            parse_amount(value, allow_rest=allow_rest)
        except ValueError as exc:
            raise _problem(str(exc)) from None
        return value.strip().lower()

    return AfterValidator(check)


def _canary_input(value: object) -> object:
    """`--canary 2`, `--canary 5%` or `--canary gpu1,gpu7`: a count, a percentage or node names."""
    if isinstance(value, bool):
        raise _problem("expected a count, a percentage or node names, got a boolean")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        text = value.strip()
        if _COUNT.fullmatch(text) or text.endswith("%"):
            return text
        return [name.strip() for name in text.split(",") if name.strip()]
    return value


def _check_canary(value: str | list[str]) -> str | list[str]:
    if isinstance(value, list):
        if not value:
            raise _problem("name at least one canary node, or give a count or a percentage")
        duplicates = sorted({n for n in value if value.count(n) > 1})
        if duplicates:
            raise _problem("{names} named twice", names=", ".join(duplicates))
        return value
    try:
        parse_amount(value)
    except ValueError as exc:
        raise _problem(str(exc)) from None
    return value


CountOrPercent = Annotated[str, BeforeValidator(_amount_text), _check(allow_rest=False)]
WaveSize = Annotated[str, BeforeValidator(_amount_text), _check(allow_rest=True)]
CanarySpec = Annotated[str | list[str], BeforeValidator(_canary_input), AfterValidator(_check_canary)]


class DrainPolicy(BaseModel):
    """How a node is emptied before its driver changes: wait for its jobs, or requeue them (jobs that do not allow
    a requeue are still waited for). Either way a node still busy after `timeout_s` is returned untouched and
    reported as skipped: a later rollout picks it up."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    mode: Literal["wait", "requeue"] = "wait"
    timeout_s: float = Field(default=3600.0, gt=0, le=MAX_WAIT_S)


class RolloutPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    canary: CanarySpec = "1"
    # After the canary; a list that does not end in "rest" repeats its last size until every node is planned.
    waves: list[WaveSize] = Field(default_factory=lambda: ["1", "5%", "25%", "rest"], min_length=1)
    # Counting nodes already down: the rollout takes out at most this many minus those.
    max_unavailable: CountOrPercent = "1"
    skip: list[str] = Field(default_factory=list)
    drain: DrainPolicy = DrainPolicy()
    canary_max_failures: int = Field(default=0, ge=0)
    # A wave halts the rollout when more than this share of its nodes failed (0.1: 2 of 10 halt, 1 of 10 does not).
    wave_max_failure_fraction: float = Field(default=0.1, ge=0, le=1)
    soak_s: float = Field(default=300.0, ge=0, le=MAX_WAIT_S)
    burn_in_command: str | None = None
    burn_in_timeout_s: float = Field(default=1800.0, gt=0, le=MAX_WAIT_S)
    rollback_on_halt: bool = True

    @field_validator("waves")
    @classmethod
    def _rest_is_last(cls, waves: list[str]) -> list[str]:
        for i, wave in enumerate(waves[:-1]):
            if wave == REST:
                raise _problem("'rest' must be the last wave; it is wave {n} of {total}", n=i + 1, total=len(waves))
        return waves

    def wave_sizes(self) -> list[Amount]:
        return [parse_amount(w, allow_rest=True) for w in self.waves]

    def max_unavailable_of(self, fleet: int) -> int:
        """A percentage rounds down (never more out than asked) but is at least 1, or nothing could ever move."""
        amount = parse_amount(self.max_unavailable)
        if amount.count is not None:
            return amount.count
        assert amount.percent is not None
        return max(1, math.floor(fleet * amount.percent / 100 + 1e-9))


def build_policy(data: dict[str, Any], source: str = "rollout policy") -> RolloutPolicy:
    """A RolloutPolicy from plain data; SpecError naming every bad field otherwise."""
    try:
        policy = RolloutPolicy.model_validate(data)
    except ValidationError as exc:
        raise SpecError(source, validation_problems(exc)) from None
    return policy
