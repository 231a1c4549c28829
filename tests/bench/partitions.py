"""Benchmark: recovery that survives partitions, in the lab (root). Prints figures only, beside the defaults they
improve on.

1. The Slurm primary cut off from the network but alive: seconds until a job runs again (goal 20 s). With Slurm's
   own failover the backup never takes over (the cut-off primary keeps writing the heartbeat on shared state), and a
   dead primary is replaced only after SlurmctldTimeout (default 120 s).
2. The remediation leader cut off while it holds the lease: an XID 79 injected 3 s after the cut, seconds until the
   node is drained (goal <= 10 s).
3. A leaf switch cut off (its hosts reach each other, not the rest): the nodes Slurm finds not responding, which a
   controller deciding node loss by one observer (Slurm) would take out and power-cycle, against the nodes taken out
   here (two observers: Slurm and the agents' reports through either controller).

Run: sudo .venv/bin/python tests/bench/partitions.py [--trials 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ha_ops.chaos.rollbacks import slurm_controllers_back
from ha_ops.lab.cluster import Lab
from ha_ops.schedulers.slurm import Slurm
from ha_ops.util.wait import wait_for
from tests.integration.test_partitions import lead_from, srun_works
from tests.labkit import audit_entries, cluster, make_lab, reset_remediation

NAME = "benchpart"


def primary_cut_off(lab: Lab) -> float:
    lead_from(lab, "ctl2")
    cut = time.time()
    lab.node("ctl1").link_down("eth0")
    try:
        wait_for("jobs run again", lambda: srun_works(lab), timeout=120, interval=0.5)
        return time.time() - cut
    finally:
        lab.node("ctl1").link_up("eth0")
        if not lab.node("ctl1").power_is_on():
            lab.node("ctl1").power_cycle()
        slurm_controllers_back(cluster(lab), timeout=60)


def leader_cut_off(lab: Lab) -> float:
    lead_from(lab, "ctl2")
    slurm = Slurm(lab.transport("gpu1"))
    lab.node("ctl2").link_down("eth0")
    try:
        time.sleep(3.0)
        injected = time.time()
        lab.node("gpu3").gpus().fall_off_bus(1)
        wait_for("gpu3 drained", lambda: slurm.node("gpu3").drained, timeout=60, interval=0.05)
        return time.time() - injected
    finally:
        lab.node("ctl2").link_up("eth0")


def leaf_cut_off(lab: Lab) -> tuple[int, int]:
    """(nodes Slurm found not responding, nodes taken out) over 20 s with leaf2's uplinks down."""
    lead_from(lab, "ctl1")
    slurm = Slurm(lab.transport("gpu1"))
    gpu_nodes = {n.name for n in lab.ctx.layout.nodes_with_role("gpu")}
    unresponsive: set[str] = set()
    for uplink in ("to-spine1", "to-spine2"):
        lab.node("leaf2").link_down(uplink)
    try:
        deadline = time.time() + 20.0
        while time.time() < deadline:
            states = slurm.node_states()
            unresponsive |= {n for n, s in states.items() if n in gpu_nodes and (s.endswith("*") or "down" in s)}
            time.sleep(1.0)
        taken_out = {e["node"] for e in audit_entries(lab) if e["what"] == "drain"}
        return len(unresponsive), len(taken_out)
    finally:
        for uplink in ("to-spine1", "to-spine2"):
            lab.node("leaf2").link_up(uplink)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=3)
    args = parser.parse_args()
    lab = make_lab(NAME)
    lab.down()
    lab.up()
    try:
        primary, leader, leaf = [], [], []
        for trial in range(1, args.trials + 1):
            reset_remediation(lab)
            primary.append(primary_cut_off(lab))
            reset_remediation(lab)
            leader.append(leader_cut_off(lab))
            lab.node("gpu3").gpus().clear()
            reset_remediation(lab)
            leaf.append(leaf_cut_off(lab))
            print(f"trial {trial}: Slurm primary cut off -> jobs run again after {primary[-1]:.1f} s; leader cut off "
                  f"-> XID 79 drained {leader[-1]:.1f} s after injection; leaf cut off -> {leaf[-1][0]} node(s) "
                  f"not responding to Slurm, {leaf[-1][1]} taken out", flush=True)  # fmt: skip
        reset_remediation(lab)
    finally:
        lab.down()
    one_observer = max(n for n, _ in leaf)
    taken = max(t for _, t in leaf)
    print(
        f"Slurm primary cut off but alive: jobs run again after median {statistics.median(primary):.1f} s, max "
        f"{max(primary):.1f} s (goal 20 s; Slurm alone: never, and after SlurmctldTimeout 120 s for a dead primary)"
    )
    print(f"remediation leader cut off: an XID 79 3 s after the cut drained after median "
          f"{statistics.median(leader):.1f} s, max {max(leader):.1f} s (goal <= 10 s)")  # fmt: skip
    print(f"leaf switch cut off: healthy nodes taken out {taken} (node loss by one observer, Slurm: {one_observer})")
    print(f"partitions over {args.trials} trials: primary cut off {statistics.median(primary):.1f} s to jobs, leader "
          f"cut off {statistics.median(leader):.1f} s to drain, leaf cut off {taken} healthy nodes taken out "
          f"(one observer: {one_observer})")  # fmt: skip


if __name__ == "__main__":
    main()
