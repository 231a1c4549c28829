"""The checkpoint library's errors: each message names the checkpoint (or barrier) and the problem."""

from __future__ import annotations

from ha_ops.errors import HaOpsError


class CheckpointError(HaOpsError):
    """A checkpoint could not be written, committed or read, or the library was misused."""


class BarrierTimeout(CheckpointError):
    """Not every rank reached a barrier in time; names the barrier and the ranks that were missing."""

    def __init__(self, key: str, where: str, missing: list[int], world_size: int, timeout_s: float) -> None:
        self.key = key
        self.missing = missing
        self.timeout_s = timeout_s
        super().__init__(
            f"barrier {key!r} in {where}: rank(s) {missing} of world_size {world_size} missing after {timeout_s:g} s"
        )
