"""The reference training job (ha_ops.checkpoint.reference_job) in this process, on real files and real signals:
its event log, a SIGTERM's final save, a resume that names a torn save, and `ha-ops checkpoint` on top."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from ha_ops.chaos.workload import judge
from ha_ops.checkpoint import Checkpointer
from ha_ops.checkpoint.reference_job import STOPPED_EXIT, JobSettings, job_identity, parse_event, run
from tests.unit.cli_helpers import json_of, run_main


def events(settings: JobSettings) -> list[tuple[str, dict[str, str]]]:
    """The log's events, each line's time (`at`, checked here) left out."""
    found = []
    for line in settings.log_path.read_text().splitlines():
        event, fields = parse_event(line)
        assert abs(float(fields.pop("at")) - time.time()) < 60, line
        found.append((event, fields))
    return found


def test_a_job_runs_to_its_last_step_keeping_the_last_three(tmp_path: Path) -> None:
    s = JobSettings(tmp_path, "11", steps=5, step_s=0)
    assert run(s, host="gpu1", restart=0) == 0
    got = events(s)
    assert got[0] == ("start", {"host": "gpu1", "restart": "0", "rank": "0", "world": "1", "from": "0",
                                "pid": str(os.getpid()), "skipped": "-"})  # fmt: skip
    assert [f["step"] for e, f in got if e == "saved"] == ["1", "2", "3", "4", "5"]
    assert got[-1] == ("done", {"host": "gpu1", "step": "5"})
    assert Checkpointer(s.checkpoint_dir).steps() == [3, 4, 5]


def test_sigterm_makes_a_final_save_and_the_restart_resumes_there(tmp_path: Path) -> None:
    s = JobSettings(tmp_path, "12", steps=10, step_s=0, save_every=0)  # no scheduled saves: only the final one
    calls = []

    def sleep(_: float) -> None:
        calls.append(1)
        if len(calls) == 4:
            os.kill(os.getpid(), signal.SIGTERM)  # as Slurm's requeue or a pod's deletion sends it

    previous = signal.getsignal(signal.SIGTERM)
    try:
        assert run(s, host="gpu1", restart=0, sleep=sleep) == STOPPED_EXIT
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert [e for e, _ in events(s)] == ["start", "saved", "stopped"]
    assert events(s)[1][1] == {"step": "4"}
    assert run(s, host="gpu2", restart=1, sleep=lambda _: None) == 0
    account = judge(["12"], {"12": s.log_path.read_text().splitlines()}, queued=set())
    assert account.ok and account.resumes == {"12": [{"from": 4, "last_saved": 4}]}


def test_a_torn_save_is_skipped_and_named_in_the_start_line(tmp_path: Path) -> None:
    s = JobSettings(tmp_path, "13", steps=3, step_s=0)
    run(s, host="gpu1", restart=0)
    torn = s.checkpoint_dir / ".tmp-step-00000004"  # what kill -9 in a save of step 4 leaves
    (torn / "rank-0").mkdir(parents=True)
    (torn / "rank-0" / "state.bin").write_bytes(b"half")
    s2 = JobSettings(tmp_path, "13", steps=5, step_s=0)
    assert run(s2, host="gpu2", restart=1) == 0
    start = [f for e, f in events(s2) if e == "start"][1]
    assert start["from"] == "3" and start["skipped"] == "4"
    assert not torn.exists()  # the next save cleaned it up


def test_a_job_of_several_ranks_refuses_a_time_interval(tmp_path: Path) -> None:
    s = JobSettings(tmp_path, "14", steps=3, interval_s=60, rank=0, world_size=2)
    with pytest.raises(Exception, match="save_every"):
        run(s, host="gpu1", restart=0)


def test_the_job_finds_its_identity_under_slurm_and_kubernetes() -> None:
    slurm = {"SLURM_JOB_ID": "77", "SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURMD_NODENAME": "gpu3",
             "SLURM_RESTART_COUNT": "2"}  # fmt: skip
    assert job_identity(slurm) == ("77", 1, 2, "gpu3", 2)
    k8s = {"JOB_NAME": "train", "JOB_COMPLETION_INDEX": "3", "WORLD_SIZE": "4", "NODE_NAME": "node-a"}
    assert job_identity(k8s) == ("train", 3, 4, "node-a", 0)


def test_cli_job_and_ls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    args = ["checkpoint", "job", str(tmp_path), "--steps", "2", "--step-s", "0", "--job-id", "j1"]
    assert run_main(monkeypatch, *args) == 0
    data = json_of(monkeypatch, capsys, "checkpoint", "ls", str(tmp_path / "j1.ckpt"))
    assert data["latest"] == 2 and data["steps"] == [1, 2] and data["skipped"] == []


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--steps", "0"], "--steps: 0 must be at least 1"),
        (["--steps", "2", "--keep", "0"], "--keep: 0 must be at least 1"),
        (["--steps", "2", "--interval", "soon"], "--interval"),
    ],
)
def test_cli_bad_options_are_one_line_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, args: list[str], named: str
) -> None:
    assert run_main(monkeypatch, "checkpoint", "job", str(tmp_path), "--job-id", "j", *args) == 2
    err = capsys.readouterr().err.strip()
    assert named in err and len(err.splitlines()) == 1
