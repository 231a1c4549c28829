"""The NVML backend (nvidia-ml-py, module `pynvml`): in-process reads, no nvidia-smi.

Every reading is read on its own so that one unsupported or failing query costs only that reading. A GPU that
reports "GPU is lost" is marked lost. No NVML library on the machine means "no GPU here" (NoGpuError).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from ha_ops.gpu.backend import GpuBackendError, NoGpuError
from ha_ops.gpu.types import NOT_SUPPORTED, READING_FIELDS, GpuEvent, GpuSample, Unreadable

log = logging.getLogger(__name__)

FI_DEV_MEMORY_TEMP = 82
FI_DEV_GET_GPU_RECOVERY_ACTION = 230  # driver >= R570
NVLINK_MAX_LINKS = 18


def _load_pynvml() -> Any:
    try:
        import pynvml
    except ImportError as exc:  # the optional dependency is missing
        raise NoGpuError("nvidia-ml-py (module pynvml) is not installed") from exc
    return pynvml


class NvmlBackend:
    name = "nvml"

    def __init__(self, nvml: Any | None = None) -> None:
        self.nv = nvml if nvml is not None else _load_pynvml()
        try:
            self.nv.nvmlInit()
        except self.nv.NVMLError as exc:
            if getattr(exc, "value", None) in (
                self.nv.NVML_ERROR_LIBRARY_NOT_FOUND,
                self.nv.NVML_ERROR_DRIVER_NOT_LOADED,
            ):
                raise NoGpuError(f"no GPU here: {exc}") from exc
            raise GpuBackendError(f"NVML init failed: {exc}") from exc
        self._handles: dict[int, Any] = {}
        self._event_set: Any = None

    def _handle(self, index: int) -> Any:
        if index not in self._handles:
            if index < 0 or index >= self.device_count():
                raise IndexError(f"no GPU {index} (this node has {self.device_count()})")
            self._handles[index] = self.nv.nvmlDeviceGetHandleByIndex(index)
        return self._handles[index]

    def device_count(self) -> int:
        return int(self.nv.nvmlDeviceGetCount())

    def driver_version(self) -> str:
        version = self.nv.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)

    def _read(self, fn: Callable[[], Any], state: dict[str, bool]) -> Any:
        try:
            value = fn()
        except self.nv.NVMLError as exc:
            code = getattr(exc, "value", None)
            if code == self.nv.NVML_ERROR_NOT_SUPPORTED:
                return NOT_SUPPORTED
            if code == self.nv.NVML_ERROR_GPU_IS_LOST:
                state["lost"] = True
                return Unreadable("GPU is lost")
            return Unreadable(str(exc))
        return value.decode() if isinstance(value, bytes) else value

    def _field(self, handle: Any, field_id: int) -> Any:
        values = self.nv.nvmlDeviceGetFieldValues(handle, [field_id])
        entry = values[0]
        if entry.nvmlReturn == self.nv.NVML_ERROR_NOT_SUPPORTED:
            raise self.nv.NVMLError(self.nv.NVML_ERROR_NOT_SUPPORTED)
        if entry.nvmlReturn != self.nv.NVML_SUCCESS:
            raise self.nv.NVMLError(entry.nvmlReturn)
        return int(
            entry.value.ullVal if entry.valueType == self.nv.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG else entry.value.uiVal
        )

    def _nvlink_errors(self, handle: Any) -> dict[str, int] | object:
        nv = self.nv
        totals = {"replay": 0, "recovery": 0, "crc_flit": 0}
        counters = {
            "replay": nv.NVML_NVLINK_ERROR_DL_REPLAY,
            "recovery": nv.NVML_NVLINK_ERROR_DL_RECOVERY,
            "crc_flit": nv.NVML_NVLINK_ERROR_DL_CRC_FLIT,
        }
        active = 0
        for link in range(NVLINK_MAX_LINKS):
            try:
                if nv.nvmlDeviceGetNvLinkState(handle, link) != nv.NVML_FEATURE_ENABLED:
                    continue
            except nv.NVMLError:
                continue  # NotSupported or an invalid link index ends nothing: try the rest
            active += 1
            for name, counter in counters.items():
                totals[name] += int(nv.nvmlDeviceGetNvLinkErrorCounter(handle, link, counter))
        return totals if active else NOT_SUPPORTED

    def sample(self, index: int) -> GpuSample:
        nv = self.nv
        try:
            h = self._handle(index)
        except nv.NVMLError as exc:
            # A GPU that fell off the bus typically fails already here (nvmlDeviceGetHandleByIndex: GPU is lost).
            if getattr(exc, "value", None) == nv.NVML_ERROR_GPU_IS_LOST:
                lost = Unreadable("GPU is lost")
                return GpuSample(
                    index=index,
                    lost=True,
                    read_at=time.time(),
                    errors=("GPU is lost",),
                    **dict.fromkeys(READING_FIELDS, lost),
                )
            return GpuSample.unreadable(index, f"no NVML handle for GPU {index}: {exc}", time.time())
        state = {"lost": False}

        def r(fn: Callable[[], Any]) -> Any:
            return self._read(fn, state)

        ecc_mode = r(lambda: nv.nvmlDeviceGetEccMode(h))
        remap = r(lambda: nv.nvmlDeviceGetRemappedRows(h))
        util = r(lambda: nv.nvmlDeviceGetUtilizationRates(h))
        mem = r(lambda: nv.nvmlDeviceGetMemoryInfo(h))
        pci = r(lambda: nv.nvmlDeviceGetPciInfo(h))
        clock_fn = (
            getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or nv.nvmlDeviceGetCurrentClocksThrottleReasons
        )

        def part(value: Any, pick: Callable[[Any], Any]) -> Any:
            return pick(value) if not isinstance(value, Unreadable) and value is not NOT_SUPPORTED else value

        def ecc(kind: int, scope: int) -> Any:
            return r(lambda: int(nv.nvmlDeviceGetTotalEccErrors(h, kind, scope)))

        sample = GpuSample(
            index=index,
            uuid=r(lambda: nv.nvmlDeviceGetUUID(h)),
            serial=r(lambda: nv.nvmlDeviceGetSerial(h)),
            pci_bus_id=part(pci, lambda p: p.busId.decode() if isinstance(p.busId, bytes) else str(p.busId)),
            name=r(lambda: nv.nvmlDeviceGetName(h)),
            driver_version=r(self.driver_version),
            temperature_gpu_c=r(lambda: float(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))),
            temperature_memory_c=r(lambda: float(self._field(h, FI_DEV_MEMORY_TEMP))),
            temperature_slowdown_c=r(
                lambda: float(nv.nvmlDeviceGetTemperatureThreshold(h, nv.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN))
            ),
            temperature_shutdown_c=r(
                lambda: float(nv.nvmlDeviceGetTemperatureThreshold(h, nv.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN))
            ),
            power_draw_w=r(lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000.0),
            power_limit_w=r(lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0),
            ecc_mode_current=part(ecc_mode, lambda m: bool(m[0])),
            ecc_mode_pending=part(ecc_mode, lambda m: bool(m[1])),
            ecc_volatile_corrected=ecc(nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_VOLATILE_ECC),
            ecc_volatile_uncorrected=ecc(nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC),
            ecc_aggregate_corrected=ecc(nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_AGGREGATE_ECC),
            ecc_aggregate_uncorrected=ecc(nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_AGGREGATE_ECC),
            remapped_rows_correctable=part(remap, lambda x: int(x[0])),
            remapped_rows_uncorrectable=part(remap, lambda x: int(x[1])),
            remapped_rows_pending=part(remap, lambda x: bool(x[2])),
            remapped_rows_failure=part(remap, lambda x: bool(x[3])),
            clock_event_reasons=r(lambda: int(clock_fn(h))),
            pcie_gen_current=r(lambda: int(nv.nvmlDeviceGetCurrPcieLinkGeneration(h))),
            pcie_gen_max=r(lambda: int(nv.nvmlDeviceGetMaxPcieLinkGeneration(h))),
            pcie_width_current=r(lambda: int(nv.nvmlDeviceGetCurrPcieLinkWidth(h))),
            pcie_width_max=r(lambda: int(nv.nvmlDeviceGetMaxPcieLinkWidth(h))),
            pcie_replay_counter=r(lambda: int(nv.nvmlDeviceGetPcieReplayCounter(h))),
            nvlink_errors=r(lambda: self._nvlink_errors(h)),
            recovery_action=r(lambda: self._field(h, FI_DEV_GET_GPU_RECOVERY_ACTION)),
            utilization_gpu_pct=part(util, lambda u: float(u.gpu)),
            utilization_memory_pct=part(util, lambda u: float(u.memory)),
            memory_used_bytes=part(mem, lambda m: int(m.used)),
            memory_total_bytes=part(mem, lambda m: int(m.total)),
            read_at=time.time(),
        )
        errors = tuple(f"{name}: {getattr(sample, name).error}" for name in sample.unreadable_fields())
        from dataclasses import replace

        return replace(sample, lost=state["lost"], errors=errors)

    def _ensure_event_set(self) -> Any:
        if self._event_set is None:
            nv = self.nv
            self._event_set = nv.nvmlEventSetCreate()
            mask = (
                nv.nvmlEventTypeXidCriticalError | nv.nvmlEventTypeDoubleBitEccError | nv.nvmlEventTypeSingleBitEccError
            )
            for i in range(self.device_count()):
                try:
                    nv.nvmlDeviceRegisterEvents(self._handle(i), mask, self._event_set)
                except nv.NVMLError as exc:
                    log.warning("GPU %d: cannot register for events (%s); the periodic sweep still covers it", i, exc)
        return self._event_set

    def wait_events(self, timeout_s: float) -> list[GpuEvent]:
        nv = self.nv
        event_set = self._ensure_event_set()
        try:
            data = nv.nvmlEventSetWait_v2(event_set, int(timeout_s * 1000))
        except nv.NVMLError as exc:
            if getattr(exc, "value", None) == nv.NVML_ERROR_TIMEOUT:
                return []
            raise GpuBackendError(f"NVML event wait failed: {exc}") from exc
        index = self._index_of(data.device)
        if data.eventType == nv.nvmlEventTypeXidCriticalError:
            return [GpuEvent(index, "xid", xid=int(data.eventData), at=time.time())]
        kind = "ecc_double_bit" if data.eventType == nv.nvmlEventTypeDoubleBitEccError else "ecc_single_bit"
        return [GpuEvent(index, kind, at=time.time())]  # type: ignore[arg-type]

    def _index_of(self, handle: Any) -> int:
        try:
            return int(self.nv.nvmlDeviceGetIndex(handle))
        except self.nv.NVMLError:
            return -1

    def close(self) -> None:
        nv = self.nv
        try:
            if self._event_set is not None:
                nv.nvmlEventSetFree(self._event_set)
            nv.nvmlShutdown()
        except nv.NVMLError as exc:
            log.debug("NVML shutdown: %s", exc)
