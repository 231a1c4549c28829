"""Health checks: every rule on constructed samples and events, the XID table, and the verdict. No sleeping: times
are injected (`now`, `read_at`, `GpuEvent.at`)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from ha_ops.gpu.fake import FakeBackend, FakeGpus, healthy_state
from ha_ops.gpu.types import NOT_SUPPORTED, READING_FIELDS, GpuEvent, GpuSample, Unreadable
from ha_ops.gpu.xid import APPLICATION_XIDS, XID_TABLE, describe
from ha_ops.health.checks import ESSENTIAL, EventLedger, check_events, check_sample, evaluate, verdict
from ha_ops.health.model import Action, Finding, HealthState, Severity, Verdict
from ha_ops.health.thresholds import Thresholds

T = Thresholds()
T0 = 1_800_000_000.0
KEEP = max(T.app_xid_window_s, T.warning_xid_hold_s)

ISSUE_XIDS = [13, 31, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 119, 120, 136, 140, 154]


def sample(index: int = 0, read_at: float = T0, **changes: object) -> GpuSample:
    """A healthy GPU's readings (as the fake backend starts them), with `changes`."""
    state = {k: v for k, v in healthy_state("node1", index).items() if k in READING_FIELDS}
    state.update(changes)
    return GpuSample(index=index, read_at=read_at, **state)  # type: ignore[arg-type]


def judge(*samples: GpuSample, events: list[GpuEvent] | None = None, now: float = T0, t: Thresholds = T) -> Verdict:
    ledger = EventLedger()
    ledger.record(events or [], now, KEEP)
    return evaluate(list(samples), {}, ledger, now, t)


def only(findings: list[Finding]) -> Finding:
    assert len(findings) == 1, findings
    return findings[0]


def xid(gpu: int, code: int, at: float) -> GpuEvent:
    return GpuEvent(gpu, "xid", xid=code, at=at)


# --- healthy ----------------------------------------------------------------------------------------------------
def test_a_healthy_sample_has_no_findings() -> None:
    s = sample()
    # What an idle H100/H200 really shows must not be a finding.
    assert s.clock_event_reasons == 0x1
    assert s.pcie_replay_counter == 1
    assert s.ecc_mode_pending is True
    assert check_sample(s, None, T) == []
    assert check_sample(s, replace(s, read_at=T0 - 60), T) == []
    v = judge(*(sample(i) for i in range(8)))
    assert v.state == HealthState.HEALTHY
    assert v.action == Action.NONE
    assert v.findings == ()
    assert v.unknown == ()
    assert v.reason == "healthy"


def test_a_healthy_fake_gpu_read_through_the_backend_is_healthy(tmp_path: Path) -> None:
    FakeGpus.create(tmp_path, "node1", 2)
    backend = FakeBackend(tmp_path)
    samples = [backend.sample(i) for i in range(2)]
    v = evaluate(samples, {}, EventLedger(), T0, T)
    assert v.state == HealthState.HEALTHY
    assert v.findings == ()
    again = [backend.sample(i) for i in range(2)]
    assert evaluate(again, {s.index: s for s in samples}, EventLedger(), T0, T).state == HealthState.HEALTHY


def test_every_not_supported_reading_is_healthy_not_unknown() -> None:
    s = GpuSample(index=0, read_at=T0)  # everything NOT_SUPPORTED
    assert check_sample(s, replace(s, read_at=T0 - 60), T) == []
    assert judge(s).state == HealthState.HEALTHY


# --- per-sample rules -------------------------------------------------------------------------------------------
def test_lost_gpu_is_critical_reboot_node() -> None:
    s = sample(3, lost=True, temperature_gpu_c=Unreadable("GPU is lost"), ecc_volatile_uncorrected=Unreadable("x"))
    f = only(check_sample(s, None, T))
    assert (f.check, f.severity, f.action, f.gpu) == ("gpu_lost", Severity.CRITICAL, Action.REBOOT_NODE, 3)
    assert f.uuid == healthy_state("node1", 3)["uuid"]
    v = judge(s)
    assert v.state == HealthState.UNHEALTHY
    assert v.action == Action.REBOOT_NODE
    assert v.unknown == ()  # lost is a finding, not "could not read"
    assert v.reason.startswith("GPU3 gpu_lost")


@pytest.mark.parametrize(
    ("temp", "severity", "action"),
    [
        (88.9, None, None),
        (89.0, Severity.WARNING, Action.WATCH),
        (94.9, Severity.WARNING, Action.WATCH),
        (95.0, Severity.CRITICAL, Action.DRAIN),
        (101.0, Severity.CRITICAL, Action.DRAIN),
    ],
)
def test_temperature_against_the_gpus_thresholds(temp: float, severity: Severity | None, action: Action | None) -> None:
    findings = check_sample(sample(temperature_gpu_c=temp), None, T)
    if severity is None:
        assert findings == []
        return
    f = only(findings)
    assert (f.check, f.severity, f.action) == ("temperature", severity, action)
    assert f"{temp:.0f} C" in f.message


def test_device_thresholds_take_precedence_over_config_defaults() -> None:
    t = Thresholds(temperature_slowdown_c=60.0, temperature_shutdown_c=70.0)
    dev = {"temperature_slowdown_c": 80.0, "temperature_shutdown_c": 85.0}
    assert check_sample(sample(temperature_gpu_c=75.0, **dev), None, t) == []  # above the defaults, below the GPU's
    assert only(check_sample(sample(temperature_gpu_c=82.0, **dev), None, T)).severity == Severity.WARNING
    assert only(check_sample(sample(temperature_gpu_c=85.0, **dev), None, T)).severity == Severity.CRITICAL


@pytest.mark.parametrize("missing", [NOT_SUPPORTED, Unreadable("NVML error")])
def test_config_defaults_apply_when_the_gpu_reports_no_thresholds(missing: object) -> None:
    s = sample(temperature_slowdown_c=missing, temperature_shutdown_c=missing)
    assert check_sample(replace(s, temperature_gpu_c=88.0), None, T) == []
    assert only(check_sample(replace(s, temperature_gpu_c=90.0), None, T)).severity == Severity.WARNING
    assert only(check_sample(replace(s, temperature_gpu_c=95.0), None, T)).severity == Severity.CRITICAL
    t = Thresholds(temperature_slowdown_c=70.0, temperature_shutdown_c=80.0)
    assert only(check_sample(replace(s, temperature_gpu_c=75.0), None, t)).severity == Severity.WARNING
    assert only(check_sample(replace(s, temperature_gpu_c=80.0), None, t)).action == Action.DRAIN


def test_volatile_uncorrectable_ecc_is_critical_reset_gpu() -> None:
    f = only(check_sample(sample(ecc_volatile_uncorrected=1, ecc_aggregate_uncorrected=1), None, T))
    assert (f.check, f.severity, f.action) == ("ecc_uncorrectable", Severity.CRITICAL, Action.RESET_GPU)
    # Lifetime (aggregate) errors alone are history, not a fault now.
    assert check_sample(sample(ecc_aggregate_uncorrected=5), None, T) == []


def test_row_remap_failure_is_critical_replace() -> None:
    f = only(check_sample(sample(remapped_rows_failure=True, remapped_rows_pending=True), None, T))
    assert (f.check, f.severity, f.action) == ("row_remap_failure", Severity.CRITICAL, Action.REPLACE)
    assert judge(sample(remapped_rows_failure=True)).action == Action.REPLACE


def test_row_remap_pending_is_a_warning() -> None:
    f = only(check_sample(sample(remapped_rows_pending=True), None, T))
    assert (f.check, f.severity) == ("row_remap_pending", Severity.WARNING)
    v = judge(sample(remapped_rows_pending=True))
    assert v.state == HealthState.DEGRADED


@pytest.mark.parametrize(
    ("value", "action"),
    [(1, Action.RESET_GPU), (2, Action.REBOOT_NODE), (3, Action.DRAIN), (4, Action.RESET_GPU)],
)
def test_recovery_action_field(value: int, action: Action) -> None:
    f = only(check_sample(sample(recovery_action=value), None, T))
    assert (f.check, f.severity, f.action) == ("recovery_action", Severity.CRITICAL, action)
    assert str(value) in f.message
    v = judge(sample(recovery_action=value))
    assert v.state == HealthState.UNHEALTHY
    assert v.action == action


def test_recovery_action_none_is_healthy() -> None:
    assert check_sample(sample(recovery_action=0), None, T) == []
    assert check_sample(sample(recovery_action=NOT_SUPPORTED), None, T) == []


def test_pcie_width_below_max_is_a_warning() -> None:
    f = only(check_sample(sample(pcie_width_current=8, pcie_width_max=16), None, T))
    assert (f.check, f.severity, f.action) == ("pcie_width", Severity.WARNING, Action.WATCH)
    assert "x8 of x16" in f.message
    assert check_sample(sample(pcie_width_current=16, pcie_width_max=16), None, T) == []
    assert check_sample(sample(pcie_width_current=8, pcie_width_max=NOT_SUPPORTED), None, T) == []


def test_pcie_replay_rate_above_the_threshold_is_a_warning() -> None:
    before = sample(read_at=T0, pcie_replay_counter=1)
    now = sample(read_at=T0 + 60, pcie_replay_counter=1 + 150)
    f = only(check_sample(now, before, T))
    assert (f.check, f.severity, f.action) == ("pcie_replays", Severity.WARNING, Action.WATCH)
    assert "150" in f.message


def test_pcie_replay_rate_below_the_threshold_is_nothing() -> None:
    before = sample(read_at=T0, pcie_replay_counter=1)
    assert check_sample(sample(read_at=T0 + 60, pcie_replay_counter=101), before, T) == []  # exactly 100/min
    assert check_sample(sample(read_at=T0 + 60, pcie_replay_counter=50), before, T) == []
    # 500 replays spread over 10 minutes: 50 per minute.
    assert check_sample(sample(read_at=T0 + 600, pcie_replay_counter=501), before, T) == []
    # A counter that went back (GPU reset) is no rate.
    reset = sample(read_at=T0 + 60, pcie_replay_counter=0)
    assert check_sample(reset, replace(before, pcie_replay_counter=900), T) == []


def test_pcie_replays_first_sample_alone_is_nothing() -> None:
    assert check_sample(sample(pcie_replay_counter=10_000_000), None, T) == []


def test_rates_need_a_readable_previous_sample() -> None:
    now = sample(read_at=T0 + 60, pcie_replay_counter=10_000)
    assert check_sample(now, sample(read_at=T0, pcie_replay_counter=NOT_SUPPORTED), T) == []
    assert check_sample(now, sample(read_at=T0, lost=True), T) == []
    assert check_sample(now, sample(read_at=T0 + 60, pcie_replay_counter=1), T) == []  # no time passed


def test_pcie_replay_threshold_is_configurable() -> None:
    before = sample(read_at=T0, pcie_replay_counter=1)
    now = sample(read_at=T0 + 60, pcie_replay_counter=51)
    assert check_sample(now, before, T) == []
    assert only(check_sample(now, before, Thresholds(pcie_replays_per_minute=10))).check == "pcie_replays"


def test_correctable_ecc_rate() -> None:
    before = sample(read_at=T0, ecc_volatile_corrected=100)
    f = only(check_sample(sample(read_at=T0 + 60, ecc_volatile_corrected=120), before, T))  # 1200 per hour
    assert (f.check, f.severity, f.action) == ("ecc_correctable_rate", Severity.WARNING, Action.WATCH)
    assert check_sample(sample(read_at=T0 + 60, ecc_volatile_corrected=110), before, T) == []  # 600 per hour


def test_nvlink_error_rate() -> None:
    before = sample(read_at=T0, nvlink_errors={"replay": 100, "recovery": 0, "crc_flit": 0})
    high = sample(read_at=T0 + 60, nvlink_errors={"replay": 108, "recovery": 2, "crc_flit": 5})  # 15 per minute
    f = only(check_sample(high, before, T))
    assert (f.check, f.severity, f.action) == ("nvlink_errors", Severity.WARNING, Action.WATCH)
    low = sample(read_at=T0 + 60, nvlink_errors={"replay": 105, "recovery": 0, "crc_flit": 0})
    assert check_sample(low, before, T) == []
    assert check_sample(replace(high, nvlink_errors=NOT_SUPPORTED), before, T) == []
    assert check_sample(high, replace(before, nvlink_errors=Unreadable("x")), T) == []


@pytest.mark.parametrize(
    ("bits", "name"),
    [
        (0x8, "hardware slowdown"),
        (0x20, "software thermal"),
        (0x40, "hardware thermal"),
        (0x80, "power brake"),
        (0x1 | 0x40, "hardware thermal"),
    ],
)
def test_bad_clock_event_reasons_are_a_warning(bits: int, name: str) -> None:
    f = only(check_sample(sample(clock_event_reasons=bits), None, T))
    assert (f.check, f.severity, f.action) == ("clock_events", Severity.WARNING, Action.WATCH)
    assert name in f.message
    assert f"0x{bits:x}" in f.message


@pytest.mark.parametrize("bits", [0x0, 0x1, 0x2, 0x4, 0x10, 0x100, 0x1 | 0x4 | 0x2])
def test_normal_clock_event_reasons_are_nothing(bits: int) -> None:
    assert check_sample(sample(clock_event_reasons=bits), None, T) == []


# --- unknown ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ESSENTIAL)
def test_an_unreadable_essential_reading_is_unknown_never_drain(name: str) -> None:
    v = judge(sample(0), sample(1, **{name: Unreadable("NVML error")}))
    assert v.state == HealthState.UNKNOWN
    assert v.action == Action.NONE
    assert not v.action.takes_node_out
    assert v.unknown == (f"GPU1 {name}",)


def test_an_unreadable_optional_reading_is_still_healthy() -> None:
    v = judge(sample(power_draw_w=Unreadable("x"), nvlink_errors=Unreadable("x"), recovery_action=Unreadable("x")))
    assert v.state == HealthState.HEALTHY
    assert v.unknown == ()


def test_a_wholly_unreadable_gpu_is_unknown() -> None:
    v = judge(sample(0), GpuSample.unreadable(1, "fake GPU state gpu1.json unreadable", T0))
    assert v.state == HealthState.UNKNOWN
    assert v.findings == ()
    assert sorted(v.unknown) == sorted(f"GPU1 {name}" for name in ESSENTIAL)


def test_critical_and_unknown_is_unhealthy() -> None:
    v = judge(sample(0, temperature_gpu_c=Unreadable("x")), sample(1, ecc_volatile_uncorrected=2))
    assert v.state == HealthState.UNHEALTHY
    assert v.action == Action.RESET_GPU
    assert v.unknown == ("GPU0 temperature_gpu_c",)


def test_warning_and_unknown_is_degraded() -> None:
    v = judge(sample(0, temperature_gpu_c=Unreadable("x")), sample(1, pcie_width_current=4))
    assert v.state == HealthState.DEGRADED
    assert v.action == Action.WATCH


# --- the XID table ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("code", ISSUE_XIDS)
def test_every_issue_xid_is_in_the_table(code: int) -> None:
    info = XID_TABLE[code]
    assert info.xid == code
    assert info.meaning.strip()
    assert isinstance(info.action, Action)
    assert isinstance(info.severity, Severity)
    assert describe(code) is info
    # Critical XIDs take the node out of service; warnings and informational ones do not.
    assert info.action.takes_node_out == (info.severity == Severity.CRITICAL)


def test_application_xids() -> None:
    assert frozenset({13, 31, 43, 45, 68}) == APPLICATION_XIDS
    for code in APPLICATION_XIDS:
        assert (XID_TABLE[code].severity, XID_TABLE[code].action) == (Severity.INFO, Action.NONE)


@pytest.mark.parametrize(
    ("code", "severity", "action"),
    [
        (48, Severity.CRITICAL, Action.RESET_GPU),
        (79, Severity.CRITICAL, Action.REBOOT_NODE),
        (63, Severity.WARNING, Action.WATCH),
        (92, Severity.WARNING, Action.WATCH),
        (94, Severity.WARNING, Action.WATCH),
        (95, Severity.CRITICAL, Action.RESET_GPU),
        (154, Severity.WARNING, Action.WATCH),
    ],
)
def test_key_xids(code: int, severity: Severity, action: Action) -> None:
    assert (XID_TABLE[code].severity, XID_TABLE[code].action) == (severity, action)


def test_unknown_xid_is_a_warning_to_watch() -> None:
    info = describe(999)
    assert (info.xid, info.severity, info.action) == (999, Severity.WARNING, Action.WATCH)
    v = judge(sample(), events=[xid(0, 999, T0)])
    f = only(list(v.findings))
    assert (f.check, f.severity, f.action, f.xid, f.gpu) == ("xid", Severity.WARNING, Action.WATCH, 999, 0)
    assert v.state == HealthState.DEGRADED


# --- XID events -------------------------------------------------------------------------------------------------
def test_one_application_xid_is_informational_and_healthy() -> None:
    v = judge(sample(0), sample(1), events=[xid(1, 13, T0)])
    f = only(list(v.findings))
    assert (f.check, f.severity, f.action, f.gpu, f.xid) == ("xid", Severity.INFO, Action.NONE, 1, 13)
    assert f.uuid == healthy_state("node1", 1)["uuid"]
    assert v.state == HealthState.HEALTHY
    assert v.action == Action.NONE


@pytest.mark.parametrize("code", sorted(APPLICATION_XIDS))
def test_application_xid_repeats_on_one_gpu_drain(code: int) -> None:
    events = [xid(6, code, T0 + i) for i in range(T.app_xid_repeats)]
    v = judge(*(sample(i) for i in range(8)), events=events, now=T0 + 10)
    assert v.state == HealthState.UNHEALTHY
    assert v.action == Action.DRAIN
    f = only([f for f in v.findings if f.check == "xid_repeated"])
    assert (f.severity, f.gpu, f.xid) == (Severity.CRITICAL, 6, code)
    assert v.reason.startswith(f"GPU6 xid_repeated: XID {code} x3")


def test_one_fewer_repeat_does_not_drain() -> None:
    events = [xid(6, 31, T0 + i) for i in range(T.app_xid_repeats - 1)]
    v = judge(sample(6), events=events, now=T0 + 10)
    assert v.state == HealthState.HEALTHY
    assert "x2" in only(list(v.findings)).message


def test_app_xid_repeats_is_configurable() -> None:
    t = Thresholds(app_xid_repeats=2)
    v = judge(sample(0), events=[xid(0, 43, T0), xid(0, 43, T0 + 1)], now=T0 + 2, t=t)
    assert v.action == Action.DRAIN


def test_the_same_count_over_different_gpus_does_not_drain() -> None:
    events = [xid(g, 31, T0 + g) for g in range(T.app_xid_repeats)]
    v = judge(*(sample(i) for i in range(8)), events=events, now=T0 + 10)
    assert v.state == HealthState.HEALTHY
    assert v.action == Action.NONE
    assert all(f.severity == Severity.INFO for f in v.findings)
    assert len(v.findings) == T.app_xid_repeats


def test_repeats_older_than_the_window_do_not_drain() -> None:
    ledger = EventLedger()
    ledger.record([xid(0, 13, T0 + i) for i in range(3)], T0 + 2, KEEP)
    assert check_events(ledger, T0 + 2, T)[0].check == "xid_repeated"
    # Evaluated later without pruning: the window itself excludes them.
    later = T0 + 2 + T.app_xid_window_s + 1
    assert all(f.check != "xid_repeated" for f in check_events(ledger, later, T))
    # Two old ones and one new one are not three within the window.
    ledger = EventLedger()
    ledger.record([xid(0, 13, T0), xid(0, 13, T0 + 1)], T0 + 1, KEEP)
    ledger.record([xid(0, 13, T0 + 700)], T0 + 700, KEEP)
    v = evaluate([sample(0)], {}, ledger, T0 + 700, T)
    assert v.state == HealthState.HEALTHY


def test_a_critical_xid_latches_until_a_reset_of_that_gpu() -> None:
    ledger = EventLedger()
    ledger.record([xid(5, 79, T0), xid(2, 48, T0)], T0, KEEP)
    much_later = T0 + 10 * KEEP
    ledger.record([], much_later, KEEP)  # prunes the recent list
    v = evaluate([sample(i) for i in range(8)], {}, ledger, much_later, T)
    assert v.state == HealthState.UNHEALTHY
    assert {(f.gpu, f.xid) for f in v.findings} == {(5, 79), (2, 48)}
    # A reset of another GPU changes nothing; a reset of GPU 5 ends its latch only.
    ledger.record([GpuEvent(3, "reset", at=much_later)], much_later, KEEP)
    assert {(f.gpu, f.xid) for f in check_events(ledger, much_later, T)} == {(5, 79), (2, 48)}
    ledger.record([GpuEvent(5, "reset", at=much_later)], much_later, KEEP)
    assert {(f.gpu, f.xid) for f in check_events(ledger, much_later, T)} == {(2, 48)}
    ledger.record([GpuEvent(2, "reset", at=much_later)], much_later, KEEP)
    assert check_events(ledger, much_later, T) == []


def test_repeated_critical_xids_are_one_finding() -> None:
    v = judge(sample(5), events=[xid(5, 74, T0 + i) for i in range(5)], now=T0 + 5)
    f = only(list(v.findings))
    assert (f.check, f.xid, f.severity, f.action) == ("xid", 74, Severity.CRITICAL, Action.RESET_GPU)


def test_a_reset_also_forgets_application_xids_of_that_gpu() -> None:
    ledger = EventLedger()
    ledger.record([xid(0, 13, T0), xid(0, 13, T0 + 1), GpuEvent(0, "reset", at=T0 + 2)], T0 + 2, KEEP)
    ledger.record([xid(0, 13, T0 + 3)], T0 + 3, KEEP)
    assert all(f.check != "xid_repeated" for f in check_events(ledger, T0 + 3, T))


def test_a_warning_xid_expires_after_the_hold() -> None:
    ledger = EventLedger()
    ledger.record([xid(1, 63, T0)], T0, KEEP)
    f = only(check_events(ledger, T0 + T.warning_xid_hold_s - 1, T))
    assert (f.check, f.severity, f.action, f.xid) == ("xid", Severity.WARNING, Action.WATCH, 63)
    assert check_events(ledger, T0 + T.warning_xid_hold_s + 1, T) == []
    ledger.record([], T0 + T.warning_xid_hold_s + 1, KEEP)
    assert not ledger.latched
    assert evaluate([sample(1)], {}, ledger, T0 + T.warning_xid_hold_s + 1, T).state == HealthState.HEALTHY


def test_a_shorter_warning_hold() -> None:
    t = Thresholds(warning_xid_hold_s=30)
    ledger = EventLedger()
    ledger.record([xid(1, 94, T0)], T0, KEEP)
    assert len(check_events(ledger, T0 + 29, t)) == 1
    assert check_events(ledger, T0 + 31, t) == []


def test_repeated_warning_xids_are_one_finding() -> None:
    ledger = EventLedger()
    ledger.record([xid(1, 92, T0), xid(1, 92, T0 + 1), xid(2, 92, T0 + 1)], T0 + 1, KEEP)
    assert sorted((f.gpu, f.xid) for f in check_events(ledger, T0 + 2, T)) == [(1, 92), (2, 92)]


def test_double_bit_ecc_event_is_xid_48() -> None:
    v = judge(sample(2), events=[GpuEvent(2, "ecc_double_bit", at=T0)])
    f = only(list(v.findings))
    assert (f.check, f.xid, f.gpu, f.severity, f.action) == ("xid", 48, 2, Severity.CRITICAL, Action.RESET_GPU)
    assert v.state == HealthState.UNHEALTHY


def test_single_bit_ecc_event_is_nothing() -> None:
    v = judge(sample(2), events=[GpuEvent(2, "ecc_single_bit", at=T0)])
    assert v.findings == ()
    assert v.state == HealthState.HEALTHY


# --- verdict and reason -----------------------------------------------------------------------------------------
def test_reason_names_the_gpu_and_prefers_the_xid_on_a_tie() -> None:
    lost = sample(5, lost=True)
    v = judge(*(sample(i) for i in range(5)), lost, events=[xid(5, 79, T0)])
    assert v.state == HealthState.UNHEALTHY
    assert v.action == Action.REBOOT_NODE
    assert v.reason.startswith("GPU5 xid: XID 79")
    assert "fallen off the bus" in v.reason
    assert v.reason.endswith("(+1 more)")
    # The order of the findings does not matter.
    assert verdict(list(reversed(v.findings)), []).reason == v.reason


def test_reason_prefers_severity_then_action() -> None:
    v = judge(sample(0, temperature_gpu_c=91.0), sample(1, ecc_volatile_uncorrected=1), events=[xid(3, 63, T0)])
    assert v.reason.startswith("GPU1 ecc_uncorrectable:")
    assert v.reason.endswith("(+2 more)")
    v = judge(sample(0, temperature_gpu_c=96.0), sample(1, remapped_rows_failure=True))
    assert v.reason.startswith("GPU1 row_remap_failure:")  # replace outranks drain
    assert v.action == Action.REPLACE


def test_verdict_states() -> None:
    warn = Finding("x", Severity.WARNING, Action.WATCH, "w", gpu=0)
    crit = Finding("y", Severity.CRITICAL, Action.DRAIN, "c", gpu=1)
    info = Finding("z", Severity.INFO, Action.NONE, "i", gpu=2)
    assert verdict([], []).state == HealthState.HEALTHY
    assert verdict([info], []).state == HealthState.HEALTHY
    assert verdict([info], ["GPU0 temperature_gpu_c"]).state == HealthState.UNKNOWN
    assert verdict([warn], []).state == HealthState.DEGRADED
    assert verdict([warn, crit], ["GPU0 x"]).state == HealthState.UNHEALTHY
    assert verdict([warn, crit], []).action == Action.DRAIN
    assert verdict([], ["GPU0 x"]).reason == "unknown"
    assert verdict([crit], []).reason == "GPU1 y: c"
    assert verdict([Finding("n", Severity.CRITICAL, Action.DRAIN, "node")], []).reason == "n: node"


def test_finding_to_json() -> None:
    f = Finding("xid", Severity.CRITICAL, Action.REBOOT_NODE, "XID 79", gpu=5, uuid="GPU-1", xid=79)
    assert f.to_json() == {
        "check": "xid",
        "severity": "critical",
        "action": "reboot_node",
        "message": "XID 79",
        "gpu": 5,
        "uuid": "GPU-1",
        "xid": 79,
    }


def test_an_xid_storm_does_not_grow_the_latch() -> None:
    """A drained GPU can repeat a critical XID for days before anyone resets it."""
    ledger = EventLedger()
    for i in range(1000):
        ledger.record([xid(4, 74, T0 + i), GpuEvent(4, "ecc_double_bit", at=T0 + i)], T0 + i, KEEP)
    assert len(ledger.latched[4]) == 2
    assert sorted(f.xid for f in check_events(ledger, T0 + 1000, T)) == [48, 74]
