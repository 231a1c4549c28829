"""Game-day plans: the faults to run, the conditions that tell detection, recovery, a steady state and an abort,
and the limits; loaded from YAML under chaos/gamedays/ with experiments named relative to the plan."""

from __future__ import annotations

import inspect
import logging
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, field_validator, model_validator

from ha_ops.chaos import probes
from ha_ops.chaos.workload import Workload
from ha_ops.errors import SpecError
from ha_ops.util.models import ConfigModel
from ha_ops.util.parsing import existing_file
from ha_ops.util.yamlconfig import load_model

log = logging.getLogger(__name__)


UNSET: Any = object()
MAX_WAIT_S = 86_400.0  # the longest a game day waits for one thing (a fault's detection and recovery, a pause)


class Condition(ConfigModel):
    """A probe of ha_ops.chaos.probes and the value it must have (or must not have, with `negate`; or, with
    `changed`, any value other than the one it had before the fault)."""

    probe: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    key: str | None = Field(None, description="For a probe that answers a mapping: the entry to compare.")
    equals: Any = True
    negate: bool = False
    changed: bool = Field(False, description="Holds once the value differs from its value before the fault.")

    @field_validator("probe")
    @classmethod
    def _known_probe(cls, probe: str) -> str:
        if probe not in probes.__all__:
            raise ValueError(f"{probe!r} is not one of {', '.join(probes.__all__)}")
        return probe

    @model_validator(mode="after")
    def _arguments_the_probe_takes(self) -> Condition:
        """Arguments the probe cannot take are refused here: at run time the probe's TypeError read as "not yet",
        and the check waited its whole time for nothing."""
        try:
            inspect.signature(getattr(probes, self.probe)).bind(**self.arguments, configuration=None)
        except TypeError as exc:
            raise ValueError(f"arguments: {self.probe} cannot take {self.arguments}: {exc}") from None
        return self

    def value(self, configuration: dict[str, Any]) -> Any:
        value = getattr(probes, self.probe)(**self.arguments, configuration=configuration)
        return value[self.key] if self.key is not None else value

    def holds(self, configuration: dict[str, Any], baseline: Any = UNSET) -> bool:
        try:
            value = self.value(configuration)
        except Exception as exc:  # a probe that cannot answer is "not yet"
            log.debug("probe %s: %s", self.probe, exc)
            return False
        if self.changed:
            return baseline is not UNSET and value != baseline
        return (value != self.equals) if self.negate else (value == self.equals)

    def describe(self) -> str:
        args = ", ".join(f"{k}={v}" for k, v in self.arguments.items())
        test = "changed" if self.changed else f"{'!=' if self.negate else '=='} {self.equals}"
        return f"{self.probe}({args})" + (f"[{self.key}]" if self.key else "") + f" {test}"


def _as_list(value: Any) -> Any:
    return value if isinstance(value, list) else [value]


# One condition, or a list that must all hold.
Conditions = Annotated[list[Condition], BeforeValidator(_as_list), Field(min_length=1)]


def all_hold(
    conditions: list[Condition], configuration: dict[str, Any], baselines: dict[int, Any] | None = None
) -> bool:
    return all(c.holds(configuration, (baselines or {}).get(i, UNSET)) for i, c in enumerate(conditions))


def baselines_of(conditions: list[Condition], configuration: dict[str, Any]) -> dict[int, Any]:
    """The values before the fault, for the conditions that wait for a change."""
    found = {}
    for i, c in enumerate(conditions):
        if c.changed:
            try:
                found[i] = c.value(configuration)
            except Exception as exc:
                log.warning("no value before the fault for %s: %s", c.describe(), exc)
    return found


class PlannedFault(ConfigModel):
    name: str
    experiment: Path
    vars: dict[str, Any] = Field(default_factory=dict)
    detect: Conditions = Field(description="The system noticed the fault (first alert, finding or takeover).")
    recover: Conditions = Field(description="The steady state is back (checked once detected).")
    recover_while_faulted: bool = Field(
        False, description="Recovery must come while the fault lasts, not from the experiment's rollback."
    )
    # A day at most, as the pause between faults: 1e308 s was accepted, and slept on (issue 44, finding 8)
    timeout_s: float = Field(60.0, gt=0, le=MAX_WAIT_S)


class Limits(ConfigModel):
    max_concurrent_faults: int = Field(1, ge=1)


class GameDayPlan(ConfigModel):
    name: str
    lab: str = Field("lab", description="The lab it runs in when neither --target nor --inventory names a cluster.")
    limits: Limits = Limits()
    abort_when: list[Condition] = Field(default_factory=list, description="Stop the game day if any holds.")
    steady: list[Condition] = Field(
        default_factory=list, description="Waited for before each fault: the cluster is whole again."
    )
    settle_timeout_s: float = Field(120.0, gt=0)
    workload: Workload | None = Field(None, description="Jobs run through each fault: lost or run twice fails it.")
    pause_between_s: float = Field(3.0, ge=0, le=MAX_WAIT_S)
    faults: list[PlannedFault] = Field(min_length=1)


def load_plan(path: Path) -> GameDayPlan:
    plan = load_model(path, GameDayPlan)
    # Experiments are named relative to the plan.
    fixed = [f.model_copy(update={"experiment": existing_file(Path(path).parent, f.experiment,
                                                              f"faults[{f.name}].experiment", str(path))})
             for f in plan.faults]  # fmt: skip
    return plan.model_copy(update={"faults": fixed})


def select(plan: GameDayPlan, only: list[str]) -> GameDayPlan:
    """The plan with just the named faults (in plan order); an unknown name is refused, naming the known ones."""
    if not only:
        return plan
    names = [f.name for f in plan.faults]
    unknown = [n for n in only if n not in names]
    if unknown:
        raise SpecError("--only", [f"no fault named {n!r}; the plan has: {'; '.join(names)}" for n in unknown])
    return plan.model_copy(update={"faults": [f for f in plan.faults if f.name in only]})
