"""ha_ops.plan's closed forms against their sources: Young (1974), Daly (2006, eq. 37), Kokolis et al. (HPCA 2025,
arXiv 2410.21680) for job MTTF and ETTR, the Llama 3 fleet's rate (arXiv 2407.21783, Table 5), the spares model,
and the durations the CLI takes."""

from __future__ import annotations

import math

import pytest

from ha_ops.errors import SpecError
from ha_ops.plan.checkpoint import daly_interval, plan_checkpoints, young_interval
from ha_ops.plan.durations import format_duration, parse_duration
from ha_ops.plan.ettr import ettr_kokolis, job_mttf_s, optimal_interval_s
from ha_ops.plan.failures import DAY, FLEETS, LLAMA3_INTERRUPTIONS, LLAMA3_TABLE5, PATHS, failure_mix, mtbf_s
from ha_ops.plan.spares import full_capacity_probability, in_repair_probability, plan_spares

HOUR = 3600.0


def test_the_issues_example_young_13_6_and_daly_13_3_minutes() -> None:
    plan = plan_checkpoints(3.1 * HOUR, 30.0)
    assert round(plan.young_s / 60, 1) == 13.6
    assert round(plan.daly_s / 60, 1) == 13.3
    # By hand: sqrt(2 * 30 * 11160) = 818.29 s; x = 30 / 22320; 818.29 * (1 + sqrt(x)/3 + x/9) - 30 = 798.41 s.
    assert plan.young_s == pytest.approx(818.29, abs=0.01)
    assert plan.daly_s == pytest.approx(798.41, abs=0.01)


def test_daly_is_young_plus_higher_order_terms_and_m_once_the_cost_reaches_2m() -> None:
    # A small cost: the higher-order terms vanish and Daly's tends to Young's minus the write.
    assert daly_interval(1e6, 1.0) == pytest.approx(young_interval(1e6, 1.0) - 1.0, rel=1e-3)
    assert daly_interval(100.0, 200.0) == 100.0  # d >= 2M: tau = M
    assert daly_interval(100.0, 250.0) == 100.0
    assert daly_interval(100.0, 199.0) < 100.0 + 199.0
    with pytest.raises(ValueError):
        young_interval(-1.0, 30.0)
    with pytest.raises(ValueError):
        daly_interval(3600.0, 0.0)


def test_llama3s_rate_gives_its_mtbf_and_the_table_sums_to_419() -> None:
    assert LLAMA3_INTERRUPTIONS == 419
    assert {c.path for c in LLAMA3_TABLE5} <= set(PATHS)
    llama3 = FLEETS["llama3"]
    assert llama3.failures_per_node_day * 1000 == pytest.approx(3.79, abs=0.01)  # per 1,000 node-days
    assert mtbf_s(16_384, llama3) / HOUR == pytest.approx(54 * 24 / 419)  # 3.09 h: the issue's M = 3.1 h
    mix = failure_mix()
    assert sum(c.per_gpu_s for c in mix) * 16_384 * 54 * DAY == pytest.approx(419)
    assert mix[0].cause.name == "Faulty GPU"
    assert mix[0].per_gpu_s * 16_384 * 54 * DAY == pytest.approx(148)
    # Another fleet keeps Table 5's proportions at its own total rate.
    rsc1 = failure_mix(FLEETS["rsc1"])
    assert rsc1[0].per_gpu_s / sum(c.per_gpu_s for c in rsc1) == pytest.approx(148 / 419)


def test_kokolis_job_mttf() -> None:
    r_f = FLEETS["rsc1"].failures_per_node_day / DAY  # RSC-1: 6.50 failures per 1,000 node-days
    # The paper's projections from r_f, 1 / (N_nodes r_f) with 8 GPUs a node: 1.8 h at 16,384 GPUs, 0.23 h at 131,072.
    assert job_mttf_s(16_384 // 8, r_f) / HOUR == pytest.approx(1.8, rel=0.05)
    assert job_mttf_s(131_072 // 8, r_f) / HOUR == pytest.approx(0.23, rel=0.05)
    # The measured job MTTFs (47.7 days at 8 GPUs, 7.9 h at 1,024) are not what r_f gives at those sizes
    # (154 days, 28.8 h): jobs failed about 3.5 times as often as r_f's node failures alone explain. They are
    # consistent with each other under the same law, though: the per-node rate the 8-GPU jobs measured gives the
    # 1,024-GPU job MTTF within 15% (8.9 h against 7.9 h).
    assert job_mttf_s(1024 // 8, r_f) / HOUR == pytest.approx(28.8, abs=0.1)
    measured_r_f = 1.0 / (47.7 * DAY)  # one node (8 GPUs)
    assert job_mttf_s(1024 // 8, measured_r_f) / HOUR == pytest.approx(7.9, rel=0.15)
    with pytest.raises(ValueError):
        job_mttf_s(0, r_f)


def test_kokolis_ettr_closed_form() -> None:
    nodes, r_f = 2048, FLEETS["llama3"].failures_per_node_day / DAY
    u0, dt, w = 180.0, 800.0, 30.0
    by_hand = (1 - nodes * r_f * (u0 + dt / 2)) / (1 + w / dt)
    assert ettr_kokolis(nodes, r_f, u0, dt, w) == pytest.approx(by_hand)
    assert 0.9 < by_hand < 0.92
    # The optimum is Young's interval, and it beats its neighbours.
    best = optimal_interval_s(nodes, r_f, w)
    assert best == pytest.approx(young_interval(job_mttf_s(nodes, r_f), w))
    at_best = ettr_kokolis(nodes, r_f, u0, best, w)
    assert at_best > ettr_kokolis(nodes, r_f, u0, best / 2, w)
    assert at_best > ettr_kokolis(nodes, r_f, u0, best * 2, w)
    assert ettr_kokolis(nodes, r_f * 100, u0, dt, w) == 0.0  # failures faster than recovery: floored


def test_spares_binomial_against_a_direct_sum_and_the_rule() -> None:
    p = in_repair_probability(0.01 / DAY, 2 * DAY)  # 1 failure per 100 node-days, 2-day repairs
    assert p == pytest.approx(0.02 / 1.02)
    for nodes, spares in ((10, 0), (10, 2), (100, 5)):
        n = nodes + spares
        direct = sum(math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(spares + 1))
        assert full_capacity_probability(nodes, spares, p) == pytest.approx(direct, rel=1e-9)
    plan = plan_spares(100, 0.01 / DAY, 2 * DAY, 0.99)
    assert plan.probability >= 0.99
    assert full_capacity_probability(100, plan.spares - 1, p) < 0.99  # the smallest that reaches it
    assert (plan.rule_low, plan.rule_high) == (15, 20)
    assert plan.rule_low_probability > plan.probability
    # Large pools stay finite in log space.
    big = plan_spares(100_000, 0.005 / DAY, 3 * DAY, 0.999)
    assert 1500 < big.spares < 1700  # mean about 1,500 in repair, a few standard deviations above it


def test_durations_parse_and_format() -> None:
    assert parse_duration("3.1h", "--mtbf") == pytest.approx(11160)
    assert parse_duration("30s", "--cost") == 30
    assert parse_duration("30", "--cost") == 30
    assert parse_duration("13.3m", "x") == pytest.approx(798)
    assert parse_duration("2d", "x") == 172800
    assert parse_duration("0s", "--restart", allow_zero=True) == 0
    for bad, words in (("-3h", "above zero"), ("0", "above zero"), ("3x", "not a duration"), ("", "not a duration")):
        with pytest.raises(SpecError) as caught:
            parse_duration(bad, "--mtbf")
        assert caught.value.source == "--mtbf" and words in caught.value.problems[0]
    assert format_duration(30) == "30 s"
    assert format_duration(798.4) == "13.3 min"
    assert format_duration(11160) == "3.1 h"
    assert format_duration(47.7 * DAY) == "47.7 d"
