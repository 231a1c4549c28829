"""The game day's workload: a few checkpointing batch jobs that run through each fault, so the report can say
which jobs were lost or ran twice. Each job follows the job contract (docs/architecture.md): it appends a line to
`<id>.started` each time it starts, resumes from `<id>.ckpt`, and appends to `<id>.done` when it finishes."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field

from ha_ops.lab.cluster import Lab
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


def _client(lab: Lab) -> str:
    return lab.ctx.layout.nodes_with_role("gpu")[0].name


def submit(lab: Lab, directory: Path, workload: Workload) -> list[str]:
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "job.sh"
    script.write_text(JOB)
    script.chmod(0o755)
    partition = lab.spec.schedulers.slurm.partition if lab.spec.schedulers.slurm else "gpu"
    gpus = min(n.gpus for n in lab.ctx.layout.nodes_with_role("gpu"))
    ids = []
    for i in range(workload.jobs):
        # A training job takes all of a node's GPUs (so each lands on its own node) and leaves CPUs for others.
        argv = ["sbatch", "--parsable", "--requeue", f"--gres=gpu:{gpus}", "-n", "1", "-N", "1", "-p", partition,
                "-J", f"gameday-{i}", "-o", "/dev/null", str(script), str(directory),
                str(workload.duration_s)]  # fmt: skip
        ids.append(lab.node(_client(lab)).run(argv, timeout=30).stdout.strip().split(";")[0])
    return ids


def wait_running(lab: Lab, ids: list[str], timeout: float = 30.0) -> bool:
    """Wait until every job runs (a fault should hit running work, not a queue); False if some never started."""
    client = lab.node(_client(lab))
    deadline = time.time() + timeout
    while time.time() < deadline:
        out = client.run(["squeue", "-h", "-o", "%i %T", "-j", ",".join(ids)], check=False, timeout=30)
        states = dict(line.split() for line in out.stdout.splitlines() if len(line.split()) == 2) if out.ok else {}
        if all(states.get(job) == "RUNNING" for job in ids):
            return True
        time.sleep(0.2)
    return False


def _lines(path: Path) -> int:
    return len([ln for ln in path.read_text().splitlines() if ln.strip()]) if path.exists() else 0


def account(lab: Lab, directory: Path, ids: list[str], wait_s: float) -> JobAccount:
    """Wait (up to `wait_s`) for the jobs to leave the queue, then judge each by its markers."""
    client = lab.node(_client(lab))
    deadline = time.time() + wait_s
    queued: set[str] = set(ids)
    while queued and time.time() < deadline:
        out = client.run(["squeue", "-h", "-o", "%i", "-j", ",".join(ids)], check=False, timeout=30)
        if out.ok:
            queued = set(out.stdout.split()) & set(ids)
        if queued:
            time.sleep(1.0)
    result = JobAccount(jobs=len(ids))
    for job in ids:
        done, started = _lines(directory / f"{job}.done"), _lines(directory / f"{job}.started")
        if done > 1:
            result.ran_twice.append(job)
        elif done == 1:
            result.completed_once.append(job)
        elif job in queued:
            result.unfinished.append(job)
        else:
            result.lost.append(job)
        if started > 1:
            result.restarted.append(job)
    return result
