"""The file-backed fake GPUs: the writer (FakeGpus, fault injection) and the reader (FakeBackend, the agent's side)."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from ha_ops.gpu import open_backend
from ha_ops.gpu.backend import NoGpuError
from ha_ops.gpu.fake import EVENTS_FILE, FakeBackend, FakeGpus, healthy_state
from ha_ops.gpu.types import NOT_SUPPORTED, READING_FIELDS, GpuEvent, GpuSample, Unreadable, known


@pytest.fixture
def gpus(tmp_path: Path) -> FakeGpus:
    return FakeGpus.create(tmp_path / "gpus", "gpu1", 4)


@pytest.fixture
def backend(gpus: FakeGpus) -> FakeBackend:
    return FakeBackend(gpus.directory)


def append_raw(gpus: FakeGpus, data: bytes) -> None:
    fd = os.open(gpus.directory / EVENTS_FILE, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


# --- FakeGpus (the writer) --------------------------------------------------------------------------------------
def test_create_writes_n_healthy_gpus_with_distinct_uuids(gpus: FakeGpus) -> None:
    assert gpus.count() == 4
    assert sorted(p.name for p in gpus.directory.glob("gpu*.json")) == [f"gpu{i}.json" for i in range(4)]
    assert (gpus.directory / EVENTS_FILE).read_text() == ""
    states = [gpus.state(i) for i in range(4)]
    assert states == [healthy_state("gpu1", i) for i in range(4)]
    uuids = {s["uuid"] for s in states}
    assert len(uuids) == 4
    assert all(u.startswith("GPU-") for u in uuids)
    assert len({s["pci_bus_id"] for s in states}) == 4
    assert len({s["serial"] for s in states}) == 4


def test_uuids_differ_between_nodes_and_are_stable() -> None:
    assert healthy_state("gpu1", 0)["uuid"] != healthy_state("gpu2", 0)["uuid"]
    assert healthy_state("gpu1", 0)["uuid"] == healthy_state("gpu1", 0)["uuid"]


def test_healthy_state_names_only_known_readings() -> None:
    assert set(healthy_state("n", 0)) - READING_FIELDS == {"lost", "fail_reads"}


def test_update_rejects_unknown_reading_names(gpus: FakeGpus) -> None:
    with pytest.raises(ValueError, match="temprature_gpu_c"):
        gpus.update(0, temprature_gpu_c=90.0)
    assert gpus.state(0)["temperature_gpu_c"] == 34.0  # nothing written


def test_update_accepts_the_special_keys(gpus: FakeGpus) -> None:
    gpus.update(1, lost=True, fail_reads=["power_draw_w"], temperature_gpu_c=50.0)
    state = gpus.state(1)
    assert state["lost"] is True
    assert state["fail_reads"] == ["power_draw_w"]
    assert state["temperature_gpu_c"] == 50.0


def test_state_and_inject_xid_on_an_unknown_gpu_raise_index_error(gpus: FakeGpus) -> None:
    with pytest.raises(IndexError):
        gpus.state(4)
    with pytest.raises(IndexError):
        gpus.inject_xid(42, 79)
    assert (gpus.directory / EVENTS_FILE).read_text() == ""  # no event written for it


def test_clear_restores_the_baseline_and_emits_a_reset_event(gpus: FakeGpus, backend: FakeBackend) -> None:
    gpus.overheat(2, 97.0)
    gpus.double_bit_ecc(2)
    assert gpus.state(2) != healthy_state("gpu1", 2)
    backend.wait_events(0)  # drain the fault's events
    gpus.clear(2)
    assert gpus.state(2) == healthy_state("gpu1", 2)
    events = backend.wait_events(0)
    assert [(e.gpu, e.kind) for e in events] == [(2, "reset")]


def test_clear_all_resets_every_gpu(gpus: FakeGpus, backend: FakeBackend) -> None:
    gpus.fall_off_bus(0)
    gpus.row_remap_failure(3)
    backend.wait_events(0)
    gpus.clear()
    assert [gpus.state(i) for i in range(4)] == [healthy_state("gpu1", i) for i in range(4)]
    assert sorted((e.gpu, e.kind) for e in backend.wait_events(0)) == [(i, "reset") for i in range(4)]


def test_fault_helpers_write_readings_and_events(gpus: FakeGpus, backend: FakeBackend) -> None:
    gpus.double_bit_ecc(0)
    gpus.row_remap_failure(1)
    gpus.overheat(2, 93.0)
    gpus.fall_off_bus(3)
    events = backend.wait_events(0)
    assert [(e.gpu, e.kind, e.xid) for e in events] == [(0, "ecc_double_bit", 48), (1, "xid", 64), (3, "xid", 79)]
    assert gpus.state(0)["ecc_volatile_uncorrected"] == 1
    assert gpus.state(0)["ecc_aggregate_uncorrected"] == 1
    assert gpus.state(1)["remapped_rows_failure"] is True
    assert gpus.state(2)["temperature_gpu_c"] == 93.0
    assert gpus.state(2)["clock_event_reasons"] & 0x40
    assert gpus.state(3)["lost"] is True


# --- FakeBackend (the reader) -----------------------------------------------------------------------------------
def test_no_fake_gpus_is_no_gpu_error(tmp_path: Path) -> None:
    with pytest.raises(NoGpuError):
        FakeBackend(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(NoGpuError):
        FakeBackend(tmp_path / "empty")
    with pytest.raises(NoGpuError):
        open_backend("fake", None)


def test_open_backend_fake(gpus: FakeGpus) -> None:
    backend = open_backend("fake", gpus.directory)
    assert backend.name == "fake"
    assert backend.device_count() == 4
    assert backend.driver_version() == "550.90.07"
    with pytest.raises(ValueError, match="unknown GPU backend"):
        open_backend("cuda")


def test_sample_returns_the_values(backend: FakeBackend) -> None:
    sample = backend.sample(1)
    expected = healthy_state("gpu1", 1)
    assert isinstance(sample, GpuSample)
    assert sample.index == 1
    assert not sample.lost
    assert sample.errors == ()
    assert sample.read_at > 0
    for name in READING_FIELDS:
        assert getattr(sample, name) == expected[name], name
    assert sample.nvlink_errors == {"replay": 0, "recovery": 0, "crc_flit": 0}
    assert sample.unreadable_fields() == []


def test_not_supported_maps_to_not_supported(gpus: FakeGpus, backend: FakeBackend) -> None:
    gpus.update(0, temperature_memory_c="not_supported", recovery_action="not_supported")
    sample = backend.sample(0)
    assert sample.temperature_memory_c is NOT_SUPPORTED
    assert sample.recovery_action is NOT_SUPPORTED
    assert sample.temperature_gpu_c == 34.0
    assert sample.errors == ()
    assert sample.to_json()["recovery_action"] == "not_supported"


def test_a_missing_reading_is_not_supported(gpus: FakeGpus, backend: FakeBackend) -> None:
    state = gpus.state(0)
    del state["pcie_replay_counter"]
    (gpus.directory / "gpu0.json").write_text(json.dumps(state))
    assert backend.sample(0).pcie_replay_counter is NOT_SUPPORTED


def test_fail_reads_makes_only_those_readings_unreadable(gpus: FakeGpus, backend: FakeBackend) -> None:
    gpus.update(2, fail_reads=["temperature_gpu_c", "ecc_volatile_uncorrected"])
    sample = backend.sample(2)
    assert isinstance(sample.temperature_gpu_c, Unreadable)
    assert isinstance(sample.ecc_volatile_uncorrected, Unreadable)
    assert sorted(sample.unreadable_fields()) == ["ecc_volatile_uncorrected", "temperature_gpu_c"]
    assert len(sample.errors) == 2
    assert any(e.startswith("temperature_gpu_c:") for e in sample.errors)
    assert not sample.lost
    assert sample.power_draw_w == 72.0
    assert sample.uuid == healthy_state("gpu1", 2)["uuid"]
    # Other GPUs are untouched.
    assert backend.sample(1).errors == ()


def test_lost_gpu_keeps_its_identity_and_every_other_reading_fails(gpus: FakeGpus, backend: FakeBackend) -> None:
    gpus.update(3, lost=True)
    sample = backend.sample(3)
    expected = healthy_state("gpu1", 3)
    assert sample.lost
    for name in ("uuid", "serial", "pci_bus_id", "name"):
        assert getattr(sample, name) == expected[name]
    assert isinstance(sample.temperature_gpu_c, Unreadable)
    assert sample.temperature_gpu_c.error == "GPU is lost"
    assert isinstance(sample.driver_version, Unreadable)
    assert set(sample.unreadable_fields()) == READING_FIELDS - {"uuid", "serial", "pci_bus_id", "name"}


@pytest.mark.parametrize("content", ["{ this is not json", "[1, 2, 3]", ""])
def test_corrupt_gpu_file_makes_every_reading_unreadable(gpus: FakeGpus, backend: FakeBackend, content: str) -> None:
    (gpus.directory / "gpu2.json").write_text(content)
    sample = backend.sample(2)  # no exception
    assert sample.index == 2
    assert not sample.lost
    assert set(sample.unreadable_fields()) == READING_FIELDS
    assert len(sample.errors) == 1
    assert "gpu2.json" in sample.errors[0]
    assert all("gpu2.json" in getattr(sample, name).error for name in READING_FIELDS)
    assert not known(sample.uuid)
    # Neighbours still read.
    assert backend.sample(1).errors == ()


def test_sample_of_an_unknown_gpu_raises_index_error(backend: FakeBackend) -> None:
    with pytest.raises(IndexError):
        backend.sample(99)
    with pytest.raises(IndexError):
        backend.sample(-1)


def test_wait_events_returns_only_events_after_opening(gpus: FakeGpus) -> None:
    gpus.inject_xid(0, 13)  # history: before the backend was opened
    backend = FakeBackend(gpus.directory)
    assert backend.wait_events(0) == []
    gpus.inject_xid(1, 31, detail="page fault")
    events = backend.wait_events(1.0)
    assert len(events) == 1
    event = events[0]
    assert (event.gpu, event.kind, event.xid, event.detail) == (1, "xid", 31, "page fault")
    assert event.at > 0
    assert backend.wait_events(0) == []  # each event is delivered once


def test_wait_events_returns_empty_after_the_timeout(backend: FakeBackend) -> None:
    assert backend.wait_events(0.05) == []


def test_wait_events_returns_several_events_in_order(gpus: FakeGpus, backend: FakeBackend) -> None:
    for xid in (13, 43, 45):
        gpus.inject_xid(2, xid)
    assert [e.xid for e in backend.wait_events(0)] == [13, 43, 45]


def test_wait_events_handles_a_partial_last_line(gpus: FakeGpus, backend: FakeBackend) -> None:
    line = (json.dumps(GpuEvent(3, "xid", xid=79, at=123.0, detail="off the bus").to_json()) + "\n").encode()
    half = len(line) // 2
    append_raw(gpus, line[:half])
    assert backend.wait_events(0.05) == []
    append_raw(gpus, line[half:])
    assert backend.wait_events(0.05) == [GpuEvent(3, "xid", xid=79, at=123.0, detail="off the bus")]


def test_wait_events_skips_a_malformed_line_with_a_warning(
    gpus: FakeGpus, backend: FakeBackend, caplog: pytest.LogCaptureFixture
) -> None:
    append_raw(gpus, b"this is not json\n")
    append_raw(gpus, b'{"kind": "xid", "xid": 13}\n')  # no gpu
    append_raw(gpus, b"[1, 2]\n")
    append_raw(gpus, b"\n")
    gpus.inject_xid(0, 48)
    with caplog.at_level(logging.WARNING, logger="ha_ops.gpu.fake"):
        events = backend.wait_events(0.05)
    assert [(e.gpu, e.xid) for e in events] == [(0, 48)]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "malformed" in r.getMessage()]
    assert len(warnings) == 3


def test_wait_events_starts_over_when_the_file_is_truncated(gpus: FakeGpus, backend: FakeBackend) -> None:
    gpus.inject_xid(0, 13)
    gpus.inject_xid(0, 13)
    assert len(backend.wait_events(0)) == 2
    (gpus.directory / EVENTS_FILE).write_text("")
    gpus.inject_xid(1, 31)
    assert [(e.gpu, e.xid) for e in backend.wait_events(0.05)] == [(1, 31)]


def test_driver_version_of_a_corrupt_gpu0_is_a_backend_error(gpus: FakeGpus, backend: FakeBackend) -> None:
    from ha_ops.gpu.backend import GpuBackendError

    (gpus.directory / "gpu0.json").write_text("{")
    with pytest.raises(GpuBackendError):
        backend.driver_version()
    backend.close()
