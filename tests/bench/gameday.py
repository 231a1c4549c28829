"""Benchmark: the standard game day (chaos/gamedays/standard.yaml) in a fresh full lab (examples/lab-storage.yaml,
root). Prints time to detect and to recover per failure beside the defaults of the systems a cluster would otherwise
rely on (shared/REFERENCE-NUMBERS.md). Figures only; nothing is asserted.

Run: sudo .venv/bin/python tests/bench/gameday.py [--keep-reports DIR]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ha_ops.chaos import plan as plans
from ha_ops.chaos import report
from ha_ops.chaos.gameday import run_gameday, seconds
from ha_ops.chaos.target import configuration_for
from ha_ops.cluster.lab import LabCluster
from ha_ops.lab.cluster import Lab
from ha_ops.lab.paths import LabPaths
from ha_ops.spec import load_spec
from tests.labkit import REPO

NAME = "benchgd"

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


def main() -> None:
    keep = Path(sys.argv[sys.argv.index("--keep-reports") + 1]) if "--keep-reports" in sys.argv else None
    spec = load_spec(REPO / "examples" / "lab-storage.yaml").model_copy(update={"name": NAME})
    lab = Lab(spec, LabPaths.for_lab(NAME))
    lab.down()
    lab.up()
    try:
        plan = plans.load_plan(REPO / "chaos" / "gamedays" / "standard.yaml").model_copy(update={"lab": NAME})
        started = time.monotonic()
        results = run_gameday(plan, LabCluster(lab), configuration_for(target=f"lab:{NAME}"),
                              progress=lambda line: print(line, flush=True))  # fmt: skip
        elapsed = time.monotonic() - started
        if keep:
            report.write_reports(plan, results, keep)
        print(f"\nstandard game day in {elapsed:.0f} s (lab: SlurmctldTimeout, SlurmdTimeout 5 s; BFD 100 ms x 3)")
        print(f"{'failure':36} {'verdict':8} {'detect':>8} {'recover':>8}  jobs (lost/twice)  without ha-ops")
        for r in results:
            jobs = r.jobs or {}
            lost_twice = f"{len(jobs.get('lost', []))}/{len(jobs.get('ran_twice', []))}" if jobs else "-"
            print(f"{r.name:36} {r.verdict:8} {seconds(r.time_to_detect):>8} {seconds(r.time_to_recover):>8}  "
                  f"{lost_twice:17}  {BASELINE.get(r.name, '')}")  # fmt: skip
    finally:
        lab.down()


if __name__ == "__main__":
    main()
