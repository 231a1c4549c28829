"""Benchmark: the lab's Kubernetes with 1,500 KWOK GPU nodes (examples/lab.yaml's 4 plus 1,496 more, spread over its
failure domains): the time from the API being ready until every node is registered and Ready, and the memory of the
control plane (RSS of etcd, kube-apiserver, kube-controller-manager, kube-scheduler and KWOK). Root; prints figures.

Run: sudo .venv/bin/python tests/bench/kwok_scale.py [--nodes 1500]
"""

from __future__ import annotations

import argparse
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
        time.sleep(30)  # a steady state: heartbeats (node leases) running for every node
        state = lab.state()
        total = 0.0
        for service in CONTROL_PLANE:
            svc = state.services[f"host/{service}"]
            assert svc.pid is not None
            mib = rss_mib(svc.pid)
            total += mib
            print(f"  {service:24} {mib:7.0f} MiB")
        print(f"control plane memory with {ready} nodes: {total:.0f} MiB RSS")
        if ready != args.nodes:
            raise SystemExit(f"only {ready} of {args.nodes} nodes Ready")
    finally:
        down_or_exit(lab)


if __name__ == "__main__":
    main()
