"""GPU access behind one protocol: NVML on real nodes, a file-backed fake in the lab and tests."""

from __future__ import annotations

from pathlib import Path

from ha_ops.gpu.backend import GpuBackend, GpuBackendError, NoGpuError
from ha_ops.gpu.types import NOT_SUPPORTED, GpuEvent, GpuSample, Unreadable, known

__all__ = [
    "NOT_SUPPORTED",
    "GpuBackend",
    "GpuBackendError",
    "GpuEvent",
    "GpuSample",
    "NoGpuError",
    "Unreadable",
    "known",
    "open_backend",
]


def open_backend(kind: str, fake_dir: Path | None = None) -> GpuBackend:
    """`nvml` for real GPUs, `fake` for a folder of fake GPUs."""
    if kind == "fake":
        from ha_ops.gpu.fake import FakeBackend

        if fake_dir is None:
            raise NoGpuError("the fake backend needs a folder of fake GPUs (fake_dir)")
        return FakeBackend(fake_dir)
    if kind == "nvml":
        from ha_ops.gpu.nvml import NvmlBackend

        return NvmlBackend()
    raise ValueError(f"unknown GPU backend {kind!r}; use 'nvml' or 'fake'")
