"""A file-backed fake GPU backend for the lab and tests, with fault injection.

A node's fake GPUs live in one folder: `gpu<N>.json` holds GPU N's current readings (written atomically by
whoever injects a fault, e.g. the chaos layer, while the agent runs), and `events.jsonl` is an append-only
stream of XID / ECC events the agent tails. Special keys in a GPU file: `lost` (fallen off the bus: every
reading then fails), `fail_reads` (names of readings that fail to read, as NVML errors mid-run would) and `sticky`
(a hardware fault that a GPU reset or a reboot does not repair).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

from ha_ops.gpu.backend import GpuBackendError, NoGpuError
from ha_ops.gpu.types import NOT_SUPPORTED, READING_FIELDS, GpuEvent, GpuSample, Unreadable
from ha_ops.util.atomic import write_atomic

log = logging.getLogger(__name__)

EVENTS_FILE = "events.jsonl"
IDENTITY = ("uuid", "serial", "pci_bus_id", "name")
# The faults FakeGpus.inject injects, by name (the chaos action gpu_fault and `ha-ops gpu fake-fault` take these).
FAULTS = ("xid", "double_bit_ecc", "row_remap_failure", "overheat", "fallen_off_bus")


def healthy_state(node: str, index: int, model: str = "NVIDIA H100 80GB HBM3", driver: str = "550.90.07") -> dict:
    """Readings of an idle, healthy GPU (idle reason bit set and PCIe replay counter 1, as a real H200 shows)."""
    h = hashlib.sha256(f"{node}/{index}".encode()).hexdigest()
    return {
        "uuid": f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}",
        "serial": f"FAKE{index:03d}{node.upper()}",
        "pci_bus_id": f"00000000:{0x18 + 0x10 * index:02X}:00.0",
        "name": model,
        "driver_version": driver,
        "lost": False,
        "temperature_gpu_c": 34.0,
        "temperature_memory_c": 40.0,
        "temperature_slowdown_c": 89.0,
        "temperature_shutdown_c": 95.0,
        "power_draw_w": 72.0,
        "power_limit_w": 700.0,
        "ecc_mode_current": True,
        "ecc_mode_pending": True,
        "ecc_volatile_corrected": 0,
        "ecc_volatile_uncorrected": 0,
        "ecc_aggregate_corrected": 0,
        "ecc_aggregate_uncorrected": 0,
        "remapped_rows_correctable": 0,
        "remapped_rows_uncorrectable": 0,
        "remapped_rows_pending": False,
        "remapped_rows_failure": False,
        "clock_event_reasons": 0x1,
        "pcie_gen_current": 5,
        "pcie_gen_max": 5,
        "pcie_width_current": 16,
        "pcie_width_max": 16,
        "pcie_replay_counter": 1,
        "nvlink_errors": {"replay": 0, "recovery": 0, "crc_flit": 0},
        "recovery_action": 0,
        "utilization_gpu_pct": 0.0,
        "utilization_memory_pct": 0.0,
        "memory_used_bytes": 536870912,
        "memory_total_bytes": 85899345920,
        "fail_reads": [],
    }


class FakeGpus:
    """The writer side: create a node's fake GPUs and inject faults into them."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)

    @classmethod
    def create(
        cls, directory: Path, node: str, count: int, model: str = "NVIDIA H100 80GB HBM3", driver: str = "550.90.07"
    ) -> FakeGpus:
        fake = cls(directory)
        fake.directory.mkdir(parents=True, exist_ok=True)
        for i in range(count):
            fake._write(i, healthy_state(node, i, model, driver))
            write_atomic(fake._baseline(i), json.dumps(healthy_state(node, i, model, driver)))
        (fake.directory / EVENTS_FILE).touch()
        return fake

    def _path(self, index: int) -> Path:
        return self.directory / f"gpu{index}.json"

    def _baseline(self, index: int) -> Path:
        return self.directory / f".gpu{index}.healthy.json"

    def _write(self, index: int, state: dict) -> None:
        write_atomic(self._path(index), json.dumps(state, indent=1))

    def count(self) -> int:
        return len(list(self.directory.glob("gpu*.json")))

    def state(self, index: int) -> dict:
        path = self._path(index)
        if not path.exists():
            raise IndexError(f"no fake GPU {index} in {self.directory}")
        return json.loads(path.read_text())

    def update(self, index: int, **changes: Any) -> None:
        unknown = set(changes) - READING_FIELDS - {"lost", "fail_reads", "sticky"}
        if unknown:
            raise ValueError(f"unknown fake GPU readings: {', '.join(sorted(unknown))}")
        state = self.state(index)
        state.update(changes)
        self._write(index, state)

    def emit(self, event: GpuEvent) -> None:
        line = json.dumps(event.to_json()) + "\n"
        # One write() of a short line in append mode: readers never see half an event.
        fd = os.open(self.directory / EVENTS_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)

    # --- faults -------------------------------------------------------------------------------------------
    def inject_xid(self, index: int, xid: int, detail: str = "") -> None:
        self.state(index)  # raises IndexError for an unknown GPU
        self.emit(GpuEvent(index, "xid", xid=xid, at=time.time(), detail=detail))

    def double_bit_ecc(self, index: int) -> None:
        state = self.state(index)
        self.update(
            index,
            ecc_volatile_uncorrected=state["ecc_volatile_uncorrected"] + 1,
            ecc_aggregate_uncorrected=state["ecc_aggregate_uncorrected"] + 1,
        )
        self.emit(GpuEvent(index, "ecc_double_bit", xid=48, at=time.time()))

    def row_remap_failure(self, index: int) -> None:
        self.update(index, remapped_rows_failure=True)
        self.emit(GpuEvent(index, "xid", xid=64, at=time.time(), detail="row remapper: failed to remap row"))

    def overheat(self, index: int, celsius: float = 92.0) -> None:
        self.update(index, temperature_gpu_c=celsius, clock_event_reasons=0x40 | 0x20)

    def fall_off_bus(self, index: int) -> None:
        self.update(index, lost=True)
        self.emit(GpuEvent(index, "xid", xid=79, at=time.time(), detail="GPU has fallen off the bus"))

    def inject(self, fault: str, index: int, xid: int = 79, celsius: float = 92.0, permanent: bool = False) -> None:
        """One of FAULTS on a GPU; `permanent`: no reset or reboot repairs it (broken hardware)."""
        if fault not in FAULTS:
            raise ValueError(f"fault {fault!r} is not one of: {', '.join(FAULTS)}")
        if fault == "xid":
            self.inject_xid(index, xid)
        elif fault == "overheat":
            self.overheat(index, celsius)
        elif fault == "fallen_off_bus":
            self.fall_off_bus(index)
        else:
            getattr(self, fault)(index)
        if permanent:
            self.break_permanently(index)

    def break_permanently(self, index: int) -> None:
        """Mark the GPU's current fault as hardware that no reset or reboot repairs (only `clear` does)."""
        self.update(index, sticky=True)

    def reset(self, index: int | None = None) -> list[int]:
        """What a GPU reset or node reboot does: clears every fault except permanent ones. Returns GPUs reset."""
        done = []
        for i in range(self.count()) if index is None else [index]:
            if self.state(i).get("sticky"):
                continue
            self.clear(i)
            done.append(i)
        return done

    def load_driver(self, version: str, works: bool = True) -> None:
        """What loading a driver does to the node's GPUs: every GPU reports the new version from now on (resets
        included) and starts from its healthy readings; a driver that does not work loses every GPU (XID 79), the
        way a driver that cannot talk to the hardware looks through NVML."""
        for i in range(self.count()):
            baseline = json.loads(self._baseline(i).read_text()) | {"driver_version": version}
            write_atomic(self._baseline(i), json.dumps(baseline))
            self._write(i, baseline)
            # Loading a driver resets the GPU: the agent forgets the events the old driver reported.
            self.emit(GpuEvent(i, "reset", at=time.time(), detail=f"driver {version} loaded"))
        for i in range(self.count()) if not works else ():
            self.fall_off_bus(i)

    def clear(self, index: int | None = None) -> None:
        """A GPU reset: back to the healthy readings the GPU started with (all GPUs if index is None)."""
        for i in range(self.count()) if index is None else [index]:
            self._write(i, json.loads(self._baseline(i).read_text()))
            self.emit(GpuEvent(i, "reset", at=time.time(), detail="GPU reset"))


def _expected_types() -> dict[str, tuple[type, ...]]:
    kinds = {"float": (int, float), "int": (int,), "bool": (bool,), "str": (str,), "dict[str, int]": (dict,)}
    out = {}
    for f in fields(GpuSample):
        annotation = str(f.type)
        if annotation.startswith("Reading[") and f.name in READING_FIELDS:
            out[f.name] = kinds[annotation.removeprefix("Reading[").removesuffix("]")]
    return out


_TYPES = _expected_types()


def _well_typed(name: str, value: Any) -> bool:
    expected = _TYPES.get(name)
    if expected is None:
        return True
    if isinstance(value, bool) and bool not in expected:
        return False  # JSON true is not a number
    if not isinstance(value, expected):
        return False
    return not isinstance(value, dict) or all(isinstance(v, int) and not isinstance(v, bool) for v in value.values())


class FakeBackend:
    """The reader side, used by the agent: same readings and events as the NVML backend."""

    name = "fake"

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        if not self.directory.is_dir() or not any(self.directory.glob("gpu*.json")):
            raise NoGpuError(f"no fake GPUs in {self.directory}")
        events = self.directory / EVENTS_FILE
        # Events before the agent started are history; NVML event sets also deliver only what comes after.
        self._offset = events.stat().st_size if events.exists() else 0
        self._partial = b""

    def device_count(self) -> int:
        return len(list(self.directory.glob("gpu*.json")))

    def driver_version(self) -> str:
        try:
            return str(json.loads((self.directory / "gpu0.json").read_text())["driver_version"])
        except (OSError, ValueError, KeyError) as exc:
            raise GpuBackendError(f"cannot read the driver version from {self.directory}: {exc}") from exc

    def sample(self, index: int) -> GpuSample:
        path = self.directory / f"gpu{index}.json"
        now = time.time()
        if index < 0 or not path.exists():
            raise IndexError(f"no GPU {index} (this node has {self.device_count()})")
        try:
            state = json.loads(path.read_text())
            if not isinstance(state, dict):
                raise ValueError("not a JSON object")
        except (OSError, ValueError) as exc:
            return GpuSample.unreadable(index, f"fake GPU state {path.name} unreadable: {exc}", now)
        values: dict[str, Any] = {}
        failing = set(state.get("fail_reads") or [])
        lost = bool(state.get("lost"))
        for name in READING_FIELDS:
            raw = state.get(name, "not_supported")
            if lost and name not in IDENTITY:
                values[name] = Unreadable("GPU is lost")
            elif name in failing:
                values[name] = Unreadable(f"NVML error reading {name} (injected)")
            elif raw == "not_supported":
                values[name] = NOT_SUPPORTED
            elif not _well_typed(name, raw):
                values[name] = Unreadable(f"{name}: {raw!r} has the wrong type")
            else:
                values[name] = raw
        errors = tuple(f"{k}: {v.error}" for k, v in values.items() if isinstance(v, Unreadable))
        return GpuSample(index=index, lost=lost, read_at=now, errors=errors, **values)

    def wait_events(self, timeout_s: float) -> list[GpuEvent]:
        deadline = time.monotonic() + timeout_s
        while True:
            events = self._read_new_events()
            if events or time.monotonic() >= deadline:
                return events
            time.sleep(min(0.02, max(0.0, deadline - time.monotonic())))

    def _read_new_events(self) -> list[GpuEvent]:
        path = self.directory / EVENTS_FILE
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            return []
        if size < self._offset:  # truncated: start over
            self._offset, self._partial = 0, b""
        if size == self._offset:
            return []
        with open(path, "rb") as handle:
            handle.seek(self._offset)
            data = self._partial + handle.read(size - self._offset)
        self._offset = size
        lines = data.split(b"\n")
        self._partial = lines.pop()
        events = []
        for line in lines:
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
                events.append(
                    GpuEvent(
                        int(raw["gpu"]),
                        raw["kind"],
                        raw.get("xid"),
                        float(raw.get("at", 0.0)),
                        str(raw.get("detail", "")),
                    )
                )
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("skipping a malformed fake GPU event %r: %s", line[:200], exc)
        return events

    def close(self) -> None:
        return None
