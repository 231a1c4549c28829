"""The reference training job: the job contract (docs/architecture.md) kept with ha_ops.checkpoint, for game days,
lab tests and an operator's smoke test of a cluster (`ha-ops checkpoint job`).

It "trains" by sleeping one step at a time, and saves a state whose bytes encode the step, so a resume can show
that the bytes it read back are the step's. Everything it does goes into an event log beside its checkpoints, one
line per event, appended and fsynced, which the game day's accounting reads (ha_ops.chaos.workload):

    start host=gpu1 restart=0 rank=0 world=1 from=0 pid=4242 skipped=- at=1796518651.785
    saved step=1 at=1796518652.801
    stopped step=7 signal=final-save at=1796518658.012      (SIGTERM/SIGUSR1: a final save, then exit 143)
    done host=gpu1 step=15 at=1796518666.930

`from` is the step the attempt resumed at (0: no checkpoint), `skipped` the torn or corrupt steps it passed over,
`at` the time the line was written (epoch seconds), to set beside the controller's audit and the game day's timeline.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ha_ops.checkpoint.errors import CheckpointError
from ha_ops.checkpoint.store import Checkpointer

STATE_FILE = "state.bin"
STOPPED_EXIT = 143  # 128 + SIGTERM: stopped on request, not finished (a Kubernetes Job must not count it complete)


@dataclass(frozen=True)
class JobSettings:
    directory: Path  # the job's folder on shared storage: <job_id>.log and <job_id>.ckpt/ live here
    job_id: str
    steps: int
    step_s: float = 1.0
    save_every: int = 1  # steps between saves; 0: only at the end and on a signal
    interval_s: float | None = None  # also save when this long has passed (one rank only: ranks' clocks differ)
    state_bytes: int = 4096
    keep: int = 3
    rank: int = 0
    world_size: int = 1

    @property
    def log_path(self) -> Path:
        name = self.job_id if self.rank == 0 else f"{self.job_id}.rank{self.rank}"
        return self.directory / f"{name}.log"

    @property
    def checkpoint_dir(self) -> Path:
        return self.directory / f"{self.job_id}.ckpt"


def job_identity(env: Mapping[str, str]) -> tuple[str, int, int, str, int]:
    """(job id, rank, world size, host, restart count) from Slurm's, torchrun's or Kubernetes' environment."""
    job_id = env.get("HA_OPS_JOB_ID") or env.get("SLURM_JOB_ID") or env.get("JOB_NAME") or ""
    rank = int(env.get("SLURM_PROCID") or env.get("RANK") or env.get("JOB_COMPLETION_INDEX") or 0)
    world = int(env.get("SLURM_NTASKS") or env.get("WORLD_SIZE") or 1)
    host = env.get("SLURMD_NODENAME") or env.get("NODE_NAME") or socket.gethostname()
    restart = int(env.get("SLURM_RESTART_COUNT") or env.get("TORCHELASTIC_RESTART_COUNT") or 0)
    return job_id, rank, world, host, restart


def state_for(step: int, size: int) -> bytes:
    """The state saved at `step`: its 8-byte step number, repeated to `size` bytes."""
    word = step.to_bytes(8, "little")
    return (word * (size // 8 + 1))[:size]


def append_event(path: Path, event: str, **fields: object) -> None:
    """One line, appended and fsynced: the accounting must see every save that committed before a crash."""
    line = " ".join([event, *(f"{k}={v}" for k, v in fields.items()), f"at={time.time():.3f}"]) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def parse_event(line: str) -> tuple[str, dict[str, str]]:
    """('saved', {'step': '3'}) from 'saved step=3'; ('', {}) for a line that is not an event (a torn last line)."""
    event, *rest = line.split() or [""]
    fields = dict(part.split("=", 1) for part in rest if "=" in part)
    return (event, fields) if len(fields) == len(rest) else ("", {})


def run(settings: JobSettings, host: str, restart: int, sleep: Callable[[float], None] = time.sleep) -> int:
    """Run the job to its last step (exit 0), or to a final save on SIGTERM/SIGUSR1 (exit 143).

    With world_size > 1 every rank saves the same steps (save_every) and must get the signal: Slurm and Kubernetes
    signal every task of a job; a rank left unsignalled would wait at the next save's barrier."""
    s = settings
    if s.world_size > 1 and s.interval_s is not None:
        raise CheckpointError("interval_s: ranks' clocks differ, so a job of several ranks saves by steps (save_every)")
    ckpt = Checkpointer(s.checkpoint_dir, keep=s.keep, rank=s.rank, world_size=s.world_size, interval_s=s.interval_s)
    ckpt.install_signal_handlers()
    restored = ckpt.latest()
    step = 0
    if restored is not None:
        step = restored.step
        got = restored.paths[STATE_FILE].read_bytes()[:8]
        if got != state_for(step, 8):
            raise CheckpointError(f"{restored.directory}: its state is for step {int.from_bytes(got, 'little')}")
    skipped = ",".join(str(x.step) for x in ckpt.skipped if x.step is not None) or "-"
    if ckpt.barrier is not None:  # no rank's first save may start before every rank has chosen where to resume
        ckpt.barrier.wait(f"{ckpt.run_id}/resumed", s.rank, s.world_size, ckpt.barrier_timeout_s)
    append_event(s.log_path, "start", host=host, restart=restart, rank=s.rank, world=s.world_size, **{"from": step},
                 pid=os.getpid(), skipped=skipped)  # fmt: skip
    alone = s.world_size == 1
    while step < s.steps:
        if alone and ckpt.final_save_requested:
            break
        sleep(s.step_s)
        step += 1
        scheduled = (s.save_every > 0 and step % s.save_every == 0) or step == s.steps
        if scheduled or (alone and ckpt.should_save()):
            ckpt.save(step, {STATE_FILE: state_for(step, s.state_bytes)})
            append_event(s.log_path, "saved", step=step)
            if ckpt.final_save_requested:  # several ranks: each stops at the first scheduled save after the signal
                break
    if step < s.steps:  # asked to stop: the step just finished was saved (should_save saw the flag), or is now
        if step not in ckpt.steps():
            ckpt.save(step, {STATE_FILE: state_for(step, s.state_bytes)})
            append_event(s.log_path, "saved", step=step)
        append_event(s.log_path, "stopped", step=step, signal="final-save")
        return STOPPED_EXIT
    append_event(s.log_path, "done", host=host, step=step)
    return 0
