"""What a GPU backend reports. Each reading is a value, NOT_SUPPORTED (the device or driver cannot give it) or an
Unreadable carrying the error: "not supported" is never "healthy", and "could not read" is never "failed"."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal, TypeVar


class _NotSupported:
    _instance: _NotSupported | None = None

    def __new__(cls) -> _NotSupported:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NOT_SUPPORTED"

    def __bool__(self) -> bool:
        return False


NOT_SUPPORTED = _NotSupported()


@dataclass(frozen=True)
class Unreadable:
    error: str

    def __bool__(self) -> bool:
        return False


T = TypeVar("T")
Reading = T | _NotSupported | Unreadable


def known(value: object) -> bool:
    """True when a reading holds a real value (neither not-supported nor unreadable)."""
    return not isinstance(value, _NotSupported | Unreadable)


@dataclass(frozen=True)
class GpuSample:
    """One read of one GPU. `lost` means the GPU no longer answers (fallen off the bus)."""

    index: int
    uuid: Reading[str] = NOT_SUPPORTED
    serial: Reading[str] = NOT_SUPPORTED
    pci_bus_id: Reading[str] = NOT_SUPPORTED
    name: Reading[str] = NOT_SUPPORTED
    driver_version: Reading[str] = NOT_SUPPORTED
    lost: bool = False
    temperature_gpu_c: Reading[float] = NOT_SUPPORTED
    temperature_memory_c: Reading[float] = NOT_SUPPORTED
    temperature_slowdown_c: Reading[float] = NOT_SUPPORTED
    temperature_shutdown_c: Reading[float] = NOT_SUPPORTED
    power_draw_w: Reading[float] = NOT_SUPPORTED
    power_limit_w: Reading[float] = NOT_SUPPORTED
    ecc_mode_current: Reading[bool] = NOT_SUPPORTED
    ecc_mode_pending: Reading[bool] = NOT_SUPPORTED
    ecc_volatile_corrected: Reading[int] = NOT_SUPPORTED
    ecc_volatile_uncorrected: Reading[int] = NOT_SUPPORTED
    ecc_aggregate_corrected: Reading[int] = NOT_SUPPORTED
    ecc_aggregate_uncorrected: Reading[int] = NOT_SUPPORTED
    remapped_rows_correctable: Reading[int] = NOT_SUPPORTED
    remapped_rows_uncorrectable: Reading[int] = NOT_SUPPORTED
    remapped_rows_pending: Reading[bool] = NOT_SUPPORTED
    remapped_rows_failure: Reading[bool] = NOT_SUPPORTED
    clock_event_reasons: Reading[int] = NOT_SUPPORTED
    pcie_gen_current: Reading[int] = NOT_SUPPORTED
    pcie_gen_max: Reading[int] = NOT_SUPPORTED
    pcie_width_current: Reading[int] = NOT_SUPPORTED
    pcie_width_max: Reading[int] = NOT_SUPPORTED
    pcie_replay_counter: Reading[int] = NOT_SUPPORTED
    nvlink_errors: Reading[dict[str, int]] = NOT_SUPPORTED
    recovery_action: Reading[int] = NOT_SUPPORTED
    utilization_gpu_pct: Reading[float] = NOT_SUPPORTED
    utilization_memory_pct: Reading[float] = NOT_SUPPORTED
    memory_used_bytes: Reading[int] = NOT_SUPPORTED
    memory_total_bytes: Reading[int] = NOT_SUPPORTED
    read_at: float = 0.0
    errors: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            out[f.name] = encode_value(getattr(self, f.name))
        return out

    @classmethod
    def unreadable(cls, index: int, error: str, read_at: float = 0.0) -> GpuSample:
        """A sample in which nothing could be read (a corrupt source, a failed backend call)."""
        bad = Unreadable(error)
        return cls(index=index, read_at=read_at, errors=(error,), **dict.fromkeys(READING_FIELDS, bad))

    def unreadable_fields(self) -> list[str]:
        return [f.name for f in fields(self) if isinstance(getattr(self, f.name), Unreadable)]


# Every reading of a sample (what a backend fills in), as opposed to bookkeeping fields.
READING_FIELDS = frozenset(f.name for f in fields(GpuSample)) - {"index", "lost", "read_at", "errors"}


def encode_value(value: object) -> Any:
    if value is NOT_SUPPORTED:
        return "not_supported"
    if isinstance(value, Unreadable):
        return {"unreadable": value.error}
    if isinstance(value, tuple):
        return list(value)
    return value


# "reset" marks a GPU reset (by ha-ops or, in the lab, by the fault injector): latched XIDs of that GPU end.
EventKind = Literal["xid", "ecc_single_bit", "ecc_double_bit", "reset"]


@dataclass(frozen=True)
class GpuEvent:
    """An asynchronous event (what NVML event sets deliver)."""

    gpu: int
    kind: EventKind
    xid: int | None = None
    at: float = 0.0
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# Clock-event (throttle) reason bits, as NVML defines them.
CLOCK_EVENT_GPU_IDLE = 0x1
CLOCK_EVENT_APP_CLOCKS = 0x2
CLOCK_EVENT_SW_POWER_CAP = 0x4
CLOCK_EVENT_HW_SLOWDOWN = 0x8
CLOCK_EVENT_SYNC_BOOST = 0x10
CLOCK_EVENT_SW_THERMAL = 0x20
CLOCK_EVENT_HW_THERMAL = 0x40
CLOCK_EVENT_HW_POWER_BRAKE = 0x80
CLOCK_EVENT_DISPLAY_CLOCKS = 0x100

# NVML_FI_DEV_GET_GPU_RECOVERY_ACTION values (driver >= R570).
RECOVERY_NONE = 0
RECOVERY_GPU_RESET = 1
RECOVERY_NODE_REBOOT = 2
RECOVERY_DRAIN_P2P = 3
RECOVERY_DRAIN_AND_RESET = 4
# Newer drivers (nvidia-ml-py 13 names them).
RECOVERY_IMEX_DOMAIN = 5
RECOVERY_BUS_RESET = 6
RECOVERY_SYSTEM_REBOOT = 7
