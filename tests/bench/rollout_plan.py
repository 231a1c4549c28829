"""Benchmark of the rollout planner (pure, no lab). Prints figures only.

1. Planning 10,000 GPU nodes over 8 failure domains (spares, running jobs, a few nodes down, a skip list):
   median of 5 runs; the issue asks for under 1 s.
2. For scale: the size of that rollout's state.json and the time of one atomic write of it (the executor writes it
   after every step of every node).

Run: .venv/bin/python tests/bench/rollout_plan.py
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ha_ops.rollout.plan import FleetNode, plan_rollout
from ha_ops.rollout.policy import build_policy
from ha_ops.rollout.state import RolloutStore, new_state

NODES = 10_000
DOMAINS = 8
RUNS = 5


def fleet() -> list[FleetNode]:
    return [
        FleetNode(
            name=f"gpu{i}",
            domain=f"rack{i % DOMAINS + 1}",
            zone=f"zone-{'ab'[i % 2]}",
            spare=i % 15 == 0,
            down=i % 2500 == 7,
            running_jobs=(i * 7) % 5,
            criticality=i % 3,
            driver_version="550.127.05",
        )
        for i in range(NODES)
    ]


def main() -> None:
    nodes = fleet()
    policy = build_policy(
        {"canary": "8", "waves": ["1", "5%", "25%", "rest"], "max_unavailable": "2%", "skip": ["gpu1", "gpu2"]}
    )
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        plan = plan_rollout(nodes, policy, "570.86.15")
        times.append(time.perf_counter() - start)
    median = statistics.median(times)
    print(
        f"plan {NODES:,} nodes over {DOMAINS} failure domains: median {median * 1000:.1f} ms "
        f"(min {min(times) * 1000:.1f}, max {max(times) * 1000:.1f}; {RUNS} runs) -> "
        f"{'OK' if median < 1.0 else 'SLOW'} (< 1 s asked); {len(plan.waves)} waves, batches of {plan.batch_size}"
    )
    state = new_state(plan, policy, "bench", time.time(), domains={n.name: n.domain for n in nodes})
    with tempfile.TemporaryDirectory() as directory:
        store = RolloutStore(Path(directory))
        writes = []
        for _ in range(RUNS):
            start = time.perf_counter()
            store.save(state)
            writes.append(time.perf_counter() - start)
        size = store.state_path.stat().st_size
    print(
        f"state.json for that rollout: {size / 1e6:.1f} MB, one atomic write (serialise, fsync, rename): "
        f"median {statistics.median(writes) * 1000:.0f} ms"
    )


if __name__ == "__main__":
    main()
