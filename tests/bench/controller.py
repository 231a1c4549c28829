"""Benchmarks of the remediation controller. Prints figures only.

1. Policy decisions per second for a 12,500-node (100,000-GPU) cluster (pure, no lab).
2. In the lab (root): fault -> node drained in Slurm through agent -> controller, p50/p99 over 20 injections.
3. In the lab: controller failover time (leader SIGKILLed and SIGSTOPped) over 6 trials each.

Run: sudo .venv/bin/python tests/bench/controller.py [--skip-lab]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ha_ops.health.report import AgentReport, ReportFinding
from ha_ops.remediation import policy
from ha_ops.remediation.config import ControllerConfig, PoolConfig
from ha_ops.remediation.model import ControllerState
from ha_ops.util.wait import wait_for

NODES = 12_500


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def report(node: str, seq: int, unhealthy: bool) -> AgentReport:
    findings = [ReportFinding(check="xid", severity="critical", action="reboot_node", message="XID 79", gpu=3, xid=79)]
    return AgentReport(node=node, seq=seq, agent_id="bench", sent_at=0.0, state="unhealthy" if unhealthy else "healthy",
                       action="reboot_node" if unhealthy else "none", reason="GPU3 XID 79" if unhealthy else "healthy",
                       findings=findings if unhealthy else [])  # fmt: skip


def bench_policy() -> None:
    nodes = [f"n{i:05d}" for i in range(NODES)]
    spares = [f"s{i:04d}" for i in range(NODES * 15 // 100)]
    config = ControllerConfig(
        id="bench", state_dir=Path("/nonexistent"), pools={"h100": PoolConfig(nodes=nodes, spares=spares)}
    )
    state = ControllerState()
    policy.init_state(state, config, 0.0)
    healthy = [report(n, 1, False) for n in nodes]
    start = time.perf_counter()
    for i, r in enumerate(healthy):
        policy.on_report(state, r, config, 1.0 + i * 1e-6, 1)
    healthy_rate = len(healthy) / (time.perf_counter() - start)
    # Failures: the safety gate counts the pool on every cordon, the expensive path.
    failing = [report(n, 2, True) for n in nodes[:200]]
    start = time.perf_counter()
    for r in failing:
        policy.on_report(state, r, config, 2.0, 1)
    failing_rate = len(failing) / (time.perf_counter() - start)
    start = time.perf_counter()
    ticks = 20
    for k in range(ticks):
        policy.on_tick(state, {}, config, 3.0 + k, 1)
    tick_ms = (time.perf_counter() - start) / ticks * 1000
    print(f"policy, {NODES} nodes ({NODES * 8} GPUs) + {len(spares)} spares:")
    print(f"  healthy reports: {healthy_rate:,.0f} decisions/s")
    print(f"  unhealthy reports (safety gate, breaker): {failing_rate:,.0f} decisions/s")
    print(f"  one tick over every node: {tick_ms:.1f} ms")


def bench_lab() -> None:
    from ha_ops.schedulers.slurm import Slurm
    from tests.labkit import controller_nodes, leader, make_lab, reset_remediation

    lab = make_lab("benchctl")
    lab.down()
    lab.up()
    try:
        slurm = Slurm(lab.transport("gpu1"), timeout=5)
        latencies = []
        for i in range(20):
            reset_remediation(lab)
            node = ("gpu1", "gpu2", "gpu3")[i % 3]
            start = time.monotonic()
            lab.node(node).gpus().fall_off_bus(i % 8)
            wait_for(f"{node} drained", lambda n=node: slurm.node(n).drained, timeout=10, interval=0.01)
            latencies.append(time.monotonic() - start)
            print(f"injection {i + 1}: {node} drained in {latencies[-1] * 1000:.0f} ms", flush=True)
        print(f"fault -> drained via the controller over {len(latencies)} injections: "
              f"p50 {statistics.median(latencies) * 1000:.0f} ms, p99 {percentile(latencies, 0.99) * 1000:.0f} ms, "
              f"max {max(latencies) * 1000:.0f} ms (goal p99 <= 2000 ms)")  # fmt: skip

        for how in ("kill", "freeze"):
            times = []
            for trial in range(6):
                reset_remediation(lab)
                first = wait_for("a leader", lambda: leader(lab), timeout=15, interval=0.05)
                other = next(n for n in controller_nodes(lab) if n != first)
                start = time.monotonic()
                lab.node(first).kill("controller") if how == "kill" else lab.node(first).freeze("controller")
                wait_for("the standby leads", lambda o=other: leader(lab) == o, timeout=15, interval=0.02)
                times.append(time.monotonic() - start)
                if how == "freeze":
                    lab.node(first).thaw("controller")
                else:
                    lab.node(first).start("controller")
                print(f"failover ({how}) {trial + 1}: {times[-1]:.2f} s", flush=True)
            print(f"controller failover after {how}: median {statistics.median(times):.2f} s, "
                  f"max {max(times):.2f} s over {len(times)} (goal <= 10 s; lease ttl 3 s)")  # fmt: skip
    finally:
        lab.down()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--skip-lab", action="store_true", help="Only the pure policy benchmark.")
    args = parser.parse_args()
    bench_policy()
    if not args.skip_lab:
        bench_lab()


if __name__ == "__main__":
    main()
