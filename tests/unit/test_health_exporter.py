"""The agent's Prometheus metrics, rendered with prometheus_client exactly as a scrape would get them."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ha_ops.gpu.fake import FakeBackend, FakeGpus, healthy_state
from ha_ops.gpu.types import NOT_SUPPORTED, READING_FIELDS, GpuEvent, GpuSample
from ha_ops.health.agent import Agent
from ha_ops.health.checks import EventLedger, evaluate
from ha_ops.health.config import AgentConfig
from ha_ops.health.exporter import AgentCollector
from ha_ops.health.model import HealthState
from ha_ops.health.thresholds import Thresholds

NODE = "gpu2"
T0 = 1_800_000_000.0


def sample(index: int, **changes: object) -> GpuSample:
    state = {k: v for k, v in healthy_state(NODE, index).items() if k in READING_FIELDS}
    state.update(changes)
    return GpuSample(index=index, read_at=T0, **state)  # type: ignore[arg-type]


def scrape(collector: AgentCollector) -> dict[str, list[tuple[dict[str, str], float]]]:
    """name -> [(labels, value)], parsed back from the exposition text."""
    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def value(metrics: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str) -> float | None:
    found = [v for lab, v in metrics.get(name, []) if all(lab.get(k) == w for k, w in labels.items())]
    assert len(found) <= 1, (name, labels, found)
    return found[0] if found else None


def collector_for(samples: list[GpuSample], events: list[GpuEvent] | None = None) -> AgentCollector:
    ledger = EventLedger()
    ledger.record(events or [], T0, 600)
    collector = AgentCollector(NODE)
    collector.update(samples, evaluate(samples, {}, ledger, T0, Thresholds()))
    return collector


def test_per_gpu_gauges_for_known_values() -> None:
    metrics = scrape(collector_for([sample(0), sample(1, temperature_gpu_c=61.5, power_draw_w=412.0)]))
    uuid1 = healthy_state(NODE, 1)["uuid"]
    assert value(metrics, "ha_ops_gpu_temperature_celsius", gpu="0") == 34.0
    assert value(metrics, "ha_ops_gpu_temperature_celsius", gpu="1", uuid=uuid1, node=NODE) == 61.5
    assert value(metrics, "ha_ops_gpu_power_watts", gpu="1") == 412.0
    assert value(metrics, "ha_ops_gpu_memory_temperature_celsius", gpu="0") == 40.0
    assert value(metrics, "ha_ops_gpu_remap_pending", gpu="0") == 0.0
    assert value(metrics, "ha_ops_gpu_clock_event_reasons", gpu="0") == 1.0
    assert value(metrics, "ha_ops_gpu_pcie_width", gpu="0") == 16.0
    assert value(metrics, "ha_ops_gpu_memory_total_bytes", gpu="0") == 85899345920.0
    assert value(metrics, "ha_ops_gpu_nvlink_errors_total", gpu="0", kind="replay") == 0.0
    assert value(metrics, "ha_ops_gpu_lost", gpu="1") == 0.0


def test_utilisation_is_a_ratio_and_nvml_counts_are_counters() -> None:
    metrics = scrape(collector_for([sample(0, utilization_gpu_pct=37, ecc_aggregate_corrected=12,
                                           pcie_replay_counter=5)]))  # fmt: skip
    assert value(metrics, "ha_ops_gpu_utilization_ratio", gpu="0") == 0.37
    assert value(metrics, "ha_ops_gpu_ecc_aggregate_corrected_total", gpu="0") == 12.0
    assert value(metrics, "ha_ops_gpu_pcie_replays_total", gpu="0") == 5.0
    assert value(metrics, "ha_ops_gpu_ecc_volatile_uncorrected_total", gpu="0") == 0.0


def test_gauges_absent_for_not_supported_unreadable_and_lost() -> None:
    samples = [
        sample(0, temperature_memory_c=NOT_SUPPORTED, recovery_action=NOT_SUPPORTED, nvlink_errors=NOT_SUPPORTED),
        sample(1, lost=True),
        GpuSample.unreadable(2, "fake GPU state gpu2.json unreadable"),
    ]
    metrics = scrape(collector_for(samples))
    assert value(metrics, "ha_ops_gpu_memory_temperature_celsius", gpu="0") is None
    assert value(metrics, "ha_ops_gpu_recovery_action", gpu="0") is None
    assert value(metrics, "ha_ops_gpu_nvlink_errors_total", gpu="0", kind="replay") is None
    assert value(metrics, "ha_ops_gpu_temperature_celsius", gpu="0") == 34.0  # the rest is there
    for gpu in ("1", "2"):
        assert value(metrics, "ha_ops_gpu_temperature_celsius", gpu=gpu) is None
        assert value(metrics, "ha_ops_gpu_power_watts", gpu=gpu) is None
    assert value(metrics, "ha_ops_gpu_lost", gpu="1") == 1.0
    assert value(metrics, "ha_ops_gpu_lost", gpu="2") == 0.0


def test_gpu_health_has_exactly_one_state_per_gpu() -> None:
    samples = [
        sample(0),
        sample(1, temperature_gpu_c=90.0),  # warning
        sample(2, ecc_volatile_uncorrected=1),  # critical
        GpuSample.unreadable(3, "unreadable"),
        sample(4, lost=True),
    ]
    metrics = scrape(collector_for(samples))
    expected = {"0": "healthy", "1": "degraded", "2": "unhealthy", "3": "unknown", "4": "unhealthy"}
    for gpu, state in expected.items():
        rows = [(lab["state"], v) for lab, v in metrics["ha_ops_gpu_health"] if lab["gpu"] == gpu]
        assert sorted(s for s, _ in rows) == sorted(s.value for s in HealthState)
        assert [s for s, v in rows if v == 1.0] == [state], gpu
    assert value(metrics, "ha_ops_gpu_health", gpu="3", state="unknown", uuid="") == 1.0


def test_an_xid_marks_only_its_gpu() -> None:
    metrics = scrape(collector_for([sample(0), sample(1)], [GpuEvent(1, "xid", xid=79, at=T0)]))
    assert value(metrics, "ha_ops_gpu_health", gpu="0", state="healthy") == 1.0
    assert value(metrics, "ha_ops_gpu_health", gpu="1", state="unhealthy") == 1.0


@pytest.mark.parametrize(
    ("samples", "state"),
    [
        ([sample(0)], "healthy"),
        ([sample(0, pcie_width_current=8)], "degraded"),
        ([sample(0, remapped_rows_failure=True)], "unhealthy"),
        ([sample(0), GpuSample.unreadable(1, "x")], "unknown"),
    ],
)
def test_node_health_reflects_the_verdict(samples: list[GpuSample], state: str) -> None:
    metrics = scrape(collector_for(samples))
    rows = {lab["state"]: v for lab, v in metrics["ha_ops_node_health"]}
    assert rows == {s.value: (1.0 if s.value == state else 0.0) for s in HealthState}
    assert all(lab["node"] == NODE for lab, _ in metrics["ha_ops_node_health"])


def test_no_verdict_yet_has_no_health_metrics() -> None:
    metrics = scrape(AgentCollector(NODE))
    assert "ha_ops_node_health" not in metrics
    assert "ha_ops_gpu_health" not in metrics
    assert value(metrics, "ha_ops_agent_sweeps_total") == 0.0


def test_current_findings() -> None:
    metrics = scrape(collector_for([sample(0, temperature_gpu_c=91.0), sample(1, temperature_gpu_c=92.0)]))
    assert value(metrics, "ha_ops_current_findings", check="temperature", severity="warning") == 2.0


def test_counters_through_the_agent(tmp_path: Path) -> None:
    gpus = FakeGpus.create(tmp_path, NODE, 2)
    cfg = AgentConfig(node=NODE, backend="fake", fake_dir=tmp_path, metrics={"port": 0}, slurm={"enabled": False})
    agent = Agent(cfg, FakeBackend(tmp_path))
    now = time.time()
    agent.sweep([GpuEvent(1, "xid", xid=13, at=now), GpuEvent(1, "xid", xid=13, at=now)])
    gpus.update(0, temperature_gpu_c=91.0, fail_reads=["power_draw_w"])
    agent.sweep([GpuEvent(0, "ecc_single_bit", at=now)])
    agent.sweep()
    metrics = scrape(agent.collector)
    assert value(metrics, "ha_ops_findings_total", check="temperature", severity="warning", node=NODE) == 2.0
    assert value(metrics, "ha_ops_findings_total", check="xid", severity="info") == 3.0
    assert value(metrics, "ha_ops_gpu_events_total", gpu="1", kind="xid", xid="13") == 2.0
    assert value(metrics, "ha_ops_gpu_events_total", gpu="0", kind="ecc_single_bit", xid="") == 1.0
    assert value(metrics, "ha_ops_agent_sweeps_total") == 3.0
    assert value(metrics, "ha_ops_agent_read_errors_total") == 2.0
    assert value(metrics, "ha_ops_agent_drained_node") == 0.0
    assert value(metrics, "ha_ops_agent_sweep_duration_seconds_count") == 3.0
    assert 0.0 < (value(metrics, "ha_ops_agent_sweep_duration_seconds_sum") or 0.0) < 30.0
    assert value(metrics, "ha_ops_agent_sweep_duration_seconds_bucket", le="+Inf") == 3.0
    assert value(metrics, "ha_ops_node_health", state="degraded") == 1.0
    # Counters are typed as counters in the exposition.
    registry = CollectorRegistry()
    registry.register(agent.collector)
    text = generate_latest(registry).decode()
    assert "# TYPE ha_ops_findings_total counter" in text
    assert "# TYPE ha_ops_gpu_events_total counter" in text


def test_label_sets_follow_the_latest_sweep() -> None:
    collector = collector_for([sample(0), sample(1)])
    assert value(scrape(collector), "ha_ops_gpu_temperature_celsius", gpu="1") == 34.0
    only_zero = [replace(sample(0), temperature_gpu_c=35.0)]
    collector.update(only_zero, evaluate(only_zero, {}, EventLedger(), T0, Thresholds()))
    metrics = scrape(collector)
    assert value(metrics, "ha_ops_gpu_temperature_celsius", gpu="1") is None
    assert value(metrics, "ha_ops_gpu_temperature_celsius", gpu="0") == 35.0
