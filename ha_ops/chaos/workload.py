"""The game day's workload: a few checkpointing batch jobs that run through each fault, so the report can say
which jobs were lost, ran twice, or resumed behind their last checkpoint. Each job is ha-ops' reference training job
(ha_ops.checkpoint.reference_job, the job contract of docs/architecture.md): it saves with ha_ops.checkpoint on the
cluster's shared storage, resumes from its latest valid step, and logs each start, save and finish to
`<id>.log`, which is judged here."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from pydantic import Field

from ha_ops.chaos.probes import client
from ha_ops.checkpoint.reference_job import parse_event
from ha_ops.cluster.base import Cluster, ClusterNode
from ha_ops.util.models import ConfigModel

# Slurm runs a script; the job is the ha-ops on the node (its inventory's ha_ops_command, or the lab's).
JOB = """#!/bin/sh
exec {ha_ops} checkpoint job "$@"
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
    resumed_behind: list[str] = field(default_factory=list)  # a start before the last step it had saved
    resumes: dict[str, list[dict[str, int]]] = field(default_factory=dict)  # job -> each restart's from and last saved

    @property
    def ok(self) -> bool:
        return not (self.lost or self.ran_twice or self.unfinished or self.resumed_behind)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def submit(cluster: Cluster, directory: str, workload: Workload) -> list[str]:
    """Write the job script into `directory` (on storage every GPU node sees) and submit the jobs."""
    name = client(cluster)
    node = cluster.node(name)
    script = JOB.format(ha_ops=cluster.ha_ops_command(name))
    node.run(["sh", "-c", 'mkdir -p "$1" && cat > "$1/job.sh" && chmod 755 "$1/job.sh"', "sh", directory],
             input=script, timeout=30)  # fmt: skip
    partition = cluster.spec.gpu_partition
    gpus = min(n.gpus for n in cluster.layout.nodes_with_role("gpu"))
    ids = []
    for i in range(workload.jobs):
        # A training job takes all of a node's GPUs (so each lands on its own node) and leaves CPUs for others.
        argv = ["sbatch", "--parsable", "--requeue", f"--gres=gpu:{gpus}", "-n", "1", "-N", "1", "-p", partition,
                "-J", f"gameday-{i}", "-o", "/dev/null", f"{directory}/job.sh", directory,
                "--steps", str(workload.duration_s)]  # fmt: skip
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


def _job_logs(node: ClusterNode, directory: str, ids: list[str]) -> dict[str, list[str]]:
    """Each job's event log, read on the node (the logs live on the cluster's shared storage)."""
    script = 'cd "$1" && shift && for j in "$@"; do [ -f "$j.log" ] && { echo "== $j"; cat "$j.log"; }; done; true'
    out = node.run(["sh", "-c", script, "sh", directory, *ids], check=False, timeout=30).stdout
    logs: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in out.splitlines():
        if line.startswith("== "):
            current = logs.setdefault(line[3:], [])
        elif current is not None:
            current.append(line)
    return logs


def account(cluster: Cluster, directory: str, ids: list[str], wait_s: float) -> JobAccount:
    """Wait (up to `wait_s`) for the jobs to leave the queue, then judge each by its event log."""
    node = cluster.node(client(cluster))
    deadline = time.time() + wait_s
    queued: set[str] = set(ids)
    while queued and time.time() < deadline:
        out = node.run(["squeue", "-h", "-o", "%i", "-j", ",".join(ids)], check=False, timeout=30)
        if out.ok:
            queued = set(out.stdout.split()) & set(ids)
        if queued:
            time.sleep(1.0)
    return judge(ids, _job_logs(node, directory, ids), queued)


def judge(ids: list[str], logs: dict[str, list[str]], queued: set[str]) -> JobAccount:
    """Each job judged by its log (reference_job's events, in the order written) and whether Slurm still queues it."""
    result = JobAccount(jobs=len(ids))
    for job in ids:
        starts = done = 0
        last_saved = 0
        for event, fields in map(parse_event, logs.get(job, [])):
            if event == "start":
                starts += 1
                resumed = _number(fields.get("from"))
                if starts > 1:
                    result.resumes.setdefault(job, []).append({"from": resumed, "last_saved": last_saved})
                    if resumed < last_saved and job not in result.resumed_behind:
                        result.resumed_behind.append(job)  # work it had saved was done again, or lost
            elif event == "saved":
                last_saved = max(last_saved, _number(fields.get("step")))
            elif event == "done":
                done += 1
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
        if starts > 1:
            result.restarted.append(job)
    return result


def _number(value: str | None) -> int:
    """A step from the log; 0 for a field a torn line cut short."""
    return int(value) if value and value.isdigit() else 0
