"""Game days: a plan of chaos experiments run one after another against a cluster, each measured for time to detect
(its detection condition first holds) and time to recover (its recovery condition holds again), under blast-radius
limits and abort conditions checked continuously, with a workload of jobs accounted after each fault. The plan is
ha_ops.chaos.plan, the reports ha_ops.chaos.report.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from ha_ops.chaos import faults, hold, runner, target, workload
from ha_ops.chaos.plan import GameDayPlan, PlannedFault, all_hold, baselines_of
from ha_ops.cluster.base import Cluster
from ha_ops.errors import SpecError

log = logging.getLogger(__name__)


@dataclass
class FaultResult:
    name: str
    verdict: Literal["passed", "failed", "aborted"] = "failed"
    why: str = ""
    started_at: float = 0.0
    injected_at: float | None = None
    detected_at: float | None = None
    recovered_at: float | None = None
    ended_at: float = 0.0
    experiment_status: str = ""
    deviated: bool | None = None
    timeline: list[tuple[float, str]] = field(default_factory=list)
    rolled_back_at: float | None = None
    jobs: dict[str, Any] | None = None
    journal: dict[str, Any] | None = None  # the experiment's Chaos Toolkit journal, kept beside the report

    @property
    def time_to_detect(self) -> float | None:
        return None if self.detected_at is None or self.injected_at is None else self.detected_at - self.injected_at

    @property
    def time_to_recover(self) -> float | None:
        return None if self.recovered_at is None or self.injected_at is None else self.recovered_at - self.injected_at


def _watch(
    cluster: Cluster,
    configuration: dict[str, Any],
    fault: PlannedFault,
    result: FaultResult,
    stop: threading.Event,
    baselines: tuple[dict[int, Any], dict[int, Any]],
) -> None:
    while not stop.is_set():
        injected = faults.injected_at(faults.active(cluster)) if result.injected_at is None else None
        if injected is not None:
            # The journal records when the fault was in place: detection is measured from there, not from this poll.
            result.injected_at = injected
            result.timeline.append((result.injected_at, "fault injected"))
        if (
            result.injected_at is not None
            and result.detected_at is None
            and all_hold(fault.detect, configuration, baselines[0])
        ):
            result.detected_at = time.time()
            result.timeline.append((result.detected_at, "detected"))
        if (
            result.detected_at is not None
            and result.recovered_at is None
            and all_hold(fault.recover, configuration, baselines[1])
        ):
            result.recovered_at = time.time()
            result.timeline.append((result.recovered_at, "recovered"))
            hold.end_early()  # the recovery came while the fault is in: holding it longer judges nothing more
        stop.wait(0.2)


def _watch_abort(plan: GameDayPlan, configuration: dict[str, Any], aborted: list[str], stop: threading.Event) -> None:
    """The plan's abort conditions, once a second beside the detection loop: a slow one (the storage master's
    health, asked over SSH) must not coarsen the time to detect."""
    while plan.abort_when and not stop.is_set():
        for condition in plan.abort_when:
            if condition.holds(configuration):
                aborted.append(f"abort condition {condition.describe()} holds")
                stop.set()
        stop.wait(1.0)


def _settle(plan: GameDayPlan, configuration: dict[str, Any]) -> str:
    """Wait for the plan's steady state; '' once it holds, else what does not hold."""
    deadline = time.time() + plan.settle_timeout_s
    while True:
        failing = [c.describe() for c in plan.steady if not c.holds(configuration)]
        if not failing:
            return ""
        if time.time() >= deadline:
            return ", ".join(failing)
        time.sleep(0.5)


def run_fault(plan: GameDayPlan, fault: PlannedFault, cluster: Cluster, configuration: dict[str, str]) -> FaultResult:
    result = FaultResult(fault.name, started_at=time.time())
    result.timeline.append((result.started_at, "started"))
    experiment = runner.load_experiment(fault.experiment, configuration, fault.vars)
    unsettled = _settle(plan, configuration)
    if unsettled:
        result.ended_at = time.time()
        result.why = f"the steady state did not return before the fault ({unsettled})"
        return result
    result.timeline.append((time.time(), "steady"))
    baselines = (baselines_of(fault.detect, configuration), baselines_of(fault.recover, configuration))
    jobs: list[str] = []
    job_dir = f"{_shared_dir(cluster)}/gameday/{int(result.started_at)}-{slug(fault.name)}"
    if plan.workload and plan.workload.jobs:
        jobs = workload.submit(cluster, job_dir, plan.workload)
        running = workload.wait_running(cluster, jobs)
        result.timeline.append(
            (time.time(), f"{len(jobs)} jobs {'running' if running else 'submitted, not all running'}")
        )
    stop, aborted = threading.Event(), []
    watcher = threading.Thread(
        target=_watch, args=(cluster, configuration, fault, result, stop, baselines), daemon=True
    )
    guard = threading.Thread(target=_watch_abort, args=(plan, configuration, aborted, stop), daemon=True)
    watcher.start()
    guard.start()
    try:
        # The fault is undone here, not by the experiment's own rollbacks: recovery can then be told from rollback.
        with hold.endable():
            journal = runner.run(experiment, cluster, roll_back=False)
        result.rolled_back_at = time.time()
        faults.cleanup(cluster)
        result.timeline.append((result.rolled_back_at, "fault rolled back"))
        result.journal = journal
        result.experiment_status, result.deviated = journal.get("status", ""), journal.get("deviated")
        deadline = result.started_at + fault.timeout_s
        while time.time() < deadline and result.recovered_at is None and not aborted and watcher.is_alive():
            time.sleep(0.2)
    finally:
        stop.set()
        watcher.join(30)  # a probe may be mid-call (a job submitted to a hung controller)
        guard.join(30)
        faults.cleanup(cluster)
    if jobs and plan.workload:
        account = workload.account(cluster, job_dir, jobs, plan.workload.finish_within_s)
        result.jobs = account.to_dict()
        result.timeline.append((time.time(), "jobs accounted"))
    result.ended_at = time.time()
    result.timeline.append((result.ended_at, "ended"))
    _judge(result, fault, aborted)
    return result


def _shared_dir(cluster: Cluster) -> str:
    shared = getattr(cluster, "shared_dir", None)
    if shared is None:
        raise SpecError(cluster.name, ["ha_ops_shared_dir: a game day's workload needs a folder every GPU node sees "
                                       "(set it in the inventory, or run the plan without a workload)"])  # fmt: skip
    return str(shared)


def slug(name: str) -> str:
    """A name as a file or folder name: lower case, letters and digits, dashes for the rest, at most 40."""
    return "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-")[:40]


def _judge(result: FaultResult, fault: PlannedFault, aborted: list[str]) -> None:
    late = result.recovered_at is not None and result.rolled_back_at is not None
    late = late and fault.recover_while_faulted and result.recovered_at > result.rolled_back_at  # type: ignore[operator]
    jobs = result.jobs or {}
    if aborted:
        result.verdict, result.why = "aborted", aborted[0]
    elif result.injected_at is None:
        result.why = "the fault was never injected"
    elif result.detected_at is None:
        result.why = f"not detected within {fault.timeout_s:g} s"
    elif result.recovered_at is None:
        result.why = f"not recovered within {fault.timeout_s:g} s"
    elif late:
        result.why = "not recovered while the fault lasted: only its rollback restored the steady state"
    elif jobs and not jobs.get("ok"):
        bad = {k: jobs[k] for k in ("lost", "ran_twice", "unfinished", "resumed_behind") if jobs.get(k)}
        result.why = "jobs " + "; ".join(f"{k.replace('_', ' ')}: {', '.join(v)}" for k, v in bad.items())
    elif result.experiment_status != "completed" or result.deviated:
        result.why = f"experiment {result.experiment_status}" + (", steady state violated" if result.deviated else "")
    else:
        result.verdict = "passed"


def run_gameday(
    plan: GameDayPlan,
    cluster: Cluster,
    configuration: dict[str, str],
    progress: Any = None,
    confirm_production: bool = False,
) -> list[FaultResult]:
    """Run the plan against `cluster`, which `configuration` (ha_ops.chaos.target.configuration_for) names."""
    runner.guard_production(cluster, confirm_production)
    results = []
    with faults.limit(plan.limits.max_concurrent_faults), target.using(cluster, configuration):
        for fault in plan.faults:  # every target reachable and able, before the first fault goes in
            runner.preflight(runner.load_experiment(fault.experiment, configuration, fault.vars), cluster)
        for i, fault in enumerate(plan.faults):
            if progress:
                progress(f"[{i + 1}/{len(plan.faults)}] {fault.name}")
            result = run_fault(plan, fault, cluster, configuration)
            results.append(result)
            if progress:
                ttd, ttr = result.time_to_detect, result.time_to_recover
                jobs = result.jobs or {}
                lost = f", jobs lost {len(jobs.get('lost', []))} twice {len(jobs.get('ran_twice', []))}" if jobs else ""
                progress(f"    {result.verdict}: detect {seconds(ttd)}, recover {seconds(ttr)}{lost} {result.why}")
            if result.verdict == "aborted":
                break
            time.sleep(plan.pause_between_s)
    return results


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"
