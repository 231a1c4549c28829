"""ha_ops.checkpoint with real processes and real signals, no mocks: kill -9 in the middle of a save, SIGTERM (and
SIGUSR1) asking for a final save, and a 2-rank job killed mid-run and restarted. Each test is bounded to a few
seconds by the waits below; nothing asserts on a duration."""

from __future__ import annotations

import os
import queue
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from ha_ops.checkpoint import Checkpointer

REPO = Path(__file__).resolve().parents[2]
MIB = 1 << 20

# A training job in miniature: argv is JSON; it prints one line per event so the parent can follow it.
CHILD = r"""
import json, os, sys, time
from ha_ops.checkpoint import BarrierTimeout, Checkpointer

args = json.loads(sys.argv[1])
size = args.get("size", 4 << 20)

def payload(step, rank=0):
    return (step * 10 + rank).to_bytes(4, "little") * (size // 4)

def say(*words):
    print(*words, flush=True)

ckpt = Checkpointer(args["dir"], keep=args.get("keep", 3), rank=args.get("rank", 0),
                    world_size=args.get("world_size", 1), run_id=args.get("run_id"),
                    barrier_timeout_s=args.get("barrier_timeout_s", 30.0))
restored = ckpt.latest()
say("resume", restored.step if restored else -1)
for s in ckpt.skipped:
    say("skipped", s.kind, s.path.name)
step = restored.step + 1 if restored else 0
mode = args["mode"]

if mode == "loop":  # save every step; at pause_at, pause inside the save (after the shard, before the rename)
    while True:
        if step == args.get("pause_at"):
            def slow(directory, step=step):
                (directory / "model.bin").write_bytes(payload(step))
                say("in-save", step)
                time.sleep(60)
            ckpt.save(step, slow)
        else:
            ckpt.save(step, {"model.bin": payload(step)})
        say("saved", step)
        step += 1

elif mode == "signal":  # steps of "work"; save only when asked, at the next safe point, then exit 0
    ckpt.install_signal_handlers()
    say("ready")
    while True:
        time.sleep(0.02)  # one training step
        say("step", step)
        if ckpt.should_save():
            ckpt.save(step, {"model.bin": payload(step)})
            say("final", step)
            sys.exit(0)
        step += 1

elif mode == "ranks":  # every rank saves every step; at hang_at, rank 1 hangs or dies before its save
    rank = args["rank"]
    while step < args["steps"]:
        if step == args.get("hang_at") and "short_timeout_s" in args:
            ckpt.barrier_timeout_s = args["short_timeout_s"]  # only here: slow starts elsewhere must not time out
        if step == args.get("hang_at") and rank == 1:
            say("hang", step)
            if args.get("die"):
                os._exit(3)
            time.sleep(60)
        try:
            ckpt.save(step, {"shard.bin": payload(step, rank)})
        except BarrierTimeout as e:
            say("error", e)
            sys.exit(2)
        say("saved", step)
        step += 1
    say("done")
"""


class Child:
    """A child process whose stdout lines arrive on a queue, so the parent can wait for one with a bound."""

    def __init__(self, **args: object) -> None:
        import json

        env = {**os.environ, "PYTHONPATH": str(REPO)}
        for key in ("HA_OPS_CHECKPOINT_RUN_ID", "SLURM_JOB_ID", "SLURM_RESTART_COUNT", "TORCHELASTIC_RUN_ID"):
            env.pop(key, None)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, json.dumps(args)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=REPO,
            env=env,
        )
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        with self.proc.stdout:
            for line in self.proc.stdout:
                self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for(self, prefix: str, timeout: float = 20.0) -> str:
        while True:
            try:
                line = self._queue.get(timeout=timeout)
            except queue.Empty:
                self.kill()
                pytest.fail(f"no {prefix!r} line within {timeout} s; got {self.lines}")
            if line is None:
                pytest.fail(f"the child exited ({self.proc.wait()}) before {prefix!r}; got {self.lines}")
            self.lines.append(line)
            if line.startswith(prefix):
                return line

    def finish(self, timeout: float = 20.0) -> int:
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"the child did not exit within {timeout} s; got {self.lines}")
        while (line := self._queue.get(timeout=5)) is not None:
            self.lines.append(line)
        return rc

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        self._reader.join(timeout=10)  # it closes the pipe at EOF

    def saved(self) -> list[int]:
        return [int(line.split()[1]) for line in self.lines if line.startswith("saved ")]


@pytest.fixture
def children() -> list[Child]:
    started: list[Child] = []
    yield started
    for child in started:
        child.kill()


def test_kill_9_mid_save_resumes_from_the_previous_step_and_the_next_save_cleans_the_temp(
    tmp_path: Path, children: list[Child]
) -> None:
    child = Child(dir=str(tmp_path), mode="loop", pause_at=3)
    children.append(child)
    child.wait_for("in-save 3")  # the 4 MiB shard of step 3 is written; the save is paused before its rename
    child.kill()
    assert child.proc.returncode == -signal.SIGKILL
    assert child.saved() == [0, 1, 2]

    ckpt = Checkpointer(tmp_path, keep=3)
    restored = ckpt.latest()
    assert restored is not None and restored.step == 2
    assert restored.paths["model.bin"].read_bytes() == (20).to_bytes(4, "little") * (MIB)
    [torn] = restored.skipped
    assert (torn.kind, torn.step, torn.path.name) == ("temp-left-behind", 3, ".tmp-step-00000003")

    ckpt.save(3, {"model.bin": b"after the crash"})
    assert not torn.path.exists()
    assert sorted(os.listdir(tmp_path)) == ["step-00000001", "step-00000002", "step-00000003"]


def test_kill_9_at_random_points_of_a_save_loop_always_leaves_a_valid_latest_step(
    tmp_path: Path, children: list[Child]
) -> None:
    rng = random.Random(23)
    last_saved = -1
    for _ in range(4):
        child = Child(dir=str(tmp_path), mode="loop")
        children.append(child)
        resumed = int(child.wait_for("resume").split()[1])
        assert resumed >= last_saved  # never behind a save that returned
        child.wait_for("saved")
        threading.Event().wait(rng.uniform(0.0, 0.3))  # a random point of some save
        child.kill()
        child.finish()
        last_saved = max(child.saved())
        restored = Checkpointer(tmp_path, keep=3).latest()
        assert restored is not None
        # the latest valid step is the last save that returned, or the one after it if the kill came after its
        # rename but before the child printed
        assert restored.step in (last_saved, last_saved + 1)
        assert all(s.kind == "temp-left-behind" for s in restored.skipped)
        assert restored.paths["model.bin"].read_bytes()[:4] == (restored.step * 10).to_bytes(4, "little")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR1], ids=["SIGTERM", "SIGUSR1"])
def test_a_signal_triggers_one_final_save_at_the_next_safe_point_and_a_clean_exit(
    tmp_path: Path, children: list[Child], sig: signal.Signals
) -> None:
    child = Child(dir=str(tmp_path), mode="signal", size=MIB)
    children.append(child)
    child.wait_for("ready")
    child.wait_for("step 3")
    assert os.listdir(tmp_path) == []  # nothing saved before the signal
    child.proc.send_signal(sig)
    final = int(child.wait_for("final").split()[1])
    assert child.finish() == 0
    restored = Checkpointer(tmp_path).latest()
    assert restored is not None and restored.step == final >= 3
    assert Checkpointer(tmp_path).steps() == [final]  # exactly one save: the final one


def start_ranks(tmp_path: Path, children: list[Child], **args: object) -> tuple[Child, Child]:
    pair = (
        Child(dir=str(tmp_path), mode="ranks", rank=0, world_size=2, size=MIB, **args),
        Child(dir=str(tmp_path), mode="ranks", rank=1, world_size=2, size=MIB, **args),
    )
    children.extend(pair)
    return pair


def test_two_ranks_killed_mid_run_both_resume_from_the_last_step_both_completed(
    tmp_path: Path, children: list[Child]
) -> None:
    # attempt 1: rank 1 hangs before its save of step 4; rank 0 has written its shard of 4 and waits at the barrier
    rank0, rank1 = start_ranks(tmp_path, children, run_id="attempt1", steps=8, hang_at=4)
    rank1.wait_for("hang 4")
    rank0.wait_for("saved 3")
    barrier_file = tmp_path / ".barrier" / "attempt1" / "00000004" / "written" / "0"
    for _ in range(200):  # until rank 0 is at the barrier of step 4 (bounded: 200 x 50 ms)
        if barrier_file.exists():
            break
        threading.Event().wait(0.05)
    assert barrier_file.exists()
    rank0.kill()
    rank1.kill()
    assert rank0.saved() == rank1.saved() == [0, 1, 2, 3]
    assert (tmp_path / ".tmp-step-00000004-attempt1" / "rank-0" / "shard.bin").exists()

    # attempt 2 (a new run id): both resume from 3, the last step both completed, and finish the run
    rank0, rank1 = start_ranks(tmp_path, children, run_id="attempt2", steps=7)
    resumed = {rank0.wait_for("resume"), rank1.wait_for("resume")}
    assert resumed == {"resume 3"}
    assert (
        rank0.wait_for("skipped") == rank1.wait_for("skipped") == "skipped temp-left-behind .tmp-step-00000004-attempt1"
    )
    rank0.wait_for("done")
    rank1.wait_for("done")
    assert rank0.finish() == rank1.finish() == 0
    assert rank0.saved() == rank1.saved() == [4, 5, 6]
    assert sorted(os.listdir(tmp_path)) == [".barrier", "step-00000004", "step-00000005", "step-00000006"]
    assert os.listdir(tmp_path / ".barrier") == ["attempt2"]  # the crashed attempt's barrier files are gone
    for r in (0, 1):
        restored = Checkpointer(tmp_path, rank=r, world_size=2, run_id="check").latest()
        assert restored is not None and restored.step == 6 and restored.skipped == ()
        assert restored.paths["shard.bin"].read_bytes()[:4] == (60 + r).to_bytes(4, "little")


def test_a_rank_dying_before_the_barrier_commits_nothing_and_names_the_missing_rank(
    tmp_path: Path, children: list[Child]
) -> None:
    rank0, rank1 = start_ranks(tmp_path, children, run_id="b1", steps=5, hang_at=2, die=True, short_timeout_s=1.0)
    rank1.wait_for("hang 2")
    assert rank1.finish() == 3
    error = rank0.wait_for("error")
    assert "barrier 'b1/00000002/written'" in error and "rank(s) [1] of world_size 2 missing" in error
    assert rank0.finish() == 2
    assert Checkpointer(tmp_path).steps() == [0, 1]  # step 2 was never committed

    rank0, rank1 = start_ranks(tmp_path, children, run_id="b2", steps=4)
    assert {rank0.wait_for("resume"), rank1.wait_for("resume")} == {"resume 1"}
    assert rank0.finish() == rank1.finish() == 0
    assert rank0.saved() == rank1.saved() == [2, 3]
