"""Health checks: pure functions from readings (current, previous) and recent events to findings.

The rules, in short (defaults in thresholds.py):
- a GPU that no longer answers (lost) is critical: reboot the node;
- temperature >= the GPU's shutdown threshold is critical; >= its slowdown threshold is a warning;
- volatile uncorrectable ECC errors (> 0 since the last reset) are critical: reset the GPU;
- a row-remap failure is critical (replace); a pending remap is a warning (reset when convenient);
- the NVML recovery-action field (driver >= R570) is taken as the GPU's own instruction;
- PCIe width below its maximum, PCIe replay / correctable ECC / NVLink error *rates* above thresholds, and hardware
  or thermal clock-event reasons are warnings (idle, application-clock and power-cap reasons are normal);
- XIDs by the table in ha_ops.gpu.xid; critical XIDs latch until the GPU is reset; one application XID is
  informational and repeats on the same GPU within a window drain the node.
Readings that are not supported are skipped; readings that could not be read make the GPU "unknown".
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field

from ha_ops.gpu.types import (
    CLOCK_EVENT_HW_POWER_BRAKE,
    CLOCK_EVENT_HW_SLOWDOWN,
    CLOCK_EVENT_HW_THERMAL,
    CLOCK_EVENT_SW_THERMAL,
    RECOVERY_BUS_RESET,
    RECOVERY_DRAIN_AND_RESET,
    RECOVERY_DRAIN_P2P,
    RECOVERY_GPU_RESET,
    RECOVERY_IMEX_DOMAIN,
    RECOVERY_NODE_REBOOT,
    RECOVERY_SYSTEM_REBOOT,
    GpuEvent,
    GpuSample,
    Unreadable,
    known,
)
from ha_ops.gpu.xid import APPLICATION_XIDS, CONSEQUENCE_OF, XID_TABLE, cause_of, describe, superseded
from ha_ops.health.model import Action, Finding, HealthState, Severity, Verdict
from ha_ops.health.thresholds import Thresholds

# Readings without which a GPU's health cannot be judged: if one is unreadable the GPU is "unknown".
ESSENTIAL = ("temperature_gpu_c", "ecc_volatile_uncorrected", "remapped_rows_failure")

_BAD_CLOCK_REASONS = {
    CLOCK_EVENT_HW_SLOWDOWN: "hardware slowdown",
    CLOCK_EVENT_SW_THERMAL: "software thermal slowdown",
    CLOCK_EVENT_HW_THERMAL: "hardware thermal slowdown",
    CLOCK_EVENT_HW_POWER_BRAKE: "hardware power brake",
}
_RECOVERY = {
    RECOVERY_GPU_RESET: (Action.RESET_GPU, "the driver asks for a GPU reset"),
    RECOVERY_NODE_REBOOT: (Action.REBOOT_NODE, "the driver asks for a node reboot"),
    RECOVERY_DRAIN_P2P: (Action.DRAIN, "the driver asks to drain peer-to-peer work"),
    RECOVERY_DRAIN_AND_RESET: (Action.RESET_GPU, "the driver asks to drain and reset the GPU"),
    RECOVERY_IMEX_DOMAIN: (Action.DRAIN, "the driver asks to recover the IMEX domain"),
    RECOVERY_BUS_RESET: (Action.RESET_GPU, "the driver asks for a bus reset"),
    RECOVERY_SYSTEM_REBOOT: (Action.REBOOT_NODE, "the driver asks for a system reboot"),
}


def _uuid(sample: GpuSample) -> str | None:
    return sample.uuid if isinstance(sample.uuid, str) else None


def _finding(sample: GpuSample, check: str, severity: Severity, action: Action, message: str, xid: int | None = None):
    return Finding(check, severity, action, message, gpu=sample.index, uuid=_uuid(sample), xid=xid)


def _rate(current: object, previous: object, seconds: float, per: float) -> float | None:
    if not (known(current) and known(previous)) or seconds <= 0:
        return None
    delta = float(current) - float(previous)  # type: ignore[arg-type]
    return max(0.0, delta) / seconds * per


def check_sample(sample: GpuSample, previous: GpuSample | None, t: Thresholds) -> list[Finding]:
    """Findings from one GPU's readings (and the previous readings, for rates)."""
    if sample.lost:
        return [
            _finding(
                sample, "gpu_lost", Severity.CRITICAL, Action.REBOOT_NODE, "GPU is not answering (fallen off the bus)"
            )
        ]
    out: list[Finding] = []

    temp = sample.temperature_gpu_c
    if known(temp):
        shutdown = sample.temperature_shutdown_c if known(sample.temperature_shutdown_c) else t.temperature_shutdown_c
        slowdown = sample.temperature_slowdown_c if known(sample.temperature_slowdown_c) else t.temperature_slowdown_c
        if temp >= shutdown:
            out.append(
                _finding(
                    sample,
                    "temperature",
                    Severity.CRITICAL,
                    Action.DRAIN,
                    f"{temp:.0f} C at or above the shutdown threshold {shutdown:.0f} C",
                )
            )
        elif temp >= slowdown:
            out.append(
                _finding(
                    sample,
                    "temperature",
                    Severity.WARNING,
                    Action.WATCH,
                    f"{temp:.0f} C at or above the slowdown threshold {slowdown:.0f} C",
                )
            )

    dbe = sample.ecc_volatile_uncorrected
    if known(dbe) and dbe > 0:
        out.append(
            _finding(
                sample,
                "ecc_uncorrectable",
                Severity.CRITICAL,
                Action.RESET_GPU,
                f"{dbe} uncorrectable ECC error(s) since the last reset",
            )
        )

    if sample.remapped_rows_failure is True:
        out.append(
            _finding(
                sample,
                "row_remap_failure",
                Severity.CRITICAL,
                Action.REPLACE,
                "row remapping failed: memory can no longer be repaired",
            )
        )
    elif sample.remapped_rows_pending is True:
        out.append(
            _finding(
                sample,
                "row_remap_pending",
                Severity.WARNING,
                Action.RESET_GPU,
                "a row remap is pending; it takes effect at the next GPU reset",
            )
        )

    action = sample.recovery_action
    if known(action) and action in _RECOVERY:
        act, why = _RECOVERY[action]  # type: ignore[index]
        out.append(_finding(sample, "recovery_action", Severity.CRITICAL, act, f"recovery action {action}: {why}"))
    elif known(action) and action:
        # A value newer than this table: the driver wants something done; watch rather than guess.
        out.append(
            _finding(sample, "recovery_action", Severity.WARNING, Action.WATCH, f"unknown recovery action {action}")
        )

    width, width_max = sample.pcie_width_current, sample.pcie_width_max
    if known(width) and known(width_max) and width < width_max:  # type: ignore[operator]
        out.append(
            _finding(
                sample,
                "pcie_width",
                Severity.WARNING,
                Action.WATCH,
                f"PCIe link x{sample.pcie_width_current} of x{sample.pcie_width_max}",
            )
        )

    reasons = sample.clock_event_reasons
    if known(reasons):
        bad = [name for bit, name in _BAD_CLOCK_REASONS.items() if reasons & bit]  # type: ignore[operator]
        if bad:
            out.append(
                _finding(
                    sample,
                    "clock_events",
                    Severity.WARNING,
                    Action.WATCH,
                    f"clocks held back: {', '.join(bad)} (0x{reasons:x})",
                )
            )

    if previous is not None and not previous.lost:
        seconds = sample.read_at - previous.read_at
        replays = _rate(sample.pcie_replay_counter, previous.pcie_replay_counter, seconds, 60)
        if replays is not None and replays > t.pcie_replays_per_minute:
            out.append(
                _finding(
                    sample, "pcie_replays", Severity.WARNING, Action.WATCH, f"{replays:.0f} PCIe replays per minute"
                )
            )
        corrected = _rate(sample.ecc_volatile_corrected, previous.ecc_volatile_corrected, seconds, 3600)
        if corrected is not None and corrected > t.ecc_corrected_per_hour:
            out.append(
                _finding(
                    sample,
                    "ecc_correctable_rate",
                    Severity.WARNING,
                    Action.WATCH,
                    f"{corrected:.0f} correctable ECC errors per hour",
                )
            )
        if isinstance(sample.nvlink_errors, dict) and isinstance(previous.nvlink_errors, dict):
            now_total, before_total = sum(sample.nvlink_errors.values()), sum(previous.nvlink_errors.values())
            nvlink = _rate(now_total, before_total, seconds, 60)
            if nvlink is not None and nvlink > t.nvlink_errors_per_minute:
                out.append(
                    _finding(
                        sample,
                        "nvlink_errors",
                        Severity.WARNING,
                        Action.WATCH,
                        f"{nvlink:.0f} NVLink errors per minute",
                    )
                )
    return out


def unreadable_essentials(sample: GpuSample) -> list[str]:
    if sample.lost:
        return []
    return [f"GPU{sample.index} {name}" for name in ESSENTIAL if isinstance(getattr(sample, name), Unreadable)]


# Bounds of the ledger (memory: GPUs x distinct XIDs, plus these caps).
MAX_RECENT = 1024  # tallies of non-latched events (a flood of distinct unknown XIDs evicts the oldest)
MAX_DETAILS = 4  # distinct event details kept per tally, as a sample
MAX_DETAIL_CHARS = 200
BUCKETS = 64  # time buckets per application-XID tally over the keep time (counts within a window, bounded)

_SEVERITY = {xid: info.severity for xid, info in XID_TABLE.items()}


@dataclass(slots=True, eq=False)
class XidTally:
    """Every event of one XID on one GPU since the ledger last forgot it: one entry, however many events.

    For application XIDs, `buckets` keeps counts per slice of time ([start, count, last]) so that repeats within a
    window can be counted without one entry per event; an event counts while its slice's last event is within the
    window (up to one slice, keep_s / BUCKETS, longer than the window itself)."""

    gpu: int
    xid: int | None
    first: float
    last: float
    count: int = 1
    details: list[str] = field(default_factory=list)
    buckets: deque[list[float]] | None = None
    followers: dict[int, int] = field(default_factory=dict)  # consequences folded in (XID 45 after a 13) -> count

    def add_detail(self, detail: str) -> None:
        if detail and len(self.details) < MAX_DETAILS:
            detail = detail[:MAX_DETAIL_CHARS]
            if detail not in self.details:
                self.details.append(detail)

    def within(self, now: float, window_s: float) -> int:
        """Events of this tally within the window (application XIDs: by slices; others: all or none, by `last`)."""
        if self.buckets is None:
            return self.count if now - self.last <= window_s else 0
        return int(sum(b[1] for b in self.buckets if now - b[2] <= window_s))

    def describe(self, meaning: str) -> str:
        span = self.last - self.first
        what = f"XID {self.xid}" if self.count == 1 else f"XID {self.xid} x{self.count} in {span:.1f} s"
        return f"{what}: {meaning}{_followers(self.followers)}"


def _followers(followers: dict[int, int]) -> str:
    if not followers:
        return ""
    return " (+" + ", ".join(f"XID {x} x{n}" for x, n in sorted(followers.items())) + " in the same fault)"


@dataclass
class EventLedger:
    """Recent GPU events, kept by the agent between sweeps, deduplicated: one XidTally per (GPU, XID) with a count,
    first and last time and a few distinct details, whatever the number of events. O(1) per event; memory bounded
    by GPUs x distinct XIDs (latched: XIDs of the table only) plus MAX_RECENT. Pure data: findings are computed
    from it."""

    latched: dict[int, dict[int, XidTally]] = field(default_factory=dict)  # critical XIDs until the GPU is reset
    recent: dict[tuple[int, int | None], XidTally] = field(default_factory=dict)  # the rest, oldest first, by age

    def record(self, events: list[GpuEvent], now: float, keep_s: float) -> list[GpuEvent]:
        """Add events; returns those that were new to the ledger (the first of their GPU and XID), for the log."""
        new: list[GpuEvent] = []
        latched, recent = self.latched, self.recent
        slice_s = keep_s / BUCKETS
        for event in events:
            kind, gpu, at = event.kind, event.gpu, event.at
            if kind == "reset":
                self.forget(gpu)
                continue
            xid = 48 if kind == "ecc_double_bit" else event.xid
            severity = _SEVERITY.get(xid, Severity.WARNING) if xid is not None else Severity.INFO
            if severity == Severity.CRITICAL:
                per_gpu = latched.get(gpu)
                if per_gpu is None:
                    per_gpu = latched[gpu] = {}
                tally = per_gpu.get(xid)  # type: ignore[arg-type]
                if tally is None:
                    # One entry per XID: an XID storm on a drained GPU must not grow this until someone resets it.
                    per_gpu[xid] = tally = XidTally(gpu, xid, at, at)  # type: ignore[index]
                    new.append(event)
                else:
                    tally.count += 1
                    tally.last = max(tally.last, at)
                if event.detail and len(tally.details) < MAX_DETAILS:
                    tally.add_detail(event.detail)
                continue
            key = (gpu, xid)
            tally = recent.pop(key, None)  # (re-inserted last: `recent` stays ordered by the latest event)
            if tally is None and xid is not None and xid in CONSEQUENCE_OF:
                causes = CONSEQUENCE_OF[xid][0]
                seen = {c: recent[(gpu, c)].last for c in causes if (gpu, c) in recent}
                cause = cause_of(xid, at, seen)
                if cause is not None:
                    host = recent[(gpu, cause)]
                    host.followers[xid] = host.followers.get(xid, 0) + 1
                    continue
            if tally is None:
                tally = XidTally(gpu, xid, at, at)
                if xid in APPLICATION_XIDS:
                    tally.buckets = deque([[at, 1, at]], maxlen=BUCKETS + 1)
                if len(recent) >= MAX_RECENT:
                    del recent[next(iter(recent))]
                new.append(event)
            else:
                tally.count += 1
                tally.last = max(tally.last, at)
                buckets = tally.buckets
                if buckets is not None:
                    top = buckets[-1]
                    if at - top[0] < slice_s:
                        top[1] += 1
                        top[2] = max(top[2], at)
                    else:
                        buckets.append([at, 1, at])
            if event.detail and len(tally.details) < MAX_DETAILS:
                tally.add_detail(event.detail)
            recent[key] = tally
        # Forget what is older than keep_s (oldest first: stop at the first one still young).
        while recent:
            key = next(iter(recent))
            if now - recent[key].last <= keep_s:
                break
            del recent[key]
        return new

    def forget(self, gpu: int) -> None:
        """A reset of the GPU: its latched XIDs end, and its recent events are forgotten."""
        self.latched.pop(gpu, None)
        for key in [k for k in self.recent if k[0] == gpu]:
            del self.recent[key]


def check_events(ledger: EventLedger, now: float, t: Thresholds, uuids: dict[int, str] | None = None) -> list[Finding]:
    """Findings from the ledger: one per latched XID, one per held warning XID, one per GPU for its application XIDs
    (escalated when they repeat); then an XID that another one of the same GPU supersedes is dropped."""
    uuids = uuids or {}
    per_gpu: dict[int, list[Finding]] = {}
    for gpu, tallies in ledger.latched.items():
        for xid, tally in tallies.items():
            info = describe(xid)
            per_gpu.setdefault(gpu, []).append(
                Finding("xid", info.severity, info.action, tally.describe(info.meaning), gpu, uuids.get(gpu), xid)
            )
    app: dict[int, list[XidTally]] = {}
    for (gpu, xid), tally in ledger.recent.items():
        if xid is None:
            continue  # (single-bit ECC events: counted, never a finding of their own)
        if xid in APPLICATION_XIDS:
            if tally.within(now, t.app_xid_window_s):
                app.setdefault(gpu, []).append(tally)
            continue
        info = describe(xid)
        if info.severity == Severity.WARNING and now - tally.last <= t.warning_xid_hold_s:
            per_gpu.setdefault(gpu, []).append(
                Finding("xid", Severity.WARNING, info.action, tally.describe(info.meaning), gpu, uuids.get(gpu), xid)
            )
    # Application XIDs count together per GPU: one is the job's fault, repeats point at the GPU.
    for gpu, tallies in app.items():
        counts = {tl.xid: tl.within(now, t.app_xid_window_s) for tl in tallies}
        last = max(tallies, key=lambda tl: tl.last).xid
        assert last is not None
        total = sum(counts.values())
        followers: dict[int, int] = {}
        for tl in tallies:
            for x, n in tl.followers.items():
                followers[x] = followers.get(x, 0) + n
        if len(counts) == 1:
            what = f"XID {last} x{total}"
        else:
            what = "application XIDs " + ", ".join(f"{x} x{n}" for x, n in sorted(counts.items()))  # type: ignore[type-var]
        if total >= t.app_xid_repeats:
            message = f"{what} within {t.app_xid_window_s:g} s: {describe(last).meaning}{_followers(followers)}"
            finding = Finding("xid_repeated", Severity.CRITICAL, Action.DRAIN, message, gpu, uuids.get(gpu), last)
        else:
            message = f"{what}: {describe(last).meaning}{_followers(followers)}"
            finding = Finding("xid", Severity.INFO, Action.NONE, message, gpu, uuids.get(gpu), last)
        per_gpu.setdefault(gpu, []).append(finding)
    out: list[Finding] = []
    for gpu in sorted(per_gpu):
        findings = per_gpu[gpu]
        cancelled = superseded([f.xid for f in findings if f.xid is not None]) if len(findings) > 1 else set()
        out += [f for f in findings if f.xid not in cancelled]
    return out


def stable_reason(reason: str) -> str:
    """A verdict's reason without the event counts in it ("XID 95 x812 in 3.2 s" -> "XID 95"): a storm that only
    raises a count is no change to report."""
    return _COUNTS.sub("", reason)


_COUNTS = re.compile(r" x\d+(?: in \d+(?:\.\d+)? s)?")


def verdict(findings: list[Finding], unknown: list[str]) -> Verdict:
    """Critical -> unhealthy; warnings -> degraded; only unreadable readings -> unknown (never a drain)."""
    relevant = [f for f in findings if f.severity >= Severity.WARNING]
    action = max((f.action for f in relevant), key=lambda a: a.rank, default=Action.NONE)
    if any(f.severity == Severity.CRITICAL for f in findings):
        state = HealthState.UNHEALTHY
    elif relevant:
        state = HealthState.DEGRADED
    elif unknown:
        state = HealthState.UNKNOWN
    else:
        state = HealthState.HEALTHY
    return Verdict(state, action, tuple(findings), tuple(unknown))


def evaluate(
    samples: list[GpuSample],
    previous: dict[int, GpuSample],
    ledger: EventLedger,
    now: float,
    thresholds: Thresholds,
) -> Verdict:
    findings: list[Finding] = []
    unknown: list[str] = []
    for sample in samples:
        findings += check_sample(sample, previous.get(sample.index), thresholds)
        unknown += unreadable_essentials(sample)
    uuids = {s.index: s.uuid for s in samples if isinstance(s.uuid, str)}
    findings += check_events(ledger, now, thresholds, uuids)
    return verdict(findings, unknown)
