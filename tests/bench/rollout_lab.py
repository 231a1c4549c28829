"""Benchmark: a GPU driver rollout of the whole lab (examples/lab.yaml, 4 GPU nodes) through the gpu_driver role over
sshd, draining and returning each node in the lab's Slurm; the total and the time per node (root). Prints figures.

Run: sudo .venv/bin/python tests/bench/rollout_lab.py [--max-unavailable N]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ha_ops.lab import rollouts
from tests.labkit import down_or_exit, make_lab

NAME = "benchro"
BASE, TARGET = "550.90.07", "570.86.15"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--max-unavailable", type=int, default=1)
    args = parser.parse_args()
    lab = make_lab(NAME)
    lab.down()
    try:
        lab.up()
        lab.use_controllers(False)  # the agents drain in Slurm themselves; no controller acts on the rollout's drains
        started = time.monotonic()
        rollouts.prepare(lab, BASE, {TARGET: True})
        print(f"base driver {BASE} installed on every GPU node through the role in {time.monotonic() - started:.1f} s")
        started = time.monotonic()
        argv = rollouts.rollout_args(lab, TARGET, BASE, "--soak", "0", "--waves", "1,rest",
                                     "--max-unavailable", str(args.max_unavailable))  # fmt: skip
        result = rollouts.on_operator_node(lab, *argv, timeout=1800)
        elapsed = time.monotonic() - started
        summary = json.loads(result.stdout)
        nodes = sum(summary["counts"].values())
        print(f"rollout {BASE} -> {TARGET}: {summary['phase']}, {nodes} nodes, max unavailable "
              f"{args.max_unavailable}: {elapsed:.1f} s ({elapsed / nodes:.1f} s per node)")  # fmt: skip
        for line in rollouts.rollout_state(lab)["log"]:  # when each step happened
            print(f"  {line}")
        if summary["phase"] != "completed":
            raise SystemExit(f"rollout did not complete: {summary}")
    finally:
        down_or_exit(lab)


if __name__ == "__main__":
    main()
