"""The one protocol every GPU backend implements (NVML on real nodes, the file-backed fake in the lab)."""

from __future__ import annotations

from typing import Protocol

from ha_ops.errors import HaOpsError
from ha_ops.gpu.types import GpuEvent, GpuSample


class NoGpuError(HaOpsError):
    """There is no GPU here (no NVML library, or no fake GPU state)."""

    exit_code = 3


class GpuBackendError(HaOpsError):
    """The backend failed as a whole (not one reading of one GPU)."""

    exit_code = 3


class GpuBackend(Protocol):
    name: str

    def device_count(self) -> int: ...

    def driver_version(self) -> str: ...

    def sample(self, index: int) -> GpuSample:
        """Read every reading of GPU `index`; a reading that fails is Unreadable, never an exception.

        Raises IndexError for an index that does not exist.
        """
        ...

    def wait_events(self, timeout_s: float) -> list[GpuEvent]:
        """Block up to `timeout_s` for XID / ECC events; return what arrived (possibly nothing)."""
        ...

    def close(self) -> None: ...
