"""A discrete-event goodput simulator: one training job on N GPUs for D days, many replications at once.

Per replication, failures arrive as a Poisson process per cause (failures.failure_mix: the rates add, so the
total count is Poisson and each failure's cause is drawn in proportion to its rate). The job runs in cycles of
`interval` compute then a blocking checkpoint write of `cost`; at a failure it loses the exact time since its
last completed checkpoint (compute and any half-written checkpoint), then stays down for detection + recovery
(presets.KindTiming of the cause's kind), a wait when the failed node must leave the job and no spare is free
(until a repaired node returns, or its own repair), then the restart. A failure while the job is already down
consumes a spare all the same and extends the downtime if its own recovery ends later.

Spares: S nodes. A node that leaves the job (failures.RecoveryPath.node_out) is replaced by a free spare and
becomes one itself once repaired (exponential repair times, mean RecoveryPath.repair_s).

Replications are vectorised: the loop runs over the k-th failure of every replication at once, so 1,000
replications of the Llama 3 run (about 420 failures each) take a few hundred numpy steps. Randomness comes only
from the Generator passed in, and every random draw is made before the loop with shapes that depend only on the
failure mix: two scenarios run with the same seed see the same failures (common random numbers), so their
difference is measured per replication (compare).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ha_ops.plan.checkpoint import daly_interval
from ha_ops.plan.failures import DAY, PATHS, CauseRate, Kind, RecoveryPath
from ha_ops.plan.presets import KindTiming, Preset

PARTS = ("rework", "detection", "recovery", "spare wait", "restart", "checkpoint writes")


@dataclass(frozen=True)
class Scenario:
    gpus: int
    days: float
    checkpoint_interval_s: float
    checkpoint_cost_s: float
    restart_s: float
    spares: int  # nodes
    timing: Mapping[Kind, KindTiming]
    mix: tuple[CauseRate, ...]
    gpus_per_node: int = 8
    paths: Mapping[str, RecoveryPath] = field(default_factory=lambda: dict(PATHS))

    def check(self) -> None:
        if self.gpus <= 0 or self.gpus_per_node <= 0 or self.days <= 0:
            raise ValueError("the job needs GPUs, nodes of at least one GPU and a positive number of days")
        if self.checkpoint_interval_s <= 0 or self.checkpoint_cost_s < 0 or self.restart_s < 0 or self.spares < 0:
            raise ValueError("the interval must be positive; the cost, the restart and the spares not negative")
        if not self.mix:
            raise ValueError("no failure causes")
        missing = {c.cause.kind for c in self.mix} - set(self.timing)
        if missing:
            raise ValueError(f"no timing for {', '.join(sorted(missing))}")


@dataclass(frozen=True)
class Estimate:
    """A mean over replications with its 95% confidence interval (normal approximation) and the spread."""

    mean: float
    low: float
    high: float
    p5: float
    p95: float

    @classmethod
    def of(cls, values: np.ndarray) -> Estimate:
        n = len(values)
        mean = float(values.mean())
        half = 1.96 * float(values.std(ddof=1)) / float(np.sqrt(n)) if n > 1 else 0.0
        p5, p95 = np.percentile(values, [5, 95])
        return cls(mean, mean - half, mean + half, float(p5), float(p95))

    def as_dict(self, digits: int = 6) -> dict[str, float]:
        return {k: round(v, digits) for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class SimResult:
    scenario: Scenario
    replications: int
    interruptions: Estimate
    interruptions_while_down: Estimate
    ettr: Estimate  # productive training time / wall-clock time, the job's view
    goodput: Estimate  # useful GPU-hours / GPU-hours of the job and its spares, the cluster's view
    useful_gpu_hours: Estimate
    lost_gpu_hours_by_cause: dict[str, float]  # mean per replication: rework and downtime each failure caused
    lost_gpu_hours_by_part: dict[str, float]  # the same split by what the time went on, plus checkpoint writes
    per_replication_ettr: np.ndarray = field(repr=False)
    per_replication_goodput: np.ndarray = field(repr=False)


def simulate(scenario: Scenario, replications: int, rng: np.random.Generator) -> SimResult:
    scenario.check()
    if replications < 1:
        raise ValueError("at least one replication")
    s, r_n = scenario, replications
    horizon = s.days * DAY
    causes = [c.cause for c in s.mix]
    rates = np.array([c.per_gpu_s for c in s.mix]) * s.gpus  # failures per second of the whole job
    timing = [s.timing[c.kind] for c in causes]
    lo = np.array([t.detect_min_s for t in timing])
    span = np.array([t.detect_max_s - t.detect_min_s for t in timing])
    recover = np.array([t.recover_s for t in timing])
    node_out = np.array([s.paths[c.path].node_out for c in causes])
    repair_mean = np.array([s.paths[c.path].repair_s for c in causes])

    # Every random draw, before the loop (see the module's docstring).
    counts = rng.poisson(rates.sum() * horizon, size=r_n)
    k_max = int(counts.max()) if r_n else 0
    times = rng.uniform(0.0, horizon, size=(r_n, k_max))
    times[np.arange(k_max)[None, :] >= counts[:, None]] = np.inf  # padding sorts last and never happens
    times.sort(axis=1)
    weights = rates / rates.sum() if rates.sum() > 0 else np.full(len(causes), 1.0 / len(causes))
    cause = rng.choice(len(causes), size=(r_n, k_max), p=weights)
    detect = lo[cause] + span[cause] * rng.random((r_n, k_max))
    repair = repair_mean[cause] * rng.exponential(1.0, size=(r_n, k_max))

    rows = np.arange(r_n)
    cycle = s.checkpoint_interval_s + s.checkpoint_cost_s
    up_at = np.zeros(r_n)  # when the job (re)started, or will
    free_at = np.zeros((r_n, s.spares))  # when each spare is (again) free to stand in
    productive = np.zeros(r_n)
    writes = np.zeros(r_n)
    parts = np.zeros((r_n, 5))  # rework, detection, recovery, spare wait, restart
    lost = np.zeros((r_n, len(causes)))
    while_down = np.zeros(r_n)
    for k in range(k_max):
        c = cause[:, k]
        valid = times[:, k] < horizon
        t = np.where(valid, times[:, k], 0.0)  # padding stays finite (inf - inf is nan); masked below
        running = valid & (t >= up_at)
        # The work since the last completed checkpoint is lost; the completed cycles are kept.
        elapsed = np.where(running, t - up_at, 0.0)
        cycles = np.floor(elapsed / cycle)
        rework = elapsed - cycles * cycle
        productive += cycles * s.checkpoint_interval_s
        writes += cycles * s.checkpoint_cost_s
        need = t + detect[:, k] + recover[c]  # the node is out and the job wants its replacement
        out = valid & node_out[c]
        if s.spares:
            j = free_at.argmin(axis=1)
            first_free = free_at[rows, j]
            ready = np.minimum(np.maximum(first_free, need), need + repair[:, k])
            # The failed node is repaired and becomes a spare; a spare that stood in is now in the job.
            free_at[rows[out], j[out]] = np.maximum(first_free, need + repair[:, k])[out]
        else:
            ready = need + repair[:, k]
        wait = np.where(out, ready - need, 0.0)
        new_up = need + wait + s.restart_s
        full = new_up - t
        start = np.where(running, t, up_at)  # down already: only an extension of the downtime counts
        end = np.where(running, new_up, np.maximum(up_at, new_up))
        down = np.where(valid, np.clip(np.minimum(end, horizon) - np.minimum(start, horizon), 0.0, None), 0.0)
        scale = np.divide(down, full, out=np.zeros(r_n), where=full > 0)  # instant recovery: nothing to split
        parts[:, 0] += rework
        parts[:, 1] += detect[:, k] * scale
        parts[:, 2] += recover[c] * scale
        parts[:, 3] += wait * scale
        parts[:, 4] += s.restart_s * scale
        lost[rows, c] += np.where(valid, rework + down, 0.0)
        while_down += valid & ~running
        up_at = np.where(valid, end, up_at)
    # The run's end: what it did since its last restart counts (nothing failed it).
    elapsed = np.clip(horizon - up_at, 0.0, None)
    cycles = np.floor(elapsed / cycle)
    phase = elapsed - cycles * cycle
    productive += cycles * s.checkpoint_interval_s + np.minimum(phase, s.checkpoint_interval_s)
    writes += cycles * s.checkpoint_cost_s + np.clip(phase - s.checkpoint_interval_s, 0.0, None)

    to_gpu_hours = s.gpus / 3600.0
    ettr = productive / horizon
    goodput = productive * s.gpus / ((s.gpus + s.spares * s.gpus_per_node) * horizon)
    by_cause: dict[str, float] = {}
    for i, cause_ in enumerate(causes):
        by_cause[cause_.name] = by_cause.get(cause_.name, 0.0) + float(lost[:, i].mean()) * to_gpu_hours
    by_part = {name: float(parts[:, i].mean()) * to_gpu_hours for i, name in enumerate(PARTS[:5])}
    by_part["checkpoint writes"] = float(writes.mean()) * to_gpu_hours
    return SimResult(
        scenario=s,
        replications=r_n,
        interruptions=Estimate.of(counts.astype(float)),
        interruptions_while_down=Estimate.of(while_down),
        ettr=Estimate.of(ettr),
        goodput=Estimate.of(goodput),
        useful_gpu_hours=Estimate.of(productive * to_gpu_hours),
        lost_gpu_hours_by_cause=dict(sorted(by_cause.items(), key=lambda kv: -kv[1])),
        lost_gpu_hours_by_part=by_part,
        per_replication_ettr=ettr,
        per_replication_goodput=goodput,
    )


def compare(a: SimResult, b: SimResult) -> Estimate:
    """a's goodput minus b's, per replication: meaningful when both ran with the same seed and failure mix (the
    same failures), where it is far tighter than the difference of two independent means."""
    if a.replications != b.replications:
        raise ValueError("compare runs of as many replications, with the same seed")
    return Estimate.of(a.per_replication_goodput - b.per_replication_goodput)


def mean_mtbf_s(mix: tuple[CauseRate, ...], gpus: int) -> float:
    return 1.0 / (gpus * sum(c.per_gpu_s for c in mix))


def preset_scenario(preset: Preset, mix: tuple[CauseRate, ...]) -> Scenario:
    """The preset's cluster as it stands (its GPUs, days, costs, spares and timings), checkpointing at Daly's
    interval for the mix's MTBF."""
    return Scenario(
        gpus=preset.gpus,
        days=preset.days,
        checkpoint_interval_s=daly_interval(mean_mtbf_s(mix, preset.gpus), preset.checkpoint_cost_s),
        checkpoint_cost_s=preset.checkpoint_cost_s,
        restart_s=preset.restart_s,
        spares=preset.spares_for(preset.gpus, preset.gpus_per_node),
        timing=preset.timing,
        mix=mix,
        gpus_per_node=preset.gpus_per_node,
    )


def scenario_dict(s: Scenario) -> dict[str, Any]:
    return {
        "gpus": s.gpus,
        "gpus_per_node": s.gpus_per_node,
        "nodes": -(-s.gpus // s.gpus_per_node),
        "spares": s.spares,
        "days": s.days,
        "mtbf_s": round(mean_mtbf_s(s.mix, s.gpus), 3),
        "checkpoint_interval_s": round(s.checkpoint_interval_s, 3),
        "checkpoint_cost_s": s.checkpoint_cost_s,
        "restart_s": s.restart_s,
        "timing": {
            kind: dict(detect_min_s=t.detect_min_s, detect_max_s=t.detect_max_s, recover_s=t.recover_s, source=t.source)
            for kind, t in s.timing.items()
        },
    }


def result_dict(r: SimResult) -> dict[str, Any]:
    """The result as plain data (the CLI's --json): estimates as {mean, low, high, p5, p95}."""
    return {
        "scenario": scenario_dict(r.scenario),
        "replications": r.replications,
        "interruptions": r.interruptions.as_dict(3),
        "interruptions_while_down": r.interruptions_while_down.as_dict(3),
        "ettr": r.ettr.as_dict(),
        "goodput": r.goodput.as_dict(),
        "useful_gpu_hours": r.useful_gpu_hours.as_dict(1),
        "lost_gpu_hours_by_cause": {k: round(v, 1) for k, v in r.lost_gpu_hours_by_cause.items()},
        "lost_gpu_hours_by_part": {k: round(v, 1) for k, v in r.lost_gpu_hours_by_part.items()},
    }


__all__ = [
    "PARTS",
    "Estimate",
    "Scenario",
    "SimResult",
    "compare",
    "mean_mtbf_s",
    "preset_scenario",
    "result_dict",
    "scenario_dict",
    "simulate",
]
