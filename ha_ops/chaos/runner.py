"""Runs one Chaos Toolkit experiment with chaostoolkit-lib against a cluster, and guarantees its rollbacks."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from ha_ops.chaos import faults, target
from ha_ops.cluster.base import Cluster
from ha_ops.errors import SpecError
from ha_ops.util.parsing import parse_json, parse_yaml, read_text

log = logging.getLogger(__name__)


def load_experiment(
    path: Path, cluster: dict[str, str] | None = None, overrides: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Read a JSON or YAML experiment, point it at a cluster (`cluster`: ha_ops.chaos.target.configuration_for's
    entries; default the lab `lab`), apply configuration overrides, and validate it."""
    from chaoslib.exceptions import InvalidActivity, InvalidExperiment
    from chaoslib.experiment import ensure_experiment_is_valid

    text = read_text(path)
    experiment = parse_json(text, str(path)) if str(path).endswith(".json") else parse_yaml(text, str(path))
    if not isinstance(experiment, dict):
        raise SpecError(str(path), ["an experiment is a mapping (title, description, method, ...)"])
    problems = shape_problems(experiment)
    if problems:
        raise SpecError(str(path), problems)
    configuration = experiment.setdefault("configuration", {})
    configuration.update(overrides or {})
    for key in (target.TARGET, target.INVENTORY, target.SPEC):
        configuration.pop(key, None)
    configuration.update(cluster or target.configuration_for())
    try:
        ensure_experiment_is_valid(experiment)
    except (InvalidExperiment, InvalidActivity) as exc:
        raise SpecError(str(path), [str(exc)]) from None
    except (TypeError, AttributeError, KeyError, ValueError, RecursionError) as exc:
        # A shape chaostoolkit-lib assumes and shape_problems does not check yet: refused, never a traceback.
        raise SpecError(
            str(path), [f"chaostoolkit-lib cannot read the experiment ({type(exc).__name__}: {exc})"]
        ) from None
    return experiment


def shape_problems(experiment: dict[str, Any]) -> list[str]:
    """What chaostoolkit-lib's own check would crash on rather than name (it assumes the sections' types):
    `configuration: 5`, `method: null`, an activity that is not a mapping."""
    problems = []
    sections = (
        ("configuration", dict, "a mapping"),
        ("steady-state-hypothesis", dict, "a mapping"),
        ("method", list, "a list of activities"),
        ("rollbacks", list, "a list of actions"),
    )
    for key, kind, what in sections:
        if key in experiment and not isinstance(experiment[key], kind):
            problems.append(f"{key}: must be {what}, not {type(experiment[key]).__name__}")
    if experiment.get("method") in (None, []) and "method: must be" not in " ".join(problems):
        problems.append("method: an experiment needs at least one activity")
    hypothesis = experiment.get("steady-state-hypothesis")
    if isinstance(hypothesis, dict) and "probes" in hypothesis and not isinstance(hypothesis["probes"], list):
        problems.append("steady-state-hypothesis.probes: must be a list of probes")
    lists = [("method", experiment.get("method")), ("rollbacks", experiment.get("rollbacks"))]
    if isinstance(hypothesis, dict):
        lists.append(("steady-state-hypothesis.probes", hypothesis.get("probes")))
    for key, activities in lists:
        for i, activity in enumerate(activities if isinstance(activities, list) else []):
            if not isinstance(activity, dict):
                problems.append(f"{key}[{i}]: an activity is a mapping (type, name, provider), not "
                                f"{type(activity).__name__}")  # fmt: skip
            else:
                problems += _activity_problems(f"{key}[{i}]", activity)
    return problems


_TEXT = (str,)
# The fields chaostoolkit-lib reads from an activity, with the types it assumes (it crashes on others: a list as a
# name is hashed, a float as a module is split, arguments that are not a mapping are copied as one).
_ACTIVITY_FIELDS = {"type": _TEXT, "name": _TEXT, "ref": _TEXT, "pauses": (dict,), "background": (bool,),
                    "controls": (list,)}  # fmt: skip
_PROVIDER_FIELDS = {"type": _TEXT, "module": _TEXT, "func": _TEXT, "path": _TEXT, "url": _TEXT, "method": _TEXT,
                    "arguments": (dict, list, str), "timeout": (int, float, list), "secrets": (list, str)}  # fmt: skip


MAX_PAUSE_S = 86_400.0


def _pause_problem(key: Any, value: Any) -> str | None:
    """Chaos Toolkit pauses `before` and `after` an activity, for a number of seconds (or a ${variable} that is one);
    NaN, infinity or a negative pause was accepted and then slept on (issue 44, finding 8)."""
    if key not in ("before", "after"):
        return "a pause is `before` or `after` an activity"
    if isinstance(value, str):
        return None if re.fullmatch(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}", value) else "a ${variable}, or a number of seconds"
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= MAX_PAUSE_S:
        return f"must be a number of seconds from 0 to {MAX_PAUSE_S:g} (or a ${{variable}})"
    return None


def _activity_problems(where: str, activity: dict[str, Any]) -> list[str]:
    problems = [f"{where}.{name}: must be {' or '.join(t.__name__ for t in kinds)}, not {type(activity[name]).__name__}"
                for name, kinds in _ACTIVITY_FIELDS.items()
                if name in activity and not isinstance(activity[name], kinds)]  # fmt: skip
    pauses = activity.get("pauses")
    if isinstance(pauses, dict):
        problems += [f"{where}.pauses.{k}: {why}" for k, v in pauses.items() if (why := _pause_problem(k, v))]
    provider = activity.get("provider")
    if "provider" in activity and not isinstance(provider, dict):
        problems.append(f"{where}.provider: must be a mapping (type, module, func, arguments)")
    elif isinstance(provider, dict):
        problems += [f"{where}.provider.{name}: must be {' or '.join(t.__name__ for t in kinds)}, "
                     f"not {type(provider[name]).__name__}"
                     for name, kinds in _PROVIDER_FIELDS.items()
                     if name in provider and not isinstance(provider[name], kinds)]  # fmt: skip
        if provider.get("type") == "python" and isinstance(provider.get("arguments"), list | str):
            problems.append(f"{where}.provider.arguments: a python provider's arguments are a mapping")
    return problems


def plan(experiment: dict[str, Any]) -> list[str]:
    """What a run would do, in order (for --dry-run)."""
    steps = []
    hypothesis = experiment.get("steady-state-hypothesis") or {}
    steps += [f"steady state: {p.get('name')}" for p in hypothesis.get("probes", [])]
    steps += [f"{a.get('type')}: {a.get('name')}" for a in experiment.get("method", [])]
    steps += [f"steady state again: {p.get('name')}" for p in hypothesis.get("probes", [])]
    steps += [f"rollback: {a.get('name')}" for a in experiment.get("rollbacks", [])]
    return steps


def guard_production(cluster: Cluster, confirmed: bool) -> None:
    """A cluster whose spec or inventory says it is production takes faults only with an explicit confirmation."""
    if cluster.production and not confirmed:
        raise SpecError(
            cluster.name,
            ["production: true: injecting faults into a production cluster needs --confirm-production"],
        )


def preflight(experiment: dict[str, Any], cluster: Cluster) -> None:
    """Every action planned without being run (ha_ops.chaos.dryrun): each target host reached, each interface,
    service, capability and BMC credential checked. Raises the first problem (a HaOpsError with its exit code)
    before anything is injected."""
    from ha_ops.chaos.dryrun import plan_commands

    plan_commands(experiment, cluster)


def run(experiment: dict[str, Any], cluster: Cluster, roll_back: bool = True) -> dict[str, Any]:
    """Run the experiment; whatever its fate (hypothesis violated, activity failed, Ctrl-C), every fault it left
    journaled is rolled back before this returns. With `roll_back=False` the faults stay (journaled) for the caller
    to undo: a runbook's manual steps are followed while the failure still holds."""
    from chaoslib.experiment import run_experiment

    strategy = "always" if roll_back else "never"
    leftover: list[str] = []
    try:
        with target.using(cluster, experiment.get("configuration", {})):
            journal = run_experiment(experiment, settings={"runtime": {"rollbacks": {"strategy": strategy}}})
    except BaseException:
        roll_back = True  # interrupted: nothing may outlive the run
        raise
    finally:
        if roll_back:
            leftover = faults.cleanup(cluster)
            if leftover:
                log.warning("rolled back faults the experiment left behind: %s", ", ".join(leftover))
    journal["ha_ops_cleanup"] = leftover
    return journal
