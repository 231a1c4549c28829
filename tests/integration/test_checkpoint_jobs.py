"""The reference training job (ha_ops.checkpoint) under the lab's real Slurm: killed with SIGKILL in the middle of a
save and requeued, it resumes from the last committed step and names the torn one; requeued by Slurm (SIGTERM), it
makes a final save and resumes there. The game days run the same job (ha_ops.chaos.workload)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ha_ops.chaos.workload import JOB, judge
from ha_ops.checkpoint.reference_job import parse_event
from ha_ops.errors import WaitTimeout
from ha_ops.lab.cluster import Lab
from ha_ops.schedulers.slurm import Slurm, job_exit_code
from ha_ops.util.wait import wait_for
from tests.labkit import cluster

pytestmark = pytest.mark.lab

MIB = 1 << 20


@pytest.fixture
def work(lab: Lab) -> Iterator[Path]:
    folder = lab.paths.shared / "jobs" / "checkpoint"
    subprocess.run(["rm", "-rf", str(folder)], check=True)
    folder.mkdir(parents=True)
    script = folder / "job.sh"
    script.write_text(JOB.format(ha_ops=cluster(lab).ha_ops_command("gpu1")))
    script.chmod(0o755)
    yield folder


@pytest.fixture
def slurm(lab: Lab) -> Iterator[Slurm]:
    slurm = Slurm(lab.transport("gpu1"))
    yield slurm
    lab.node("gpu1").run(["scancel", "--name", "ckpt-test"], check=False)


def submit(lab: Lab, work: Path, *args: str) -> str:
    argv = ["sbatch", "--requeue", "--parsable", "-J", "ckpt-test", "-o", str(work / "%j.out"), str(work / "job.sh"),
            str(work), *args]  # fmt: skip
    return lab.node("gpu1").run(argv).stdout.strip().split(";")[0]


def events(work: Path, job: str) -> list[tuple[str, dict[str, str]]]:
    path = work / f"{job}.log"
    return [parse_event(line) for line in path.read_text().splitlines()] if path.exists() else []


def ended_record(slurm: Slurm, job: str) -> object:
    """The finished job's exit code in squeue --json's record (slurmctld keeps it for MinJobAge)."""
    record = slurm._job_record(job)  # the adapter reads this field of COMPLETING jobs only: no public reader
    assert record is not None, f"job {job} forgotten"
    return record.get("exit_code")


def state(slurm: Slurm, job: str) -> str:
    return next((j.state for j in slurm.jobs() if j.id == job), "")


def requeue_and_finish(
    lab: Lab, slurm: Slurm, work: Path, job: str, away_from: str | None = None
) -> list[tuple[str, dict[str, str]]]:
    """Requeue the job and wait for it to complete. `away_from`: a node it must not restart on, as after a drain
    (slurmd refuses to start a job it has just killed for the requeue: "Job N already killed, do not launch")."""
    if away_from is None:
        slurm.requeue(job)  # scontrol requeue, then eligible at once (as the remediation controller does it)
    else:
        lab.node("gpu1").run(["scontrol", "requeue", job])
        wait_for(f"job {job} pending", lambda: slurm.job_state(job) == "PENDING", timeout=15, interval=0.1)
        lab.node("gpu1").run(["scontrol", "update", f"JobId={job}", f"ExcNodeList={away_from}"])
        slurm.release_requeued(job)
    try:
        wait_for(f"job {job} completed", lambda: slurm.job_state(job) == "COMPLETED", timeout=60, interval=0.2)
    except WaitTimeout:
        shown = lab.node("gpu1").run(["scontrol", "show", "job", job], check=False).stdout
        out = (work / f"{job}.out").read_text() if (work / f"{job}.out").exists() else "-"
        raise AssertionError(f"job {job} not done after its requeue: log {events(work, job)}; {shown}; {out}") from None
    return events(work, job)


def test_kill_9_mid_save_then_requeue_resumes_from_the_last_committed_step(lab: Lab, slurm: Slurm, work: Path) -> None:
    # 16 MiB saves after every 0.05 s step: most of the job's time is in a save, so a SIGKILL lands in one.
    job = submit(lab, work, "--steps", "12", "--step-s", "0.05", "--state-bytes", str(16 * MIB))
    wait_for("a few saves", lambda: sum(e == "saved" for e, _ in events(work, job)) >= 3, timeout=30, interval=0.05)
    pid = int(next(f["pid"] for e, f in events(work, job) if e == "start"))
    checkpoints = work / f"{job}.ckpt"
    deadline = time.time() + 10
    while time.time() < deadline and not any(p.name.startswith(".tmp-step-") for p in checkpoints.iterdir()):
        time.sleep(0.002)
    os.kill(pid, signal.SIGKILL)  # the job's own process: the batch script exec'd ha-ops
    wait_for(f"job {job} ended", lambda: state(slurm, job) not in ("RUNNING", "COMPLETING"), timeout=30, interval=0.1)
    # Slurm's record says how it ended, as the remediation executor reads it of a COMPLETING job (it leaves a job
    # that ran to its end, and requeues one that failed).
    assert job_exit_code(ended_record(slurm, job)) not in (0, None)
    torn = sorted(p.name for p in checkpoints.iterdir() if p.name.startswith(".tmp-step-"))
    last_saved = max(int(f["step"]) for e, f in events(work, job) if e == "saved")

    listed = subprocess.run([sys.executable, "-m", "ha_ops", "checkpoint", "ls", str(checkpoints), "--json"],
                            capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    shown = json.loads(listed.stdout)
    assert shown["latest"] >= last_saved
    assert sorted(s["path"].rsplit("/", 1)[1] for s in shown["skipped"] if s["kind"] == "temp-left-behind") == torn

    log = requeue_and_finish(lab, slurm, work, job)
    starts = [f for e, f in log if e == "start"]
    assert len(starts) == 2 and starts[1]["restart"] == "1"
    assert int(starts[1]["from"]) >= last_saved > 0  # every committed save kept; none done again
    assert int(starts[1]["from"]) == shown["latest"]
    # The SIGKILL came inside a save (nearly always): the restart named the torn step and passed it over.
    assert starts[1]["skipped"] == (",".join(t.split("-")[2].lstrip("0") or "0" for t in torn) or "-")
    account = judge([job], {job: (work / f"{job}.log").read_text().splitlines()}, queued=set())
    assert account.ok and account.completed_once == [job] and account.restarted == [job]
    assert job_exit_code(ended_record(slurm, job)) == 0
    print(f"killed in a save: {bool(torn)}; last saved step {last_saved}; resumed from {starts[1]['from']}")


def test_slurm_requeue_sends_sigterm_the_job_saves_once_and_resumes_there(lab: Lab, slurm: Slurm, work: Path) -> None:
    # No scheduled saves: the only checkpoint is the one the SIGTERM asks for.
    job = submit(lab, work, "--steps", "60", "--step-s", "0.1", "--save-every", "0")
    started = wait_for(f"job {job} started", lambda: events(work, job), timeout=30, interval=0.1)
    time.sleep(1.0)
    log = requeue_and_finish(lab, slurm, work, job, away_from=started[0][1]["host"])
    kinds = [e for e, _ in log]
    assert kinds[:3] == ["start", "saved", "stopped"], log
    final = int(log[1][1]["step"])
    assert 0 < final < 60
    second = log[3][1]
    assert log[3][0] == "start" and int(second["from"]) == final and second["skipped"] == "-"
    assert second["host"] != started[0][1]["host"] and second["restart"] == "1"
    assert kinds[-1] == "done" and int(log[-1][1]["step"]) == 60


def test_a_two_rank_job_killed_mid_run_resumes_both_ranks_from_the_same_step(
    lab: Lab, slurm: Slurm, work: Path
) -> None:
    script = work / "job2.sh"  # one rank per node, through srun: rank and world size come from Slurm
    script.write_text(f'#!/bin/sh\nexec srun {cluster(lab).ha_ops_command("gpu1")} checkpoint job "$@"\n')
    script.chmod(0o755)
    argv = ["sbatch", "--requeue", "--parsable", "-N", "2", "--ntasks-per-node=1", "-J", "ckpt-test", "-o",
            str(work / "%j.out"), str(script), str(work), "--steps", "30", "--step-s", "0.1"]  # fmt: skip
    job = lab.node("gpu1").run(argv).stdout.strip().split(";")[0]
    logs = (work / f"{job}.log", work / f"{job}.rank1.log")

    def rank_events(rank: int) -> list[tuple[str, dict[str, str]]]:
        return [parse_event(line) for line in logs[rank].read_text().splitlines()] if logs[rank].exists() else []

    wait_for("both ranks saving", lambda: all(sum(e == "saved" for e, _ in rank_events(r)) >= 3 for r in (0, 1)),
             timeout=30, interval=0.05)  # fmt: skip
    for rank in (0, 1):
        os.kill(int(rank_events(rank)[0][1]["pid"]), signal.SIGKILL)
    wait_for(f"job {job} ended", lambda: state(slurm, job) not in ("RUNNING", "COMPLETING"), timeout=30, interval=0.1)
    committed = json.loads(subprocess.run(
        [sys.executable, "-m", "ha_ops", "checkpoint", "ls", str(work / f"{job}.ckpt"), "--world-size", "2", "--json"],
        capture_output=True, text=True, timeout=60, check=True).stdout)["latest"]  # fmt: skip
    requeue_and_finish(lab, slurm, work, job)
    starts = [[f for e, f in rank_events(r) if e == "start"] for r in (0, 1)]
    assert [len(s) for s in starts] == [2, 2]
    assert starts[0][1]["from"] == starts[1][1]["from"] == str(committed) and committed >= 3
    assert all(s[1]["world"] == "2" and s[1]["restart"] == "1" for s in starts)
    assert [f["step"] for r in (0, 1) for e, f in rank_events(r) if e == "done"] == ["30", "30"]
