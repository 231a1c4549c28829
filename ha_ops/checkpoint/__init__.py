"""The job side of checkpointing: a small library a training job uses (docs/checkpointing.md).

    ckpt = Checkpointer("/shared/ckpt/run1", keep=3, rank=rank, world_size=world_size,
                        interval_s=interval_from_plan(mtbf_s=3.1 * 3600, cost_s=30))
    ckpt.install_signal_handlers()              # SIGTERM, SIGUSR1: only set a flag
    restored = ckpt.latest()                    # newest valid step; torn or corrupt ones are in .skipped
    step = restored.step + 1 if restored else 0
    while step < total:
        train_one_step()
        if ckpt.should_save():                  # the interval passed, or a final save was requested
            ckpt.save(step, {"model.pt": state_bytes})
            if ckpt.final_save_requested:
                sys.exit(0)
        step += 1

Saves are atomic (temp directory, fsync, manifest with sha256, rename, fsync of the directory) and, across ranks,
all-or-nothing: rank 0 commits once every rank's files are on disk (barrier on shared files or torch.distributed).
"""

from ha_ops.checkpoint.barrier import Barrier, FileBarrier, TorchBarrier, default_barrier
from ha_ops.checkpoint.errors import BarrierTimeout, CheckpointError
from ha_ops.checkpoint.interval import interval_from_plan
from ha_ops.checkpoint.layout import FileEntry, Manifest, Restored, Skipped
from ha_ops.checkpoint.store import Checkpointer, Files, Writer, run_id_from_env

__all__ = [
    "Barrier",
    "BarrierTimeout",
    "CheckpointError",
    "Checkpointer",
    "FileBarrier",
    "FileEntry",
    "Files",
    "Manifest",
    "Restored",
    "Skipped",
    "TorchBarrier",
    "Writer",
    "default_barrier",
    "interval_from_plan",
    "run_id_from_env",
]
