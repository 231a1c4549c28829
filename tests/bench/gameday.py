"""Benchmark: the standard game day (chaos/gamedays/standard.yaml) in a fresh full lab (examples/lab-storage.yaml,
root). Prints time to detect and to recover per failure beside the defaults of the systems a cluster would otherwise
rely on (shared/REFERENCE-NUMBERS.md). Figures only; nothing is asserted.

With --over-ssh the same game day runs a second time with the lab reached as a real cluster (SshCluster: the lab's
sshd on its management network, its Redfish BMC, systemctl on the nodes; `ha-ops lab inventory --ssh`), and the
figures of both paths are printed side by side (goal: over SSH within 1.5x of the lab's own path).

Run: sudo .venv/bin/python tests/bench/gameday.py [--over-ssh] [--keep-reports DIR]
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ha_ops.chaos import plan as plans
from ha_ops.chaos import report
from ha_ops.chaos.gameday import run_gameday, seconds
from ha_ops.chaos.target import configuration_for
from ha_ops.cluster.lab import LabCluster
from ha_ops.cluster.resolve import open_cluster
from ha_ops.lab.cluster import Lab
from ha_ops.lab.inventory import ssh_inventory
from ha_ops.lab.paths import LabPaths
from ha_ops.spec import load_spec
from tests.labkit import REPO, reset_remediation

NAME = "benchgd"
PLAN = REPO / "chaos" / "gamedays" / "standard.yaml"

# What the same failure costs with the defaults of the tools a cluster would rely on without ha-ops.
BASELINE = {
    "GPU XID 79": "NVSentinel fault -> cordon P50 16.8 s (150 nodes failing)",
    "node loss": "Slurm SlurmdTimeout 300 s; Kubernetes ~6 min to evict",
    "leaf-spine link down": "withdrawn on link down",
    "silent link drop": "FRR BFD default 300 ms x 3 = 0.9 s; BGP hold 9-180 s",
    "Slurm primary kill": "SlurmctldTimeout default 120 s",
    "Slurm primary freeze": "clients hang until the primary is killed by hand",
    "remediation controller leader kill": "Kubernetes leader election lease 15 s",
    "storage chunkserver loss": "-",
    "monitoring outage": "unnoticed without a dead man's switch",
}


def run(plan: Any, cluster: Any, configuration: dict[str, str], keep: Path | None) -> tuple[list[Any], float]:
    started, at = time.monotonic(), time.time()
    results = run_gameday(plan, cluster, configuration, progress=lambda line: print(line, flush=True))
    if keep:
        report.write_run(plan, results, keep, report.RunInfo.of(plan, PLAN, configuration, cluster, at, time.time()))
    return results, time.monotonic() - started


def print_lab(results: list[Any], elapsed: float) -> None:
    print(f"\nstandard game day in {elapsed:.0f} s (lab: SlurmctldTimeout, SlurmdTimeout 5 s; BFD 100 ms x 3)")
    print(f"{'failure':36} {'verdict':8} {'detect':>8} {'recover':>8}  jobs (lost/twice)  without ha-ops")
    for r in results:
        jobs = r.jobs or {}
        lost_twice = f"{len(jobs.get('lost', []))}/{len(jobs.get('ran_twice', []))}" if jobs else "-"
        print(f"{r.name:36} {r.verdict:8} {seconds(r.time_to_detect):>8} {seconds(r.time_to_recover):>8}  "
              f"{lost_twice:17}  {BASELINE.get(r.name, '')}")  # fmt: skip


def print_side_by_side(lab: list[Any], ssh: list[Any], elapsed: float) -> None:
    print(f"\nover SSH: standard game day in {elapsed:.0f} s; detect and recover, lab path / SSH path")
    print(f"{'failure':36} {'verdicts':17} {'detect':>15} {'recover':>15}")
    for a, b in zip(lab, ssh, strict=True):
        print(f"{a.name:36} {a.verdict + '/' + b.verdict:17} "
              f"{seconds(a.time_to_detect) + ' / ' + seconds(b.time_to_detect):>15} "
              f"{seconds(a.time_to_recover) + ' / ' + seconds(b.time_to_recover):>15}")  # fmt: skip
    both = [
        (a, b)
        for a, b in zip(lab, ssh, strict=True)
        if None not in (a.time_to_detect, b.time_to_detect, a.time_to_recover, b.time_to_recover)
    ]
    detect = sum(b.time_to_detect for _, b in both) / max(1e-9, sum(a.time_to_detect for a, _ in both))
    recover = sum(b.time_to_recover for _, b in both) / max(1e-9, sum(a.time_to_recover for a, _ in both))
    same = sum(1 for a, b in zip(lab, ssh, strict=True) if a.verdict == b.verdict)
    print(f"over SSH vs lab path: detect {detect:.2f}x, recover {recover:.2f}x (goal <= 1.5x), "
          f"same verdict {same}/{len(lab)}")  # fmt: skip


def main() -> None:
    keep = Path(sys.argv[sys.argv.index("--keep-reports") + 1]) if "--keep-reports" in sys.argv else None
    spec = load_spec(REPO / "examples" / "lab-storage.yaml").model_copy(update={"name": NAME})
    lab = Lab(spec, LabPaths.for_lab(NAME))
    lab.down()
    lab.up()
    try:
        plan = plans.load_plan(PLAN).model_copy(update={"lab": NAME})
        results, elapsed = run(plan, LabCluster(lab), configuration_for(target=f"lab:{NAME}"), keep)
        print_lab(results, elapsed)
        if "--over-ssh" in sys.argv:
            reset_remediation(lab)  # the breaker's window still counts the first run's cordons
            with tempfile.TemporaryDirectory() as folder:
                inventory = Path(folder) / "inventory.yml"
                inventory.write_text(yaml.safe_dump(ssh_inventory(lab.ctx), sort_keys=False))
                os.environ["XDG_STATE_HOME"] = str(Path(folder) / "state")  # this run's own fault journal
                cluster = open_cluster(None, inventory, None)
                try:
                    over, elapsed = run(plan, cluster, configuration_for(inventory=inventory),
                                        keep / "over-ssh" if keep else None)  # fmt: skip
                finally:
                    cluster.close()
            print_side_by_side(results, over, elapsed)
    finally:
        lab.down()


if __name__ == "__main__":
    main()
