"""Runbook verification: inject the failure the runbook is about, check every claim it makes about recovery (each
within its stated time), run every manual command it tells the engineer to run while the failure still holds (the
fault is undone only afterwards), and name the steps that are stale.

A runbook is Markdown with YAML front matter:
    id, title
    trigger: {experiment: PATH (relative to the runbook), vars: {...}}
    checks: [{claim, probe, arguments, equals, negate, within_s, after_manual}]   probes of ha_ops.chaos.probes;
            checked in order (a claim is looked for once the one before it held), each within `within_s` of the
            failure (or of the manual steps, for `after_manual` claims)
    manual: [{step, run, lab_run}]  shell commands: `run` as an engineer types it on a real cluster, with the
                             placeholders of ha_ops.runbooks.placeholders ({ssh:HOST}, {on:HOST}, {spec}, ...);
                             `lab_run` instead in the lab, only where the lab truly differs
    cases: [{name, trigger, checks, manual}]  other forms of the same failure (a primary cut off rather than hung),
                             each verified in turn after the main one, its steps named "NAME: ..."
"""

from __future__ import annotations

import logging
import shlex
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, field_validator

from ha_ops.chaos import faults, hold, runner, target
from ha_ops.chaos.plan import UNSET, Condition, baselines_of
from ha_ops.cluster.base import Cluster
from ha_ops.cluster.gpu import CapabilityMissing
from ha_ops.errors import SpecError
from ha_ops.runbooks.placeholders import fill, template_problem
from ha_ops.spec.load import validation_problems
from ha_ops.util.models import ConfigModel
from ha_ops.util.parsing import existing_file, parse_yaml, read_text

log = logging.getLogger(__name__)


class Trigger(ConfigModel):
    experiment: Path
    vars: dict[str, object] = Field(default_factory=dict)
    max_faults: int = Field(1, ge=1, le=4, description="Faults the experiment has in at once (two faults: 2).")


class Check(Condition):
    claim: str
    # Within a day at most: a claim "within 1e308 s" was accepted, and could never be found stale (issue 44)
    within_s: float = Field(30.0, gt=0, le=86_400)
    after_manual: bool = Field(False, description="Checked once the manual steps ran (timed from then).")


class ManualStep(ConfigModel):
    step: str
    run: str = Field(description="What the engineer runs on a real cluster (ha_ops.runbooks.placeholders).")
    lab_run: str | None = Field(None, description="Run instead in the lab, only where the lab truly differs.")
    timeout_s: float = Field(60.0, gt=0, le=86_400)  # (as a check's within_s)

    @field_validator("run", "lab_run")
    @classmethod
    def _fillable(cls, template: str | None) -> str | None:
        # (checked when the runbook loads: `run: '{0}'` passed, and failed only when the step ran; issue 44)
        if template is not None and (problem := template_problem(template)) is not None:
            raise ValueError(problem)
        return template


class Case(ConfigModel):
    """Another form of the runbook's failure, with its own trigger and claims."""

    name: str = Field(min_length=1)
    trigger: Trigger
    checks: list[Check] = Field(min_length=1)
    manual: list[ManualStep] = Field(default_factory=list)


class Runbook(ConfigModel):
    id: str
    title: str
    trigger: Trigger
    checks: list[Check] = Field(min_length=1)
    manual: list[ManualStep] = Field(default_factory=list)
    cases: list[Case] = Field(default_factory=list)

    def forms(self) -> list[Case]:
        """The failure as the runbook's main trigger names it, then each of its cases."""
        main = Case.model_construct(name="", trigger=self.trigger, checks=self.checks, manual=self.manual)
        return [main, *self.cases]


def load_runbook(path: Path) -> tuple[Runbook, str]:
    """The runbook's front matter (validated) and its Markdown body."""
    text = read_text(path)
    if not text.startswith("---\n") or "\n---\n" not in text[4:]:
        raise SpecError(str(path), ["a runbook starts with YAML front matter between '---' lines"])
    front, body = text[4:].split("\n---\n", 1)
    data = parse_yaml(front, f"{path}: front matter")
    try:
        runbook = Runbook.model_validate(data)
    except ValidationError as exc:
        raise SpecError(str(path), validation_problems(exc)) from None
    except RecursionError:
        raise SpecError(str(path), ["front matter nested too deeply"]) from None
    resolved = []
    for where, trigger in [("trigger", runbook.trigger), *((f"cases.{i}.trigger", c.trigger)
                                                           for i, c in enumerate(runbook.cases))]:  # fmt: skip
        experiment = existing_file(Path(path).parent, trigger.experiment, f"{where}.experiment", str(path))
        resolved.append(trigger.model_copy(update={"experiment": experiment}))
    for heading in ("## Symptoms", "## Impact", "## What recovers automatically", "## Manual steps"):
        if heading not in body:
            raise SpecError(str(path), [f"the body has no '{heading}' section"])
    cases = [c.model_copy(update={"trigger": t}) for c, t in zip(runbook.cases, resolved[1:], strict=True)]
    return runbook.model_copy(update={"trigger": resolved[0], "cases": cases}), body


@dataclass
class StepResult:
    kind: str  # "check" or "manual"
    name: str
    ok: bool
    detail: str = ""
    as_written: bool = True  # a manual step: its `run` ran (not a lab_run override)


@dataclass
class Verification:
    runbook: str
    steps: list[StepResult] = field(default_factory=list)
    # Why the runbook cannot be verified on this cluster (its failure needs a capability the cluster lacks, such as
    # the lab's driver builds): nothing was injected, nothing ran, and it is not counted as up to date.
    unverifiable: str | None = None

    @property
    def stale(self) -> list[StepResult]:
        return [s for s in self.steps if not s.ok]

    @property
    def manual(self) -> list[StepResult]:
        return [s for s in self.steps if s.kind == "manual"]

    @property
    def as_written(self) -> int:
        """Manual steps that ran exactly as the runbook tells the engineer (no lab_run override)."""
        return sum(1 for s in self.manual if s.as_written)


def _wait_claim(check: Check, configuration: dict[str, Any], since: float, baseline: Any = UNSET) -> StepResult:
    deadline = since + check.within_s
    while time.time() < deadline:
        if check.holds(configuration, baseline):
            return StepResult("check", check.claim, True, f"held after {time.time() - since:.1f} s")
        time.sleep(0.2)
    return StepResult("check", check.claim, False, f"did not hold within {check.within_s:g} s")


def verify(path: Path, cluster: Cluster, configuration: dict[str, str]) -> Verification:
    """Verify the runbook against `cluster`, which `configuration` (ha_ops.chaos.target.configuration_for) names."""
    with target.using(cluster, configuration):
        return _verify(path, cluster, configuration)


def _verify(path: Path, cluster: Cluster, configuration: dict[str, str]) -> Verification:
    runbook, _ = load_runbook(path)
    result = Verification(runbook.id)
    forms = runbook.forms()
    experiments = [runner.load_experiment(f.trigger.experiment, configuration, dict(f.trigger.vars)) for f in forms]
    try:
        for form, experiment in zip(forms, experiments, strict=True):
            with faults.limit(form.trigger.max_faults):
                runner.preflight(experiment, cluster)  # every target reachable and able, before any failure goes in
    except CapabilityMissing as exc:
        result.unverifiable = str(exc)
        return result
    for form, experiment in zip(forms, experiments, strict=True):
        prefix = f"{form.name}: " if form.name else ""
        with faults.limit(form.trigger.max_faults):
            found = _verify_form(form, experiment, cluster, configuration)
        for step in found:
            step.name = prefix + step.name
            result.steps.append(step)
    return result


def _verify_form(form: Case, experiment: Any, cluster: Cluster, configuration: dict[str, str]) -> list[StepResult]:
    steps: list[StepResult] = []
    claims: list[StepResult] = []
    experiment_over = threading.Event()
    baselines = baselines_of(list(form.checks), configuration)  # for claims that wait for a change

    def check_claims() -> None:
        # chaostoolkit-lib must run in the main thread (it installs signal handlers): the claims are checked here.
        injected = _wait_injected(cluster, experiment_over)
        if injected is None:
            claims.append(StepResult("check", "the failure is injected", False, "no fault was recorded"))
            return
        for i, check in enumerate(form.checks):
            if not check.after_manual:
                claims.append(_wait_claim(check, configuration, injected, baselines.get(i, UNSET)))
        hold.end_early()  # every claim about the failure is judged: the manual steps may start (the fault stays in)

    checker = threading.Thread(target=check_claims, daemon=True)
    checker.start()
    try:
        try:
            # The failure stays in place after the experiment: the engineer follows the runbook during the incident.
            with hold.endable():
                runner.run(experiment, cluster, roll_back=False)
        except Exception as exc:
            claims.append(StepResult("check", "the trigger experiment runs", False, str(exc)))
        finally:
            experiment_over.set()
            checker.join(max((c.within_s for c in form.checks), default=0) + 60)
        steps.extend(claims)
        values = cluster.placeholders() if hasattr(cluster, "placeholders") else {}
        for step in form.manual:
            steps.append(_run_manual(step, cluster, values))
        manual_done = time.time()
        for i, check in enumerate(form.checks):
            if check.after_manual:
                steps.append(_wait_claim(check, configuration, manual_done, baselines.get(i, UNSET)))
    finally:
        faults.cleanup(cluster)  # whatever the manual steps did not repair
    return steps


def _run_manual(step: ManualStep, cluster: Cluster, values: dict[str, object] | None = None) -> StepResult:
    """Run one manual step; `values`: the cluster's placeholders (asked once per runbook by the caller)."""
    override = step.lab_run is not None and hasattr(cluster, "lab")
    template = (step.lab_run or step.run) if override else step.run
    if values is None:
        values = cluster.placeholders() if hasattr(cluster, "placeholders") else {}
    try:
        command = fill(template, values)
    except (KeyError, ValueError) as exc:
        detail = f"{cluster.name} gives no value for {exc} in {template!r}"
        return StepResult("manual", step.step, False, detail, as_written=not override)
    proc = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=step.timeout_s)
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [""]
    detail = f"{shlex.quote(command)} exited {proc.returncode}: {tail[0][:160]}"
    return StepResult("manual", step.step, proc.returncode == 0, detail, as_written=not override)


def _wait_injected(cluster: Cluster, done: threading.Event, timeout: float = 60.0) -> float | None:
    """When the trigger's first fault went in (from the fault journal), or None if it never did."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        injected = faults.injected_at(faults.active(cluster))
        if injected is not None:
            return injected
        if done.is_set():
            return None
        time.sleep(0.05)
    return None
