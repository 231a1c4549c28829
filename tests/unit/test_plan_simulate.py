"""The goodput simulator: validated against the Llama 3 run (arXiv 2407.21783: 419 unexpected interruptions in 54
days on 16,384 GPUs, effective training time above 90%) and against Kokolis et al.'s closed-form ETTR, with its
accounting, its randomness and its spares checked. Fewer replications than the bench (tests/bench/plan_simulate.py
times the 1,000)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from ha_ops.plan.ettr import ettr_kokolis
from ha_ops.plan.failures import DAY, FLEETS, PATHS, failure_mix
from ha_ops.plan.presets import PRESETS, KindTiming, Preset
from ha_ops.plan.simulate import Scenario, compare, mean_mtbf_s, preset_scenario, result_dict, simulate

MIX = failure_mix()


def scenario(preset: Preset, **changes: object) -> Scenario:
    return dataclasses.replace(preset_scenario(preset, MIX), **changes)


def run(s: Scenario, replications: int = 200, seed: int = 7):
    return simulate(s, replications, np.random.default_rng(seed))


def test_llama3_16k_has_419_interruptions_and_an_effective_training_time_above_90_percent() -> None:
    result = run(scenario(PRESETS["llama3-16k"]))
    assert result.interruptions.mean == pytest.approx(419, rel=0.10)
    assert result.ettr.mean > 0.90
    assert result.ettr.low < result.ettr.mean < result.ettr.high
    assert result.ettr.p5 < result.ettr.mean < result.ettr.p95
    assert max(result.lost_gpu_hours_by_cause, key=result.lost_gpu_hours_by_cause.get) == "Faulty GPU"


def test_it_agrees_with_kokolis_closed_form_when_every_failure_costs_the_same() -> None:
    # Fixed detection, no spare waits: every failure costs u0 = detect + recover + restart, as the closed form has.
    fixed = {k: KindTiming(20.0, 20.0, 40.0) for k in ("gpu", "host", "network", "software")}
    s = scenario(PRESETS["llama3-16k"], timing=fixed, spares=1000, restart_s=120.0)
    result = run(s)
    rate = 1.0 / mean_mtbf_s(MIX, s.gpus)  # N_nodes * r_f
    closed = ettr_kokolis(1, rate, 180.0, s.checkpoint_interval_s, s.checkpoint_cost_s)
    # The simulator loses the exact time since the last checkpoint: (dt + w) / 2 on average, not dt / 2.
    assert result.ettr.mean == pytest.approx(closed, abs=0.005)


def test_every_second_is_accounted_for() -> None:
    s = scenario(PRESETS["nhc-5min"], gpus=1024, days=20, spares=1)
    result = run(s, 100)
    total = result.useful_gpu_hours.mean + sum(result.lost_gpu_hours_by_part.values())
    assert total == pytest.approx(s.gpus * s.days * 24, rel=1e-9)
    by_cause = sum(result.lost_gpu_hours_by_cause.values())
    downtime_and_rework = sum(v for k, v in result.lost_gpu_hours_by_part.items() if k != "checkpoint writes")
    assert by_cause == pytest.approx(downtime_and_rework, rel=1e-9)


def test_without_failures_only_checkpoints_cost_and_rework_is_the_time_since_the_last_one() -> None:
    calm = tuple(dataclasses.replace(c, per_gpu_s=0.0 if i else 1e-12) for i, c in enumerate(MIX))
    s = scenario(PRESETS["ha-ops"], gpus=8, days=1, mix=calm, checkpoint_interval_s=570.0, checkpoint_cost_s=30.0)
    result = run(s, 10)
    assert result.interruptions.mean == 0
    assert result.ettr.mean == pytest.approx(0.95, abs=0.01)  # 570 of every 600 s
    # Instant recovery, no writes: each failure loses exactly its time since the last checkpoint, uniform over the
    # interval: half of it on average.
    instant = {k: KindTiming(0.0, 0.0, 0.0) for k in ("gpu", "host", "network", "software")}
    s = scenario(PRESETS["ha-ops"], timing=instant, restart_s=0.0, checkpoint_cost_s=0.0, checkpoint_interval_s=600.0)
    result = run(s, 100)
    rework_s = result.lost_gpu_hours_by_part["rework"] * 3600 / s.gpus
    assert rework_s / result.interruptions.mean == pytest.approx(300.0, rel=0.03)
    assert result.lost_gpu_hours_by_part["restart"] == 0


def test_the_same_seed_gives_the_same_failures() -> None:
    s = scenario(PRESETS["llama3-16k"], gpus=2048, days=10)
    a, b, c = run(s, 50, 1), run(s, 50, 1), run(s, 50, 2)
    assert np.array_equal(a.per_replication_ettr, b.per_replication_ettr)
    assert not np.array_equal(a.per_replication_ettr, c.per_replication_ettr)


def test_spares_stand_in_and_their_absence_costs_repair_waits() -> None:
    s = scenario(PRESETS["ha-ops"], gpus=4096, days=30)
    plenty, none = run(dataclasses.replace(s, spares=64), 100), run(dataclasses.replace(s, spares=0), 100)
    assert plenty.lost_gpu_hours_by_part["spare wait"] == 0
    # Replacements take 48 h on average: with no spare the job waits for them.
    assert none.lost_gpu_hours_by_part["spare wait"] > 10 * none.lost_gpu_hours_by_part["restart"]
    assert none.ettr.mean < plenty.ettr.mean - 0.3
    assert none.interruptions_while_down.mean > plenty.interruptions_while_down.mean
    # Spares cost capacity: goodput counts them, ETTR (the job's view) does not.
    assert plenty.goodput.mean == pytest.approx(plenty.ettr.mean * 4096 / (4096 + 64 * 8))
    assert PATHS["replace"].repair_s == 48 * 3600


def test_nhc_polling_loses_goodput_against_ha_ops_on_the_same_failures() -> None:
    ours, nhc = run(scenario(PRESETS["ha-ops"]), 100), run(scenario(PRESETS["nhc-5min"]), 100)
    k8s = run(scenario(PRESETS["k8s-default"]), 100)
    diff = compare(ours, nhc)
    assert 0 < diff.low < diff.mean < diff.high
    # Paired on the same failures, the difference is far tighter than either run's spread.
    assert diff.high - diff.low < (nhc.goodput.high - nhc.goodput.low) / 2
    assert k8s.goodput.mean < nhc.goodput.mean < ours.goodput.mean
    assert ours.lost_gpu_hours_by_part["detection"] < nhc.lost_gpu_hours_by_part["detection"] / 5


def test_result_dict_is_plain_data() -> None:
    data = result_dict(run(scenario(PRESETS["llama3-16k"], gpus=512, days=5), 20))
    assert set(data) >= {"scenario", "replications", "interruptions", "ettr", "goodput", "lost_gpu_hours_by_cause"}
    assert set(data["ettr"]) == {"mean", "low", "high", "p5", "p95"}
    assert data["scenario"]["nodes"] == 64 and data["scenario"]["timing"]["gpu"]["recover_s"] == 20.0
    assert all(isinstance(v, float) for v in data["lost_gpu_hours_by_part"].values())


def test_bad_scenarios_are_refused() -> None:
    with pytest.raises(ValueError):
        run(scenario(PRESETS["ha-ops"], checkpoint_interval_s=0.0))
    with pytest.raises(ValueError, match="no timing"):
        run(scenario(PRESETS["ha-ops"], timing={"gpu": KindTiming(0, 1, 1)}))
    with pytest.raises(ValueError):
        run(scenario(PRESETS["ha-ops"]), 0)
    assert FLEETS["llama3"].per_gpu_s * 16_384 * 54 * DAY == pytest.approx(419)
