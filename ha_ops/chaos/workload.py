"""The game day's workload: a few checkpointing batch jobs that run through each fault, so the report can say
which jobs were lost or ran twice. Each job follows the job contract (docs/architecture.md): it appends a line to
`<id>.started` each time it starts, resumes from `<id>.ckpt`, and appends to `<id>.done` when it finishes."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from pydantic import Field

from ha_ops.chaos.probes import client
from ha_ops.cluster.base import Cluster, ClusterNode
from ha_ops.util.models import ConfigModel

JOB = """#!/bin/sh
dir=$1; total=$2; id=$SLURM_JOB_ID
step=$(cat "$dir/$id.ckpt" 2>/dev/null || echo 0)
echo "$(hostname) ${SLURM_RESTART_COUNT:-0} $step" >> "$dir/$id.started"
while [ "$step" -lt "$total" ]; do sleep 1; step=$((step + 1)); echo "$step" > "$dir/$id.ckpt"; done
hostname >> "$dir/$id.done"
"""


class Workload(ConfigModel):
    jobs: int = Field(3, ge=0, description="Requeueable one-node jobs started before each fault (0: none).")
    duration_s: int = Field(15, ge=1, description="How long each job runs, in 1 s checkpointed steps.")
    finish_within_s: float = Field(90.0, gt=0, description="After the fault, how long the jobs may take to finish.")


@dataclass
class JobAccount:
    jobs: int = 0
    completed_once: list[str] = field(default_factory=list)
    restarted: list[str] = field(default_factory=list)  # requeued and resumed: fine, and worth knowing
    lost: list[str] = field(default_factory=list)  # ended without completing
    ran_twice: list[str] = field(default_factory=list)  # completed more than once
    unfinished: list[str] = field(default_factory=list)  # still queued or running when the wait ended

    @property
    def ok(self) -> bool:
        return not (self.lost or self.ran_twice or self.unfinished)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def submit(cluster: Cluster, directory: str, workload: Workload) -> list[str]:
    """Write the job script into `directory` (on storage every GPU node sees) and submit the jobs."""
    node = cluster.node(client(cluster))
    node.run(["sh", "-c", 'mkdir -p "$1" && cat > "$1/job.sh" && chmod 755 "$1/job.sh"', "sh", directory], input=JOB,
             timeout=30)  # fmt: skip
    partition = cluster.spec.gpu_partition
    gpus = min(n.gpus for n in cluster.layout.nodes_with_role("gpu"))
    ids = []
    for i in range(workload.jobs):
        # A training job takes all of a node's GPUs (so each lands on its own node) and leaves CPUs for others.
        argv = ["sbatch", "--parsable", "--requeue", f"--gres=gpu:{gpus}", "-n", "1", "-N", "1", "-p", partition,
                "-J", f"gameday-{i}", "-o", "/dev/null", f"{directory}/job.sh", directory,
                str(workload.duration_s)]  # fmt: skip
        ids.append(node.run(argv, timeout=30).stdout.strip().split(";")[0])
    return ids


def wait_running(cluster: Cluster, ids: list[str], timeout: float = 30.0) -> bool:
    """Wait until every job runs (a fault should hit running work, not a queue); False if some never started."""
    node = cluster.node(client(cluster))
    deadline = time.time() + timeout
    while time.time() < deadline:
        out = node.run(["squeue", "-h", "-o", "%i %T", "-j", ",".join(ids)], check=False, timeout=30)
        states = dict(line.split() for line in out.stdout.splitlines() if len(line.split()) == 2) if out.ok else {}
        if all(states.get(job) == "RUNNING" for job in ids):
            return True
        time.sleep(0.2)
    return False


def _marker_lines(node: ClusterNode, directory: str, ids: list[str]) -> dict[str, int]:
    """Lines in each job's marker files, read on the node (the files live on the cluster's shared storage)."""
    script = 'cd "$1" && shift && for f in "$@"; do [ -f "$f" ] && echo "$f $(grep -c . "$f")"; done; true'
    names = [f"{job}.{kind}" for job in ids for kind in ("done", "started")]
    out = node.run(["sh", "-c", script, "sh", directory, *names], check=False, timeout=30).stdout
    return {name: int(count) for name, count in (line.split() for line in out.splitlines() if len(line.split()) == 2)}


def account(cluster: Cluster, directory: str, ids: list[str], wait_s: float) -> JobAccount:
    """Wait (up to `wait_s`) for the jobs to leave the queue, then judge each by its markers."""
    node = cluster.node(client(cluster))
    deadline = time.time() + wait_s
    queued: set[str] = set(ids)
    while queued and time.time() < deadline:
        out = node.run(["squeue", "-h", "-o", "%i", "-j", ",".join(ids)], check=False, timeout=30)
        if out.ok:
            queued = set(out.stdout.split()) & set(ids)
        if queued:
            time.sleep(1.0)
    lines = _marker_lines(node, directory, ids)
    result = JobAccount(jobs=len(ids))
    for job in ids:
        done, started = lines.get(f"{job}.done", 0), lines.get(f"{job}.started", 0)
        if done > 1:
            result.ran_twice.append(job)
        elif job in queued:
            # Still queued, even after a run that finished: Slurm lost that completion (it reached no controller in
            # control) and requeued the job, which will run again.
            result.unfinished.append(job)
        elif done == 1:
            result.completed_once.append(job)
        else:
            result.lost.append(job)
        if started > 1:
            result.restarted.append(job)
    return result
