"""Benchmark: XID and event hygiene (issue 22). No lab, no root, no GPU.

Part 1: one agent (the real Agent, fake GPU backend, 8 GPUs) is fed 100,000 XID 95 events for GPU 0, in batches as
its NVML event loop hands them to a sweep, one sweep per batch: the findings (expect one, with the count), CPU per
1,000 events (time.process_time; the whole sweep path, and the event path alone), peak memory (tracemalloc, in a
second run), the reports it would send to the controller, and the ledger's size.

Part 2: the controller's policy (pure: policy.on_report / on_tick over a ControllerState, no threads) hears 50 nodes
whose agents see a 5-second XID 13 burst (three XID 13 per node, each followed by an XID 45, escalated by the agents
as repeats), reports sent as the agent sends them (on a change, and a heartbeat): no drain, one burst finding.

The last line: `xid storm: N events, X ms CPU per 1000 events, F findings` (part 1). Goal: 1 finding, X <= 5.

Run: .venv/bin/python tests/bench/xid_storm.py [--events 100000] [--batch 1000]
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ha_ops.gpu.fake import FakeBackend, FakeGpus, healthy_state
from ha_ops.gpu.types import READING_FIELDS, GpuEvent, GpuSample
from ha_ops.health.agent import Agent
from ha_ops.health.checks import EventLedger, evaluate, stable_reason
from ha_ops.health.config import AgentConfig
from ha_ops.health.report import AgentReport, build_report
from ha_ops.health.thresholds import Thresholds
from ha_ops.remediation import policy
from ha_ops.remediation.config import ControllerConfig, PoolConfig
from ha_ops.remediation.model import ControllerState
from ha_ops.schedulers.base import SchedulerJob

T0 = 1_800_000_000.0
STORM_RATE = 30_000.0  # events per second (a node logging 800,000 XID 95 lines in under a minute)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def storm(events: int, batch: int, measure_memory: bool) -> dict[str, float]:
    """Feed one agent `events` XID 95 events for GPU 0, `batch` per sweep."""
    with tempfile.TemporaryDirectory() as tmp:
        FakeGpus.create(Path(tmp), "bench", 8)
        config = AgentConfig(
            node="bench", backend="fake", fake_dir=Path(tmp), metrics={"port": 0}, slurm={"enabled": False}
        )
        reports: list[AgentReport] = []
        clock = Clock()
        agent = Agent(config, FakeBackend(Path(tmp)), poster=reports.append, clock=clock)
        agent.sweep()  # the first, healthy sweep (and report)
        batches = [
            [GpuEvent(0, "xid", xid=95, at=T0 + (i + j) / STORM_RATE, detail="") for j in range(min(batch, events - i))]
            for i in range(0, events, batch)
        ]
        record_cpu = 0.0
        gc.collect()
        if measure_memory:
            tracemalloc.start()
        cpu0 = time.process_time()
        for chunk in batches:
            clock.now = chunk[-1].at
            agent.sweep(chunk)
        cpu = time.process_time() - cpu0
        peak = 0
        if measure_memory:
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
        # The event path alone (ledger), on a fresh ledger: what a sweep adds per event.
        ledger = EventLedger()
        cpu1 = time.process_time()
        for chunk in batches:
            ledger.record(chunk, chunk[-1].at, 600.0)
        record_cpu = time.process_time() - cpu1
        verdict = agent.verdict
        assert verdict is not None
        tallies = sum(len(t) for t in agent.ledger.latched.values()) + len(agent.ledger.recent)
        return {
            "cpu_ms": cpu * 1000,
            "record_ms": record_cpu * 1000,
            "sweeps": len(batches),
            "findings": len(verdict.findings),
            "state": verdict.state.value,
            "reason": verdict.reason,  # type: ignore[dict-item]
            "reports": len(reports),
            "peak_kib": peak / 1024,
            "tallies": tallies,
        }


def sample(node: str, index: int) -> GpuSample:
    state = {k: v for k, v in healthy_state(node, index).items() if k in READING_FIELDS}
    return GpuSample(index=index, read_at=T0, **state)  # type: ignore[arg-type]


class SimAgent:
    """What one node's agent does with its events: the real ledger and checks, a report on a change or heartbeat."""

    def __init__(self, node: str) -> None:
        self.node, self.ledger, self.seq = node, EventLedger(), 0
        self.samples = [sample(node, i) for i in range(8)]
        self.last_key: tuple[str, str] | None = None
        self.last_sent = 0.0
        self.thresholds = Thresholds()

    def sweep(self, now: float, events: list[GpuEvent], heartbeat_s: float = 10.0) -> AgentReport | None:
        self.ledger.record(events, now, 600.0)
        verdict = evaluate(self.samples, {}, self.ledger, now, self.thresholds)
        key = (verdict.state.value, stable_reason(verdict.reason))
        if key == self.last_key and now - self.last_sent < heartbeat_s:
            return None
        self.last_key, self.last_sent, self.seq = key, now, self.seq + 1
        return build_report(self.node, self.seq, f"agent-{self.node}", now, verdict, self.samples, "550.90.07")


def job_burst(nodes: int = 50, spread_s: float = 5.0, until_s: float = 60.0) -> dict[str, object]:
    names = [f"gpu{i:02d}" for i in range(nodes)]
    config = ControllerConfig(
        id="bench", state_dir=Path("unused"), pools={"gpu": PoolConfig(nodes=names, spares=["spare1", "spare2"])}
    )
    state = ControllerState()
    policy.init_state(state, config, T0)
    # Each node: XID 13 on GPU 3 at its onset, 0.5 s and 1 s later, each followed 50 ms later by XID 45; onsets
    # spread over `spread_s`. Every node's agent sweeps at each event (and every second for its heartbeat).
    timeline: list[tuple[float, str, list[GpuEvent]]] = []
    for i, name in enumerate(names):
        onset = T0 + spread_s * i / max(1, nodes - 1)
        for k in range(3):
            at = onset + 0.5 * k
            timeline.append((at, name, [GpuEvent(3, "xid", xid=13, at=at)]))
            timeline.append((at + 0.05, name, [GpuEvent(3, "xid", xid=45, at=at + 0.05)]))
    for second in range(int(until_s)):
        for name in names:
            timeline.append((T0 + second + 0.5, name, []))
    timeline.sort(key=lambda e: e[0])
    agents = {name: SimAgent(name) for name in names}
    reports = drains = unhealthy = 0
    next_tick = T0
    cpu0 = time.process_time()
    for at, name, events in timeline:
        while next_tick <= at:
            out = policy.on_tick(state, {}, config, next_tick, 1)
            drains += sum(1 for i in out.intents if i.kind == "drain")
            next_tick += 0.2
        report = agents[name].sweep(at, events)
        if report is None:
            continue
        reports += 1
        unhealthy += report.state == "unhealthy"
        out = policy.on_report(state, report, config, at, 1)
        drains += sum(1 for i in out.intents if i.kind == "drain")
        if out.burst:  # what the controller does once per burst: ask its scheduler which job runs there
            job = SchedulerJob("4242", "COMPLETING", tuple(names), "train-llm-70b")
            policy.name_burst_job(state, out.burst, [job])
    cpu = time.process_time() - cpu0
    return {
        "reports": reports,
        "unhealthy_reports": unhealthy,
        "drains": drains,
        "intents": len(state.intents),
        "bursts": [b.message for b in state.bursts],
        "spared": sum(b.spared for b in state.bursts),
        "cpu_ms": cpu * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1000, help="events handed to one sweep")
    args = parser.parse_args()

    run = storm(args.events, args.batch, measure_memory=False)
    mem = storm(args.events, args.batch, measure_memory=True)
    per_1000 = run["cpu_ms"] / args.events * 1000
    print(f"part 1: {args.events} XID 95 events on GPU 0, {run['sweeps']:.0f} sweeps of {args.batch} (8 fake GPUs)")
    print(f"  verdict: {run['state']}: {run['reason']}")
    print(f"  findings: {run['findings']:.0f}; reports to the controller: {run['reports']:.0f} (1 healthy + changes)")
    print(
        f"  CPU: {per_1000:.2f} ms per 1000 events with the sweeps ({run['cpu_ms']:.0f} ms in all), "
        f"{run['record_ms'] / args.events * 1000:.3f} ms per 1000 in the ledger alone"
    )
    print(f"  peak memory while fed (tracemalloc): {mem['peak_kib']:.0f} KiB; ledger entries: {run['tallies']:.0f}")

    burst = job_burst()
    print("part 2: 50 nodes, XID 13 (+45) x3 each, onsets over 5 s, 60 s of reports and ticks (pure policy)")
    print(
        f"  reports: {burst['reports']} ({burst['unhealthy_reports']} unhealthy: escalated repeats); "
        f"drain intents: {burst['drains']}; intents: {burst['intents']}; spared reports: {burst['spared']}"
    )
    for message in burst["bursts"]:  # type: ignore[attr-defined]
        print(f"  burst finding: {message}")
    print(f"  policy + simulated agents CPU: {burst['cpu_ms']:.0f} ms")
    ok = burst["drains"] == 0 and len(burst["bursts"]) == 1  # type: ignore[arg-type]
    print(f"  part 2: {'ok' if ok else 'FAILED'}: {burst['drains']} drains, {len(burst['bursts'])} burst finding(s)")  # type: ignore[arg-type]
    print(f"xid storm: {args.events} events, {per_1000:.2f} ms CPU per 1000 events, {run['findings']:.0f} findings")


if __name__ == "__main__":
    main()
