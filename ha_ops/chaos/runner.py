"""Runs one Chaos Toolkit experiment with chaostoolkit-lib against a cluster, and guarantees its rollbacks."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import yaml

from ha_ops.chaos import faults, target
from ha_ops.cluster.base import Cluster
from ha_ops.errors import SpecError

log = logging.getLogger(__name__)


def load_experiment(
    path: Path, cluster: dict[str, str] | None = None, overrides: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Read a JSON or YAML experiment, point it at a cluster (`cluster`: ha_ops.chaos.target.configuration_for's
    entries; default the lab `lab`), apply configuration overrides, and validate it."""
    from chaoslib.exceptions import InvalidActivity, InvalidExperiment
    from chaoslib.experiment import ensure_experiment_is_valid

    try:
        text = Path(path).read_text()
        experiment = json.loads(text) if str(path).endswith(".json") else yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise SpecError(str(path), [f"cannot read the experiment: {exc}"]) from None
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
            elif "provider" in activity and not isinstance(activity["provider"], dict):
                problems.append(f"{key}[{i}].provider: must be a mapping (type, module, func, arguments)")
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
