"""The NVML backend against an injected pynvml-like module (no GPU needed), and the real pynvml without a GPU.

The fake module takes its constants and NVMLError from the installed nvidia-ml-py, so a constant name or an
exception shape the backend gets wrong against the real library fails here too.
"""

from __future__ import annotations

import ctypes.util
import logging
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from ha_ops.gpu import open_backend
from ha_ops.gpu.backend import GpuBackendError, NoGpuError
from ha_ops.gpu.nvml import FI_DEV_GET_GPU_RECOVERY_ACTION, FI_DEV_MEMORY_TEMP, NvmlBackend
from ha_ops.gpu.types import NOT_SUPPORTED, READING_FIELDS, GpuEvent, Unreadable, known

nv = pynvml

_CONSTANTS = [
    "NVML_SUCCESS",
    "NVML_ERROR_UNINITIALIZED",
    "NVML_ERROR_NOT_SUPPORTED",
    "NVML_ERROR_NO_PERMISSION",
    "NVML_ERROR_DRIVER_NOT_LOADED",
    "NVML_ERROR_TIMEOUT",
    "NVML_ERROR_LIBRARY_NOT_FOUND",
    "NVML_ERROR_GPU_IS_LOST",
    "NVML_ERROR_UNKNOWN",
    "NVML_FEATURE_ENABLED",
    "NVML_FEATURE_DISABLED",
    "NVML_NVLINK_ERROR_DL_REPLAY",
    "NVML_NVLINK_ERROR_DL_RECOVERY",
    "NVML_NVLINK_ERROR_DL_CRC_FLIT",
    "NVML_VALUE_TYPE_UNSIGNED_INT",
    "NVML_VALUE_TYPE_UNSIGNED_LONG_LONG",
    "NVML_TEMPERATURE_GPU",
    "NVML_TEMPERATURE_THRESHOLD_SLOWDOWN",
    "NVML_TEMPERATURE_THRESHOLD_SHUTDOWN",
    "NVML_MEMORY_ERROR_TYPE_CORRECTED",
    "NVML_MEMORY_ERROR_TYPE_UNCORRECTED",
    "NVML_VOLATILE_ECC",
    "NVML_AGGREGATE_ECC",
    "nvmlEventTypeXidCriticalError",
    "nvmlEventTypeDoubleBitEccError",
    "nvmlEventTypeSingleBitEccError",
]


@dataclass(frozen=True)
class Handle:
    index: int


@dataclass
class Gpu:
    uuid: str = "GPU-11111111-2222-3333-4444-555555555555"
    temperature: int = 41
    slowdown: int = 87
    shutdown: int = 92
    power_mw: int = 312_500
    limit_mw: int = 700_000
    ecc_mode: tuple[int, int] = (1, 1)
    ecc: dict[tuple[int, int], int] = field(default_factory=dict)  # (kind, scope) -> count
    remap: tuple[int, int, int, int] = (2, 1, 1, 0)
    clocks: int = 0x1
    pcie: tuple[int, int, int, int] = (4, 5, 8, 16)  # gen current/max, width current/max
    replays: int = 7
    links: dict[int, int] = field(default_factory=lambda: {0: 1, 1: 1, 2: 0})  # link -> NVML_FEATURE_*
    link_errors: dict[tuple[int, int], int] = field(default_factory=dict)  # (link, counter) -> count
    # field id -> (nvmlReturn, valueType, value)
    fields: dict[int, tuple[int, int, int]] = field(default_factory=dict)


class FakeNvml:
    """Just enough of pynvml for NvmlBackend. `fail[function name] = NVML error code` makes that call raise."""

    NVMLError = pynvml.NVMLError

    def __init__(self, gpus: list[Gpu] | None = None, init_error: int | None = None) -> None:
        for name in _CONSTANTS:
            setattr(self, name, getattr(pynvml, name))
        self.gpus = gpus if gpus is not None else [Gpu(), Gpu(uuid="GPU-99999999-8888-7777-6666-555555555555")]
        self.init_error = init_error
        self.fail: dict[str, int] = {}
        self.fail_gpu: dict[tuple[str, int], int] = {}
        self.events: list[Any] = []  # event data objects, or an int: raise that NVML error code
        self.registered: list[tuple[int, int]] = []
        self.freed = False
        self.shutdown = False
        self.waits: list[int] = []

    def _check(self, name: str, handle: Handle | None = None) -> None:
        code = self.fail.get(name)
        if code is None and handle is not None:
            code = self.fail_gpu.get((name, handle.index))
        if code is not None:
            raise pynvml.NVMLError(code)

    def _gpu(self, name: str, handle: Handle) -> Gpu:
        self._check(name, handle)
        return self.gpus[handle.index]

    # --- library ---
    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.shutdown = True

    def nvmlSystemGetDriverVersion(self) -> bytes:
        self._check("nvmlSystemGetDriverVersion")
        return b"570.124.06"

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Handle:
        self._check("nvmlDeviceGetHandleByIndex", Handle(index))
        return Handle(index)

    def nvmlDeviceGetIndex(self, handle: Handle) -> int:
        self._check("nvmlDeviceGetIndex", handle)
        return handle.index

    # --- identity ---
    def nvmlDeviceGetUUID(self, h: Handle) -> bytes:
        return self._gpu("nvmlDeviceGetUUID", h).uuid.encode()  # older pynvml returns bytes

    def nvmlDeviceGetSerial(self, h: Handle) -> str:
        self._gpu("nvmlDeviceGetSerial", h)
        return f"165432100{h.index}"

    def nvmlDeviceGetPciInfo(self, h: Handle) -> Any:
        self._gpu("nvmlDeviceGetPciInfo", h)
        return SimpleNamespace(busId=f"00000000:{0x18 + h.index:02X}:00.0".encode())

    def nvmlDeviceGetName(self, h: Handle) -> str:
        self._gpu("nvmlDeviceGetName", h)
        return "NVIDIA H200"

    # --- readings ---
    def nvmlDeviceGetTemperature(self, h: Handle, sensor: int) -> int:
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return self._gpu("nvmlDeviceGetTemperature", h).temperature

    def nvmlDeviceGetTemperatureThreshold(self, h: Handle, kind: int) -> int:
        gpu = self._gpu("nvmlDeviceGetTemperatureThreshold", h)
        return {pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: gpu.slowdown}.get(kind, gpu.shutdown)

    def nvmlDeviceGetPowerUsage(self, h: Handle) -> int:
        return self._gpu("nvmlDeviceGetPowerUsage", h).power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, h: Handle) -> int:
        return self._gpu("nvmlDeviceGetEnforcedPowerLimit", h).limit_mw

    def nvmlDeviceGetEccMode(self, h: Handle) -> list[int]:
        return list(self._gpu("nvmlDeviceGetEccMode", h).ecc_mode)

    def nvmlDeviceGetTotalEccErrors(self, h: Handle, kind: int, scope: int) -> int:
        return self._gpu("nvmlDeviceGetTotalEccErrors", h).ecc.get((kind, scope), 0)

    def nvmlDeviceGetRemappedRows(self, h: Handle) -> tuple[int, int, int, int]:
        return self._gpu("nvmlDeviceGetRemappedRows", h).remap

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: Handle) -> int:
        return self._gpu("nvmlDeviceGetCurrentClocksEventReasons", h).clocks

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: Handle) -> int:
        return self._gpu("nvmlDeviceGetCurrPcieLinkGeneration", h).pcie[0]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: Handle) -> int:
        return self._gpu("nvmlDeviceGetMaxPcieLinkGeneration", h).pcie[1]

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: Handle) -> int:
        return self._gpu("nvmlDeviceGetCurrPcieLinkWidth", h).pcie[2]

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: Handle) -> int:
        return self._gpu("nvmlDeviceGetMaxPcieLinkWidth", h).pcie[3]

    def nvmlDeviceGetPcieReplayCounter(self, h: Handle) -> int:
        return self._gpu("nvmlDeviceGetPcieReplayCounter", h).replays

    def nvmlDeviceGetNvLinkState(self, h: Handle, link: int) -> int:
        gpu = self._gpu("nvmlDeviceGetNvLinkState", h)
        if link not in gpu.links:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu.links[link]

    def nvmlDeviceGetNvLinkErrorCounter(self, h: Handle, link: int, counter: int) -> int:
        gpu = self._gpu("nvmlDeviceGetNvLinkErrorCounter", h)
        assert gpu.links.get(link) == pynvml.NVML_FEATURE_ENABLED, "read a counter of a link that is not up"
        return gpu.link_errors.get((link, counter), 0)

    def nvmlDeviceGetFieldValues(self, h: Handle, ids: list[int]) -> list[Any]:
        gpu = self._gpu("nvmlDeviceGetFieldValues", h)
        out = []
        for fid in ids:
            ret, vtype, value = gpu.fields.get(fid, (pynvml.NVML_ERROR_NOT_SUPPORTED, 0, 0))
            out.append(
                SimpleNamespace(
                    fieldId=fid,
                    nvmlReturn=ret,
                    valueType=vtype,
                    value=SimpleNamespace(uiVal=value & 0xFFFFFFFF, ullVal=value),
                )
            )
        return out

    def nvmlDeviceGetUtilizationRates(self, h: Handle) -> Any:
        self._gpu("nvmlDeviceGetUtilizationRates", h)
        return SimpleNamespace(gpu=87, memory=41)

    def nvmlDeviceGetMemoryInfo(self, h: Handle) -> Any:
        self._gpu("nvmlDeviceGetMemoryInfo", h)
        return SimpleNamespace(used=2**30, total=141 * 2**30, free=140 * 2**30)

    # --- events ---
    def nvmlEventSetCreate(self) -> str:
        return "event-set"

    def nvmlDeviceRegisterEvents(self, h: Handle, mask: int, event_set: str) -> None:
        self._check("nvmlDeviceRegisterEvents", h)
        assert event_set == "event-set"
        self.registered.append((h.index, mask))

    def nvmlEventSetWait_v2(self, event_set: str, timeout_ms: int) -> Any:
        assert event_set == "event-set"
        self.waits.append(timeout_ms)
        if not self.events:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)
        item = self.events.pop(0)
        if isinstance(item, int):
            raise pynvml.NVMLError(item)
        return item

    def nvmlEventSetFree(self, event_set: str) -> None:
        self.freed = True


UINT = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
ULL = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG


@pytest.fixture
def fake() -> FakeNvml:
    gpu = Gpu(
        ecc={
            (nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_VOLATILE_ECC): 3,
            (nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC): 0,
            (nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_AGGREGATE_ECC): 120,
            (nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_AGGREGATE_ECC): 2,
        },
        link_errors={
            (0, nv.NVML_NVLINK_ERROR_DL_REPLAY): 5,
            (1, nv.NVML_NVLINK_ERROR_DL_REPLAY): 2,
            (1, nv.NVML_NVLINK_ERROR_DL_RECOVERY): 1,
            (0, nv.NVML_NVLINK_ERROR_DL_CRC_FLIT): 4,
            (2, nv.NVML_NVLINK_ERROR_DL_REPLAY): 1000,  # link 2 is down: never read
        },
        fields={
            FI_DEV_MEMORY_TEMP: (nv.NVML_SUCCESS, UINT, 52),
            FI_DEV_GET_GPU_RECOVERY_ACTION: (nv.NVML_SUCCESS, UINT, 0),
        },
    )
    return FakeNvml([gpu, Gpu(uuid="GPU-99999999-8888-7777-6666-555555555555")])


# --- init -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("code", [nv.NVML_ERROR_LIBRARY_NOT_FOUND, nv.NVML_ERROR_DRIVER_NOT_LOADED])
def test_no_library_or_driver_at_init_is_no_gpu_error(code: int) -> None:
    with pytest.raises(NoGpuError) as info:
        NvmlBackend(FakeNvml(init_error=code))
    assert info.value.exit_code == 3


def test_other_init_failures_are_a_backend_error() -> None:
    with pytest.raises(GpuBackendError) as info:
        NvmlBackend(FakeNvml(init_error=nv.NVML_ERROR_NO_PERMISSION))
    assert not isinstance(info.value, NoGpuError)


def test_counts_and_driver(fake: FakeNvml) -> None:
    backend = NvmlBackend(fake)
    assert backend.name == "nvml"
    assert backend.device_count() == 2
    assert backend.driver_version() == "570.124.06"


# --- sample -----------------------------------------------------------------------------------------------------
def test_sample_reads_and_converts_every_reading(fake: FakeNvml) -> None:
    s = NvmlBackend(fake).sample(0)
    assert s.index == 0
    assert not s.lost
    assert s.errors == ()
    assert s.unreadable_fields() == []
    assert s.uuid == "GPU-11111111-2222-3333-4444-555555555555"  # bytes decoded
    assert s.serial == "1654321000"
    assert s.pci_bus_id == "00000000:18:00.0"
    assert s.name == "NVIDIA H200"
    assert s.driver_version == "570.124.06"
    assert s.temperature_gpu_c == 41.0
    assert s.temperature_memory_c == 52.0
    assert s.temperature_slowdown_c == 87.0
    assert s.temperature_shutdown_c == 92.0
    assert s.power_draw_w == pytest.approx(312.5)  # mW -> W
    assert s.power_limit_w == pytest.approx(700.0)
    assert (s.ecc_mode_current, s.ecc_mode_pending) == (True, True)
    assert (s.ecc_volatile_corrected, s.ecc_volatile_uncorrected) == (3, 0)
    assert (s.ecc_aggregate_corrected, s.ecc_aggregate_uncorrected) == (120, 2)
    assert s.remapped_rows_correctable == 2
    assert s.remapped_rows_uncorrectable == 1
    assert s.remapped_rows_pending is True
    assert s.remapped_rows_failure is False
    assert s.clock_event_reasons == 0x1
    assert (s.pcie_gen_current, s.pcie_gen_max, s.pcie_width_current, s.pcie_width_max) == (4, 5, 8, 16)
    assert s.pcie_replay_counter == 7
    # Links 0 and 1 are up, link 2 is down and links 3.. are not supported: only 0 and 1 count.
    assert s.nvlink_errors == {"replay": 7, "recovery": 1, "crc_flit": 4}
    assert s.recovery_action == 0
    assert s.utilization_gpu_pct == 87.0
    assert s.utilization_memory_pct == 41.0
    assert s.memory_used_bytes == 2**30
    assert s.memory_total_bytes == 141 * 2**30
    assert s.read_at > 0
    # Every reading is a real value.
    assert all(known(getattr(s, name)) for name in READING_FIELDS)


def test_remapped_rows_tuple_mapping(fake: FakeNvml) -> None:
    fake.gpus[0].remap = (0, 5, 0, 1)
    s = NvmlBackend(fake).sample(0)
    assert (s.remapped_rows_correctable, s.remapped_rows_uncorrectable) == (0, 5)
    assert (s.remapped_rows_pending, s.remapped_rows_failure) == (False, True)


def test_ecc_mode_pending_differs_from_current(fake: FakeNvml) -> None:
    fake.gpus[0].ecc_mode = (0, 1)
    s = NvmlBackend(fake).sample(0)
    assert (s.ecc_mode_current, s.ecc_mode_pending) == (False, True)


@pytest.mark.parametrize(("value", "vtype"), [(2, UINT), (4, ULL)])
def test_recovery_action_comes_from_the_field_value(fake: FakeNvml, value: int, vtype: int) -> None:
    fake.gpus[0].fields[FI_DEV_GET_GPU_RECOVERY_ACTION] = (nv.NVML_SUCCESS, vtype, value)
    assert NvmlBackend(fake).sample(0).recovery_action == value


def test_a_field_value_not_supported_is_not_supported(fake: FakeNvml) -> None:
    del fake.gpus[0].fields[FI_DEV_GET_GPU_RECOVERY_ACTION]  # an older driver
    fake.gpus[0].fields[FI_DEV_MEMORY_TEMP] = (nv.NVML_ERROR_UNKNOWN, UINT, 0)
    s = NvmlBackend(fake).sample(0)
    assert s.recovery_action is NOT_SUPPORTED
    assert isinstance(s.temperature_memory_c, Unreadable)
    assert s.unreadable_fields() == ["temperature_memory_c"]


def test_not_supported_query_costs_only_that_reading(fake: FakeNvml) -> None:
    fake.fail["nvmlDeviceGetPcieReplayCounter"] = nv.NVML_ERROR_NOT_SUPPORTED
    s = NvmlBackend(fake).sample(0)
    assert s.pcie_replay_counter is NOT_SUPPORTED
    assert s.errors == ()  # not supported is not an error
    assert s.pcie_width_current == 8
    assert s.temperature_gpu_c == 41.0
    assert not s.lost


def test_not_supported_shared_query_marks_its_parts(fake: FakeNvml) -> None:
    fake.fail["nvmlDeviceGetRemappedRows"] = nv.NVML_ERROR_NOT_SUPPORTED  # pre-Ampere
    fake.fail["nvmlDeviceGetEccMode"] = nv.NVML_ERROR_NOT_SUPPORTED
    s = NvmlBackend(fake).sample(0)
    for name in ("remapped_rows_correctable", "remapped_rows_uncorrectable", "remapped_rows_pending"):
        assert getattr(s, name) is NOT_SUPPORTED
    assert s.remapped_rows_failure is NOT_SUPPORTED
    assert s.ecc_mode_current is NOT_SUPPORTED
    assert s.ecc_mode_pending is NOT_SUPPORTED
    assert s.errors == ()


def test_gpu_is_lost_marks_the_sample_lost(fake: FakeNvml) -> None:
    fake.fail_gpu[("nvmlDeviceGetTemperature", 0)] = nv.NVML_ERROR_GPU_IS_LOST
    backend = NvmlBackend(fake)
    s = backend.sample(0)
    assert s.lost
    assert isinstance(s.temperature_gpu_c, Unreadable)
    assert "lost" in s.temperature_gpu_c.error.lower()
    assert not backend.sample(1).lost


def test_gpu_lost_before_a_handle_is_a_lost_sample_not_an_exception(fake: FakeNvml) -> None:
    """A GPU already off the bus fails nvmlDeviceGetHandleByIndex itself (a fresh agent or `health check`)."""
    fake.fail_gpu[("nvmlDeviceGetHandleByIndex", 1)] = nv.NVML_ERROR_GPU_IS_LOST
    backend = NvmlBackend(fake)
    s = backend.sample(1)
    assert s.index == 1
    assert s.lost
    assert set(s.unreadable_fields()) == READING_FIELDS
    assert not backend.sample(0).lost


def test_other_handle_errors_are_an_unreadable_sample(fake: FakeNvml) -> None:
    fake.fail_gpu[("nvmlDeviceGetHandleByIndex", 1)] = nv.NVML_ERROR_UNKNOWN
    s = NvmlBackend(fake).sample(1)
    assert not s.lost
    assert set(s.unreadable_fields()) == READING_FIELDS
    assert s.errors and "GPU 1" in s.errors[0]


def test_other_nvml_errors_are_unreadable_for_that_reading_only(fake: FakeNvml) -> None:
    fake.fail["nvmlDeviceGetTotalEccErrors"] = nv.NVML_ERROR_UNKNOWN
    fake.fail["nvmlDeviceGetPowerUsage"] = nv.NVML_ERROR_NO_PERMISSION
    s = NvmlBackend(fake).sample(0)
    assert not s.lost
    assert sorted(s.unreadable_fields()) == [
        "ecc_aggregate_corrected",
        "ecc_aggregate_uncorrected",
        "ecc_volatile_corrected",
        "ecc_volatile_uncorrected",
        "power_draw_w",
    ]
    assert any(e.startswith("power_draw_w:") for e in s.errors)
    assert len(s.errors) == 5
    assert s.power_limit_w == pytest.approx(700.0)
    assert s.temperature_gpu_c == 41.0


def test_shared_query_failure_makes_each_part_unreadable(fake: FakeNvml) -> None:
    fake.fail["nvmlDeviceGetMemoryInfo"] = nv.NVML_ERROR_UNKNOWN
    s = NvmlBackend(fake).sample(0)
    assert isinstance(s.memory_used_bytes, Unreadable)
    assert isinstance(s.memory_total_bytes, Unreadable)
    assert s.utilization_gpu_pct == 87.0


def test_nvlink_without_enabled_links_is_not_supported(fake: FakeNvml) -> None:
    fake.gpus[0].links = {0: nv.NVML_FEATURE_DISABLED, 1: nv.NVML_FEATURE_DISABLED}
    assert NvmlBackend(fake).sample(0).nvlink_errors is NOT_SUPPORTED
    fake.gpus[1].links = {}  # a PCIe card: every link query is not supported
    assert NvmlBackend(fake).sample(1).nvlink_errors is NOT_SUPPORTED


def test_nvlink_counter_failure_is_unreadable(fake: FakeNvml) -> None:
    fake.fail["nvmlDeviceGetNvLinkErrorCounter"] = nv.NVML_ERROR_UNKNOWN
    assert isinstance(NvmlBackend(fake).sample(0).nvlink_errors, Unreadable)


def test_clock_reasons_fall_back_to_the_throttle_name() -> None:
    class OldNvml(FakeNvml):
        nvmlDeviceGetCurrentClocksEventReasons = None  # older nvidia-ml-py: only the throttle name

        def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: Handle) -> int:
            return 0x48

    assert NvmlBackend(OldNvml()).sample(0).clock_event_reasons == 0x48


def test_sample_of_an_unknown_gpu_raises_index_error(fake: FakeNvml) -> None:
    backend = NvmlBackend(fake)
    with pytest.raises(IndexError):
        backend.sample(2)
    with pytest.raises(IndexError):
        backend.sample(-1)


# --- events -----------------------------------------------------------------------------------------------------
def test_wait_events_timeout_is_empty(fake: FakeNvml) -> None:
    backend = NvmlBackend(fake)
    assert backend.wait_events(0.25) == []
    assert fake.waits == [250]
    mask = nv.nvmlEventTypeXidCriticalError | nv.nvmlEventTypeDoubleBitEccError | nv.nvmlEventTypeSingleBitEccError
    assert fake.registered == [(0, mask), (1, mask)]
    backend.wait_events(0)
    assert len(fake.registered) == 2  # the event set is created once


def test_wait_events_xid(fake: FakeNvml) -> None:
    fake.events.append(SimpleNamespace(device=Handle(1), eventType=nv.nvmlEventTypeXidCriticalError, eventData=79))
    events = NvmlBackend(fake).wait_events(1.0)
    assert len(events) == 1
    event = events[0]
    assert isinstance(event, GpuEvent)
    assert (event.gpu, event.kind, event.xid) == (1, "xid", 79)
    assert event.at > 0


@pytest.mark.parametrize(
    ("event_type", "kind"),
    [(nv.nvmlEventTypeDoubleBitEccError, "ecc_double_bit"), (nv.nvmlEventTypeSingleBitEccError, "ecc_single_bit")],
)
def test_wait_events_ecc(fake: FakeNvml, event_type: int, kind: str) -> None:
    fake.events.append(SimpleNamespace(device=Handle(0), eventType=event_type, eventData=0))
    [event] = NvmlBackend(fake).wait_events(1.0)
    assert (event.gpu, event.kind, event.xid) == (0, kind, None)


def test_wait_events_for_an_unknown_device_has_index_minus_one(fake: FakeNvml) -> None:
    fake.fail["nvmlDeviceGetIndex"] = nv.NVML_ERROR_UNKNOWN
    fake.events.append(SimpleNamespace(device=Handle(0), eventType=nv.nvmlEventTypeXidCriticalError, eventData=13))
    [event] = NvmlBackend(fake).wait_events(1.0)
    assert event.gpu == -1  # the agent ignores events for GPUs it does not have


def test_wait_events_other_errors_are_a_backend_error(fake: FakeNvml) -> None:
    fake.events.append(nv.NVML_ERROR_UNKNOWN)
    with pytest.raises(GpuBackendError):
        NvmlBackend(fake).wait_events(1.0)


def test_registration_failure_on_one_gpu_is_a_warning(fake: FakeNvml, caplog: pytest.LogCaptureFixture) -> None:
    fake.fail_gpu[("nvmlDeviceRegisterEvents", 0)] = nv.NVML_ERROR_NOT_SUPPORTED
    with caplog.at_level(logging.WARNING, logger="ha_ops.gpu.nvml"):
        assert NvmlBackend(fake).wait_events(0) == []
    assert [i for i, _ in fake.registered] == [1]
    assert any("GPU 0" in r.getMessage() for r in caplog.records)


def test_close_frees_the_event_set_and_shuts_down(fake: FakeNvml) -> None:
    backend = NvmlBackend(fake)
    backend.wait_events(0)
    backend.close()
    assert fake.freed and fake.shutdown


def test_close_without_events(fake: FakeNvml) -> None:
    backend = NvmlBackend(fake)
    backend.close()
    assert fake.shutdown and not fake.freed


# --- the real pynvml on this machine ----------------------------------------------------------------------------
def _has_nvml() -> bool:
    return ctypes.util.find_library("nvidia-ml") is not None


@pytest.mark.skipif(_has_nvml(), reason="libnvidia-ml is installed here: this test is for machines without a GPU")
def test_real_pynvml_without_a_gpu_is_no_gpu_error() -> None:
    with pytest.raises(NoGpuError):
        NvmlBackend()
    with pytest.raises(NoGpuError):
        open_backend("nvml")
