"""Rank barriers for a multi-node save: files on the shared checkpoint storage, or torch.distributed when present.

The file barrier: rank r creates `<root>/<key>/<r>` and polls until all `world_size` names are there, or raises
BarrierTimeout naming the missing ranks. Keys carry the run id (a fresh one per attempt), so a crashed attempt's
files never let a later attempt through. On NFS, a directory listing can be cached for up to `acdirmax` seconds:
mount the checkpoint storage with a short `actimeo` (or `lookupcache=positive,noac`), or use the torch barrier.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Protocol

from ha_ops.checkpoint.errors import BarrierTimeout, CheckpointError


class Barrier(Protocol):
    def wait(self, key: str, rank: int, world_size: int, timeout_s: float) -> None:
        """Return once every rank of `world_size` has called wait with the same key; raise BarrierTimeout if not."""
        ...


class FileBarrier:
    def __init__(self, root: Path, poll_s: float = 0.02) -> None:
        self.root = Path(root)
        self.poll_s = poll_s

    def wait(self, key: str, rank: int, world_size: int, timeout_s: float) -> None:
        where = self.root / key
        where.mkdir(parents=True, exist_ok=True)
        mine = where / str(rank)
        tmp = where / f".{rank}.tmp-{os.getpid()}"
        tmp.write_text(f"{os.uname().nodename} {os.getpid()}\n")
        os.replace(tmp, mine)
        want = {str(r) for r in range(world_size)}
        deadline = time.monotonic() + timeout_s
        while True:
            present = want.intersection(os.listdir(where))
            if len(present) == world_size:
                return
            if time.monotonic() >= deadline:
                missing = sorted(int(r) for r in want - present)
                raise BarrierTimeout(key, str(self.root), missing, world_size, timeout_s)
            time.sleep(self.poll_s)


class TorchBarrier:
    """torch.distributed's barrier on the default process group. NOT TESTED HERE: torch is not installed in CI.

    The timeout is the process group's (set in init_process_group); `key` and `timeout_s` are not used.
    """

    def wait(self, key: str, rank: int, world_size: int, timeout_s: float) -> None:
        import torch.distributed as dist  # lazy: the library must import without torch

        if not (dist.is_available() and dist.is_initialized()):
            raise CheckpointError(f"barrier {key!r}: torch.distributed is not initialised")
        if dist.get_world_size() != world_size or dist.get_rank() != rank:
            raise CheckpointError(
                f"barrier {key!r}: torch.distributed has rank {dist.get_rank()} of {dist.get_world_size()}, "
                f"the checkpointer rank {rank} of {world_size}"
            )
        dist.barrier()


def torch_distributed_ready() -> bool:
    """Whether torch is importable and its default process group is initialised (never imports torch otherwise)."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return False
    import torch.distributed as dist  # untested here

    return bool(dist.is_available() and dist.is_initialized())


def default_barrier(directory: Path) -> Barrier:
    """torch.distributed's barrier when a process group is up, else the file barrier under `<directory>/.barrier`."""
    return TorchBarrier() if torch_distributed_ready() else FileBarrier(directory / ".barrier")
