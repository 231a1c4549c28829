"""XID and event hygiene on the agent (issue 22): duplicate events are one tally (bounded memory, the count in the
finding), an XID that a later one supersedes is cancelled (the table in ha_ops.gpu.xid), a storm is one log line and
no report per sweep. Times are injected; no sleeping."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from ha_ops.gpu.fake import FakeBackend, FakeGpus, healthy_state
from ha_ops.gpu.types import READING_FIELDS, GpuEvent, GpuSample
from ha_ops.gpu.xid import APPLICATION_XIDS, CONSEQUENCE_OF, SUPERSEDES, SUPERSEDES_ALL, XID_TABLE, cause_of, superseded
from ha_ops.health.agent import Agent
from ha_ops.health.checks import (
    BUCKETS,
    MAX_DETAIL_CHARS,
    MAX_DETAILS,
    MAX_RECENT,
    EventLedger,
    check_events,
    evaluate,
    stable_reason,
)
from ha_ops.health.config import AgentConfig
from ha_ops.health.model import Action, HealthState, Severity
from ha_ops.health.report import AgentReport
from ha_ops.health.thresholds import Thresholds

T = Thresholds()
T0 = 1_800_000_000.0
KEEP = max(T.app_xid_window_s, T.warning_xid_hold_s)


def xid(gpu: int, code: int, at: float, detail: str = "") -> GpuEvent:
    return GpuEvent(gpu, "xid", xid=code, at=at, detail=detail)


def sample(index: int = 0, **changes: object) -> GpuSample:
    state = {k: v for k, v in healthy_state("node1", index).items() if k in READING_FIELDS}
    state.update(changes)
    return GpuSample(index=index, read_at=T0, **state)  # type: ignore[arg-type]


def findings(
    events: list[GpuEvent], now: float | None = None, t: Thresholds = T
) -> list[tuple[int | None, int | None]]:
    ledger = EventLedger()
    ledger.record(events, now if now is not None else max(e.at for e in events), KEEP)
    return sorted((f.gpu, f.xid) for f in check_events(ledger, now if now is not None else events[-1].at, t))


# --- dedup ------------------------------------------------------------------------------------------------------
def test_a_storm_of_one_critical_xid_is_one_tally_and_one_finding_with_its_count() -> None:
    ledger = EventLedger()
    for batch in range(100):  # 100,000 events, in batches as the event loop hands them to sweeps
        events = [xid(0, 95, T0 + (batch * 1000 + i) / 10_000) for i in range(1000)]
        ledger.record(events, events[-1].at, KEEP)
    assert list(ledger.latched) == [0] and list(ledger.latched[0]) == [95] and not ledger.recent
    tally = ledger.latched[0][95]
    assert (tally.count, tally.first, round(tally.last - tally.first, 2)) == (100_000, T0, 10.0)
    [f] = check_events(ledger, T0 + 10, T)
    assert (f.check, f.gpu, f.xid, f.severity, f.action) == ("xid", 0, 95, Severity.CRITICAL, Action.RESET_GPU)
    assert f.message.startswith("XID 95 x100000 in 10.0 s: Uncontained")


def test_one_event_keeps_the_message_it_always_had() -> None:
    ledger = EventLedger()
    ledger.record([xid(2, 48, T0)], T0, KEEP)
    assert check_events(ledger, T0, T)[0].message == f"XID 48: {XID_TABLE[48].meaning}"


def test_record_returns_only_the_events_new_to_the_ledger() -> None:
    ledger = EventLedger()
    first = [xid(0, 95, T0), xid(0, 95, T0 + 1), xid(1, 95, T0 + 1), xid(0, 63, T0 + 2), xid(0, 63, T0 + 3)]
    assert ledger.record(first, T0 + 3, KEEP) == [first[0], first[2], first[3]]
    assert ledger.record([xid(0, 95, T0 + 4), xid(0, 63, T0 + 4)], T0 + 4, KEEP) == []
    ledger.record([GpuEvent(0, "reset", at=T0 + 5)], T0 + 5, KEEP)
    again = xid(0, 95, T0 + 6)
    assert ledger.record([again], T0 + 6, KEEP) == [again]  # forgotten at the reset: new again


def test_details_are_a_small_sample_of_distinct_ones() -> None:
    ledger = EventLedger()
    events = [xid(0, 95, T0 + i, detail=f"addr 0x{i % 7:x}" + "!" * 500) for i in range(1000)]
    ledger.record(events, T0 + 1000, KEEP)
    details = ledger.latched[0][95].details
    assert len(details) == MAX_DETAILS == len(set(details))
    assert all(len(d) == MAX_DETAIL_CHARS for d in details)


def test_memory_is_bounded_whatever_the_xids() -> None:
    """Distinct unknown XIDs (a driver newer than the table) on every GPU: the oldest are evicted past the cap."""
    ledger = EventLedger()
    for code in range(1000, 1000 + 3 * MAX_RECENT):
        ledger.record([xid(code % 8, code, T0 + code / 1000)], T0 + code / 1000, KEEP)
    assert len(ledger.recent) == MAX_RECENT
    assert ledger.latched == {}  # unknown XIDs are warnings: nothing latches for them
    newest = 1000 + 3 * MAX_RECENT - 1
    assert (newest % 8, newest) in ledger.recent


def test_repeated_application_xids_are_counted_in_bounded_slices() -> None:
    ledger = EventLedger()
    events = [xid(3, 13, T0 + i * 0.1) for i in range(5000)]  # 500 s of them
    ledger.record(events, events[-1].at, KEEP)
    tally = ledger.recent[(3, 13)]
    assert tally.count == 5000 and tally.buckets is not None and len(tally.buckets) <= BUCKETS + 1
    [f] = check_events(ledger, events[-1].at, T)
    assert (f.check, f.severity, f.action) == ("xid_repeated", Severity.CRITICAL, Action.DRAIN)
    assert f.message.startswith("XID 13 x5000 within 600 s")
    # 700 s later the early slices are out of the window (and 800 s later all of them).
    assert tally.within(events[-1].at + 300, T.app_xid_window_s) < 5000
    assert check_events(ledger, events[-1].at + 800, T) == []


def test_single_bit_ecc_events_are_counted_never_a_finding() -> None:
    ledger = EventLedger()
    new = ledger.record([GpuEvent(1, "ecc_single_bit", at=T0 + i) for i in range(100)], T0 + 100, KEEP)
    assert len(new) == 1 and ledger.recent[(1, None)].count == 100
    assert check_events(ledger, T0 + 100, T) == []


# --- supersession -----------------------------------------------------------------------------------------------
def test_the_supersession_table() -> None:
    assert {95: frozenset({94}), 64: frozenset({63})} == SUPERSEDES
    assert frozenset({79}) == SUPERSEDES_ALL
    assert {45: (frozenset({13, 31, 43}), 10.0)} == CONSEQUENCE_OF
    for later, earlier in SUPERSEDES.items():  # a worse XID replaces a lesser one: never the other way round
        assert all(XID_TABLE[later].severity >= XID_TABLE[x].severity for x in earlier)
    assert set(CONSEQUENCE_OF) <= APPLICATION_XIDS


@pytest.mark.parametrize(
    ("xids", "cancelled"),
    [
        ({94, 95}, {94}),
        ({63, 64}, {63}),
        ({79, 13, 48, 94}, {13, 48, 94}),
        ({94, 48}, set()),
        ({13, 45}, set()),
        ({95}, set()),
        (set(), set()),
    ],
)
def test_superseded(xids: set[int], cancelled: set[int]) -> None:
    assert superseded(xids) == cancelled
    assert superseded(sorted(xids, reverse=True)) == cancelled  # the order does not matter


def test_cause_of() -> None:
    assert cause_of(45, T0 + 3, {13: T0, 31: T0 + 2}) == 31  # the latest cause
    assert cause_of(45, T0 + 11, {13: T0}) is None  # too late: a fault of its own
    assert cause_of(45, T0, {}) is None
    assert cause_of(13, T0, {13: T0}) is None  # not a consequence of anything


@pytest.mark.parametrize(("lesser", "worse"), [(94, 95), (63, 64)])
def test_a_worse_xid_cancels_the_lesser_one_on_the_same_gpu(lesser: int, worse: int) -> None:
    assert findings([xid(1, lesser, T0), xid(1, worse, T0 + 1)]) == [(1, worse)]
    assert findings([xid(1, worse, T0), xid(1, lesser, T0 + 1)]) == [(1, worse)]  # the lesser one after: moot
    # On another GPU it stays.
    assert findings([xid(1, lesser, T0), xid(2, worse, T0 + 1)]) == [(1, lesser), (2, worse)]


def test_xid_94_then_95_is_one_finding_in_the_verdict() -> None:
    ledger = EventLedger()
    ledger.record([xid(0, 94, T0), xid(0, 94, T0 + 0.1), xid(0, 95, T0 + 0.2)], T0 + 1, KEEP)
    v = evaluate([sample(0)], {}, ledger, T0 + 1, T)
    assert [(f.xid, f.severity) for f in v.findings] == [(95, Severity.CRITICAL)]
    assert v.state == HealthState.UNHEALTHY and v.action == Action.RESET_GPU


def test_a_gpu_off_the_bus_supersedes_everything_else_on_it() -> None:
    events = [xid(5, 13, T0), xid(5, 48, T0 + 1), xid(5, 94, T0 + 2), xid(5, 79, T0 + 3), xid(4, 13, T0 + 3)]
    assert findings(events) == [(4, 13), (5, 79)]
    # The GPU's own reading (lost) stays a finding of its own beside the XID.
    ledger = EventLedger()
    ledger.record(events, T0 + 3, KEEP)
    v = evaluate([sample(4), sample(5, lost=True)], {}, ledger, T0 + 3, T)
    assert sorted((f.gpu, f.check, f.xid) for f in v.findings) == [
        (4, "xid", 13),
        (5, "gpu_lost", None),
        (5, "xid", 79),
    ]


def test_preemptive_cleanup_after_an_application_fault_is_the_same_fault() -> None:
    """13 then 45, 45: once the job's fault, not three application XIDs (which would drain the node)."""
    ledger = EventLedger()
    ledger.record([xid(2, 13, T0), xid(2, 45, T0 + 0.5), xid(2, 45, T0 + 1)], T0 + 1, KEEP)
    [f] = check_events(ledger, T0 + 1, T)
    assert (f.check, f.severity, f.xid) == ("xid", Severity.INFO, 13)
    assert f.message.startswith("XID 13 x1: ") and f.message.endswith("(+XID 45 x2 in the same fault)")
    assert (2, 45) not in ledger.recent


def test_preemptive_cleanup_long_after_is_an_xid_of_its_own() -> None:
    ledger = EventLedger()
    ledger.record([xid(2, 13, T0), xid(2, 45, T0 + 30), xid(2, 13, T0 + 31)], T0 + 31, KEEP)
    [f] = check_events(ledger, T0 + 31, T)
    assert f.check == "xid_repeated" and "13 x2" in f.message and "45 x1" in f.message


def test_a_reset_forgets_what_a_consequence_was_folded_into() -> None:
    ledger = EventLedger()
    ledger.record([xid(0, 31, T0), GpuEvent(0, "reset", at=T0 + 1), xid(0, 45, T0 + 2)], T0 + 2, KEEP)
    assert [(f.xid, f.message.split(":")[0]) for f in check_events(ledger, T0 + 2, T)] == [(45, "XID 45 x1")]


# --- the agent: one log line, no report per sweep ---------------------------------------------------------------
def test_stable_reason_drops_only_the_counts() -> None:
    assert (
        stable_reason("GPU0 xid: XID 95 x812 in 3.2 s: Uncontained (+1 more)")
        == "GPU0 xid: XID 95: Uncontained (+1 more)"
    )
    assert stable_reason("GPU6 xid_repeated: XID 31 x3 within 600 s: page fault") == (
        "GPU6 xid_repeated: XID 31 within 600 s: page fault"
    )
    assert stable_reason("GPU1 temperature: 91 C at or above 89 C") == "GPU1 temperature: 91 C at or above 89 C"


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def test_an_agent_in_a_storm_logs_one_line_and_reports_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    FakeGpus.create(tmp_path, "node1", 2)
    config = AgentConfig(node="node1", backend="fake", fake_dir=tmp_path, metrics={"port": 0}, slurm={"enabled": False})
    reports: list[AgentReport] = []
    clock = Clock()
    agent = Agent(config, FakeBackend(tmp_path), poster=reports.append, clock=clock)
    agent.sweep()
    caplog.set_level(logging.INFO, logger="ha_ops.health.agent")
    for batch in range(20):  # within the heartbeat (10 s)
        clock.now = T0 + batch * 0.4
        agent.sweep([xid(1, 95, clock.now + i / 2000) for i in range(500)])
    assert [r.state for r in reports] == [HealthState.HEALTHY, HealthState.UNHEALTHY]  # no report per sweep
    assert len([r for r in caplog.records if r.getMessage().startswith("event:")]) == 1
    assert agent.verdict is not None and agent.verdict.reason.startswith("GPU1 xid: XID 95 x10000 in 7.8 s")
    assert agent.collector.stats.events[(1, "xid", 95)] == 10_000  # the metric still counts every event
