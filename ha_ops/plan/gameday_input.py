"""A game day's JSON report (ha_ops.chaos.report.report_json) as the simulator's detection and recovery times.

The report gives, per fault, its name, verdict and the measured `time_to_detect_s` (fault in -> the system
noticed) and `time_to_recover_s` (fault in -> the steady state back, detection included). Each fault is mapped
to a kind of failure by its name (the plan's names: chaos/gamedays/*.yaml):

- GPU faults (an XID, "GPU" in the name) -> gpu: the GPU causes of the failure mix (faulty GPU, HBM3, SRAM, GSP,
  SDC, thermal), whose node is taken out and replaced by a spare;
- node loss ("node loss", "node down", "host", "power") -> host: host maintenance, PSU, chassis, CPU, memory, SSD;
- fabric faults ("link", "leaf", "spine", "switch", "NIC") -> network: switches and cables (rerouted), NICs;
- control-plane faults (the Slurm controllers, the remediation controllers, storage, monitoring) -> none: a
  training job runs through them (they are what the game day checks), so they do not interrupt it in this model.

A kind's detection is the mean measured time to detect of its faults (as a fixed time), its recovery the mean of
(time to recover - time to detect): the drain, the spare in or the route around. A fault without both times (not
detected, not recovered) is left out and said so. Kinds no fault measured keep the baseline preset's times: the
game day is credited only with what it measured. Software failures are the job's own and always keep them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ha_ops.errors import SpecError
from ha_ops.plan.failures import Kind
from ha_ops.plan.presets import KindTiming, Preset
from ha_ops.util.parsing import parse_json, read_text

# First match wins: "two faults at once (the Slurm primary killed, an XID 79)" is a GPU fault.
KIND_PATTERNS: tuple[tuple[re.Pattern[str], Kind | None], ...] = (
    (re.compile(r"\bxid\b|\bgpu\b", re.IGNORECASE), "gpu"),
    (re.compile(r"node (loss|down|lost)|\bhost\b|\bpower\b", re.IGNORECASE), "host"),
    (re.compile(r"\blink\b|\bleaf\b|\bspine\b|\bswitch\b|\bnic\b|\bfabric\b", re.IGNORECASE), "network"),
    (re.compile(r"slurm|controller|leader|storage|chunkserver|monitoring|prometheus", re.IGNORECASE), None),
)


# Over any time a game day measures: it waits for a fault's detection and for its recovery a day at most each
# (ha_ops.chaos.plan.MAX_WAIT_S).
MAX_TIME_S = 7 * 86_400.0


class _Fault(BaseModel):
    # A time of `Infinity` (json.loads takes it) would pass `ge=0` and turn the simulator's means into inf and NaN;
    # so would two of 1e308 s summed (issue 44, finding 8).
    model_config = ConfigDict(extra="allow", allow_inf_nan=False)
    name: str
    verdict: str = ""
    time_to_detect_s: float | None = Field(None, ge=0, le=MAX_TIME_S)
    time_to_recover_s: float | None = Field(None, ge=0, le=MAX_TIME_S)


class _Report(BaseModel):
    model_config = ConfigDict(extra="allow")
    gameday: str
    faults: list[_Fault] = Field(min_length=1)


@dataclass(frozen=True)
class MeasuredFault:
    name: str
    verdict: str
    kind: Kind | None
    detect_s: float | None
    recover_s: float | None  # after detection
    used: bool
    why: str = ""


@dataclass(frozen=True)
class GameDayTimes:
    gameday: str
    timing: dict[Kind, KindTiming]
    faults: tuple[MeasuredFault, ...]
    measured_kinds: tuple[Kind, ...]


def kind_of(name: str) -> Kind | None:
    for pattern, kind in KIND_PATTERNS:
        if pattern.search(name):
            return kind
    return None


def _problem(exc: ValidationError) -> str:
    errors = exc.errors()
    first = errors[0]
    where = ".".join(str(p) for p in first["loc"]) or "(top level)"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"not a game-day report: {where}: {first['msg']}{more}"


def load_report(path: Path) -> dict[str, object]:
    """The report's JSON; a SpecError naming the file if it cannot be read (util/parsing: not UTF-8, not JSON, an
    integer past int's digit limit, nesting deeper than the parser recurses)."""
    data = parse_json(read_text(path), str(path))
    if not isinstance(data, dict):
        raise SpecError(str(path), ["not a game-day report: the top level must be an object"])
    return data


def times_from_report(data: dict[str, object], baseline: Preset, source: str = "report") -> GameDayTimes:
    """The measured times per kind over `baseline`'s; a SpecError naming `source` if the report is malformed."""
    try:
        report = _Report.model_validate(data)
    except ValidationError as exc:
        raise SpecError(source, [_problem(exc)]) from None
    faults, by_kind = [], {}
    for i, f in enumerate(report.faults):
        kind = kind_of(f.name)
        ttd, ttr = f.time_to_detect_s, f.time_to_recover_s
        if ttd is not None and ttr is not None and ttr < ttd:
            raise SpecError(source, [f"faults.{i}.time_to_recover_s: {ttr:g} is before its detection ({ttd:g})"])
        if kind is None:
            why = "a control-plane fault: a training job runs through it"
            faults.append(MeasuredFault(f.name, f.verdict, None, ttd, None, False, why))
        elif ttd is None or ttr is None:
            why = f"not {'detected' if ttd is None else 'recovered'}: nothing measured"
            faults.append(MeasuredFault(f.name, f.verdict, kind, ttd, None, False, why))
        else:
            faults.append(MeasuredFault(f.name, f.verdict, kind, ttd, ttr - ttd, True))
            by_kind.setdefault(kind, []).append((ttd, ttr - ttd))
    timing = dict(baseline.timing)
    for kind, measured in by_kind.items():
        detect = sum(m[0] for m in measured) / len(measured)
        recover = sum(m[1] for m in measured) / len(measured)
        names = ", ".join(f.name for f in faults if f.used and f.kind == kind)
        timing[kind] = KindTiming(detect, detect, recover, f"game day {report.gameday}: {names}")
    return GameDayTimes(report.gameday, timing, tuple(faults), tuple(k for k in timing if k in by_kind))


def read_gameday(path: Path, baseline: Preset) -> GameDayTimes:
    return times_from_report(load_report(path), baseline, str(path))
