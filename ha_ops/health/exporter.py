"""Prometheus metrics of the agent, built at scrape time from the latest sweep (no stale label sets)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from ha_ops.gpu.types import GpuSample, known
from ha_ops.health.model import HealthState, Verdict
from ha_ops.health.report import gpu_states

if TYPE_CHECKING:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

_GAUGES = [
    ("temperature_gpu_c", "ha_ops_gpu_temperature_celsius", "GPU temperature"),
    ("temperature_memory_c", "ha_ops_gpu_memory_temperature_celsius", "HBM temperature"),
    ("power_draw_w", "ha_ops_gpu_power_watts", "Power draw"),
    ("power_limit_w", "ha_ops_gpu_power_limit_watts", "Enforced power limit"),
    ("remapped_rows_correctable", "ha_ops_gpu_remapped_rows_correctable", "Rows remapped for correctable errors"),
    ("remapped_rows_uncorrectable", "ha_ops_gpu_remapped_rows_uncorrectable", "Rows remapped for uncorrectable errors"),
    ("remapped_rows_pending", "ha_ops_gpu_remap_pending", "1 if a row remap waits for a GPU reset"),
    ("remapped_rows_failure", "ha_ops_gpu_remap_failure", "1 if row remapping failed"),
    ("clock_event_reasons", "ha_ops_gpu_clock_event_reasons", "Clock-event (throttle) reason bitmask"),
    ("pcie_gen_current", "ha_ops_gpu_pcie_generation", "Current PCIe generation"),
    ("pcie_width_current", "ha_ops_gpu_pcie_width", "Current PCIe link width"),
    ("pcie_width_max", "ha_ops_gpu_pcie_width_max", "Maximum PCIe link width"),
    ("recovery_action", "ha_ops_gpu_recovery_action", "NVML GPU recovery action (0 none .. 4 drain and reset)"),
    ("memory_used_bytes", "ha_ops_gpu_memory_used_bytes", "Memory used"),
    ("memory_total_bytes", "ha_ops_gpu_memory_total_bytes", "Memory total"),
]
# NVML's cumulative counts, as counters (exposed with `_total`; a GPU reset zeroes the volatile ones, which PromQL's
# rate() reads as a counter reset).
_COUNTERS = [
    ("ecc_volatile_corrected", "ha_ops_gpu_ecc_volatile_corrected", "Correctable ECC errors since the last reset"),
    (
        "ecc_volatile_uncorrected",
        "ha_ops_gpu_ecc_volatile_uncorrected",
        "Uncorrectable ECC errors since the last reset",
    ),
    ("ecc_aggregate_corrected", "ha_ops_gpu_ecc_aggregate_corrected", "Correctable ECC errors, lifetime"),
    ("ecc_aggregate_uncorrected", "ha_ops_gpu_ecc_aggregate_uncorrected", "Uncorrectable ECC errors, lifetime"),
    ("pcie_replay_counter", "ha_ops_gpu_pcie_replays", "PCIe replays"),
]
# A sweep of eight GPUs through NVML takes milliseconds; a hung driver call, seconds.
SWEEP_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_STATES = [s.value for s in HealthState]
_Family = TypeVar("_Family", "GaugeMetricFamily", "CounterMetricFamily")


@dataclass
class AgentStats:
    sweeps: int = 0
    read_errors: int = 0
    findings: Counter = field(default_factory=Counter)  # (check, severity) -> count of sweeps that reported it
    events: Counter = field(default_factory=Counter)  # (gpu, kind, xid) -> count
    sweep_buckets: list[int] = field(default_factory=lambda: [0] * len(SWEEP_BUCKETS_S))  # sweeps <= each bound
    sweep_seconds_sum: float = 0.0
    sweeps_timed: int = 0
    drained_by_agent: bool = False
    last_sweep_at: float | None = None  # time.monotonic() at the end of the last sweep: the agent's /healthz

    def observe_sweep(self, seconds: float) -> None:
        self.last_sweep_at = time.monotonic()
        for i, bound in enumerate(SWEEP_BUCKETS_S):
            if seconds <= bound:
                self.sweep_buckets[i] += 1
        self.sweep_seconds_sum += seconds
        self.sweeps_timed += 1


class AgentCollector:
    """A prometheus_client collector (its Collector is a Protocol: `collect` is all it takes). prometheus_client is
    imported at scrape time only, so that `ha-ops health check`, which builds an agent but serves no metrics, starts
    without it."""

    def __init__(self, node: str) -> None:
        self.node = node
        self._lock = threading.Lock()
        self._samples: list[GpuSample] = []
        self._verdict: Verdict | None = None
        self.stats = AgentStats()

    def update(self, samples: list[GpuSample], verdict: Verdict) -> None:
        with self._lock:
            self._samples, self._verdict = samples, verdict

    def _per_gpu(self, family: _Family, samples: list[GpuSample], attr: str, divisor: float = 1.0) -> _Family:
        """`family` with each answering GPU's known reading of `attr` (a GPU that lost it, or is lost, has none)."""
        for s in samples:
            value = getattr(s, attr)
            if known(value) and not s.lost:
                family.add_metric([self.node, str(s.index), _uuid(s)], float(value) / divisor)
        return family

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily | HistogramMetricFamily]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        with self._lock:
            samples, verdict, stats = list(self._samples), self._verdict, self.stats
        labels = ["node", "gpu", "uuid"]
        for attr, name, doc in _GAUGES:
            yield self._per_gpu(GaugeMetricFamily(name, doc, labels=labels), samples, attr)
        for attr, name, doc in _COUNTERS:
            yield self._per_gpu(CounterMetricFamily(name, doc, labels=labels), samples, attr)
        utilization = GaugeMetricFamily("ha_ops_gpu_utilization_ratio", "GPU utilisation (0-1)", labels=labels)
        yield self._per_gpu(utilization, samples, "utilization_gpu_pct", divisor=100.0)
        nvlink = CounterMetricFamily("ha_ops_gpu_nvlink_errors", "NVLink errors by kind", labels=[*labels, "kind"])
        for s in samples:
            if isinstance(s.nvlink_errors, dict):
                for kind, count in s.nvlink_errors.items():
                    nvlink.add_metric([self.node, str(s.index), _uuid(s), kind], float(count))
        yield nvlink
        lost = GaugeMetricFamily("ha_ops_gpu_lost", "1 if the GPU does not answer", labels=labels)
        for s in samples:
            lost.add_metric([self.node, str(s.index), _uuid(s)], 1.0 if s.lost else 0.0)
        yield lost
        if verdict is not None:
            gpu_health = GaugeMetricFamily(
                "ha_ops_gpu_health", "1 for the GPU's health state", labels=[*labels, "state"]
            )
            for g in gpu_states(samples, verdict):
                for state in _STATES:
                    value = 1.0 if g.state == state else 0.0
                    gpu_health.add_metric([self.node, str(g.index), g.uuid or "", state], value)
            yield gpu_health
            node_health = GaugeMetricFamily(
                "ha_ops_node_health", "1 for the node's health state", labels=["node", "state"]
            )
            for state in _STATES:
                node_health.add_metric([self.node, state], 1.0 if verdict.state == state else 0.0)
            yield node_health
            current = GaugeMetricFamily(
                "ha_ops_current_findings", "Findings in the latest sweep", labels=["node", "check", "severity"]
            )
            for (check, severity), n in Counter((f.check, str(f.severity)) for f in verdict.findings).items():
                current.add_metric([self.node, check, severity], float(n))
            yield current
        findings = CounterMetricFamily(
            "ha_ops_findings", "Sweeps that reported a finding, by check", labels=["node", "check", "severity"]
        )
        for (check, severity), n in stats.findings.items():
            findings.add_metric([self.node, check, severity], float(n))
        yield findings
        events = CounterMetricFamily("ha_ops_gpu_events", "GPU events received", labels=["node", "gpu", "kind", "xid"])
        for (gpu, kind, xid), n in stats.events.items():
            events.add_metric([self.node, str(gpu), kind, str(xid) if xid is not None else ""], float(n))
        yield events
        yield CounterMetricFamily("ha_ops_agent_sweeps", "Sweeps done", value=float(stats.sweeps), labels=None)
        yield CounterMetricFamily(
            "ha_ops_agent_read_errors", "Readings that could not be read", value=float(stats.read_errors)
        )
        buckets = [(f"{b:g}", float(n)) for b, n in zip(SWEEP_BUCKETS_S, stats.sweep_buckets, strict=True)]
        yield HistogramMetricFamily(
            "ha_ops_agent_sweep_duration_seconds",
            "Time a sweep took (read every GPU, judge, act)",
            buckets=[*buckets, ("+Inf", float(stats.sweeps_timed))],
            sum_value=stats.sweep_seconds_sum,
        )
        yield GaugeMetricFamily(
            "ha_ops_agent_drained_node",
            "1 while the node is drained by this agent",
            value=float(stats.drained_by_agent),
        )


def _uuid(sample: GpuSample) -> str:
    return sample.uuid if isinstance(sample.uuid, str) else ""
