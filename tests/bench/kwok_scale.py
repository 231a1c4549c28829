"""Benchmark: the lab's Kubernetes with 1,500 KWOK GPU nodes (examples/lab.yaml's 4 plus 1,496 more, spread over its
failure domains): the time from the API being ready until every node is registered and Ready, and the memory and
CPU of the control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler and KWOK). Root; prints
figures.

Run: sudo .venv/bin/python tests/bench/kwok_scale.py [--nodes 1500]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ha_ops.lab import kubernetes
from ha_ops.lab.cluster import Lab
from ha_ops.lab.paths import LabPaths
from ha_ops.spec.model import Kubernetes
from tests.labkit import down_or_exit, lab_spec

NAME = "benchk8s"
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def control_plane_usage(lab: Lab, nodes: int, window_s: float = 60.0) -> str:
    """Each control-plane process' memory (RSS) and CPU (cores, over `window_s` of steady state: node leases
    renewed, nothing else asked of it)."""
    pids = {}
    for service in CONTROL_PLANE:
        pid = lab.state().services[f"host/{service}"].pid
        assert pid is not None
        pids[service] = pid
    before = {s: cpu_s(pid) for s, pid in pids.items()}
    time.sleep(window_s)
    lines, mib_total, cores_total = [], 0.0, 0.0
    for service, pid in pids.items():
        mib, cores = rss_mib(pid), (cpu_s(pid) - before[service]) / window_s
        mib_total, cores_total = mib_total + mib, cores_total + cores
        lines.append(f"  {service:24} {mib:7.0f} MiB {cores:5.2f} cores")
    lines.append(f"control plane with {nodes} nodes: {mib_total:.0f} MiB RSS, {cores_total:.2f} cores (steady, "
                 f"{window_s:.0f} s)")  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=1500)
    args = parser.parse_args()
    spec = lab_spec(NAME)
    gpu_nodes = sum(p.count for p in spec.pools)
    spec = spec.model_copy(update={"kubernetes": Kubernetes(extra_kwok_nodes=args.nodes - gpu_nodes)})
    lab = Lab(spec, LabPaths.for_lab(NAME))
    lab.down()
    marks: dict[str, float] = {}

    def progress(line: str) -> None:
        for event in ("Kubernetes API ready", "registered"):
            if line.startswith(event):
                marks.setdefault(event, time.monotonic())
        print(f"  {line}", flush=True)

    try:
        started = time.monotonic()
        lab.up(progress=progress, timeout=900)
        done = time.monotonic()
        api_ready, registered = marks["Kubernetes API ready"], marks["registered"]
        with kubernetes.client(lab.ctx) as api:
            ready = len(kubernetes.ready_nodes(api))
        print(f"lab up with Kubernetes: {done - started:.1f} s")
        print(f"{ready} KWOK GPU nodes registered and Ready {done - api_ready:.1f} s after the API was ready "
              f"(registration {registered - api_ready:.1f} s, then Ready {done - registered:.1f} s)")  # fmt: skip
        print(control_plane_usage(lab, ready))
        if ready != args.nodes:
            raise SystemExit(f"only {ready} of {args.nodes} nodes Ready")
    finally:
        down_or_exit(lab)


if __name__ == "__main__":
    main()
