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
from ha_ops.gpu.xid import APPLICATION_XIDS, describe
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


@dataclass
class EventLedger:
    """Recent GPU events, kept by the agent between sweeps. Pure data: findings are computed from it."""

    latched: dict[int, list[GpuEvent]] = field(default_factory=dict)  # critical XIDs until the GPU is reset
    recent: deque[GpuEvent] = field(default_factory=deque)  # every event, pruned by age

    def record(self, events: list[GpuEvent], now: float, keep_s: float) -> None:
        for event in events:
            if event.kind == "reset":
                self.latched.pop(event.gpu, None)
                self.recent = deque(e for e in self.recent if e.gpu != event.gpu)
                continue
            self.recent.append(event)
            if _event_severity(event) == Severity.CRITICAL:
                latched = self.latched.setdefault(event.gpu, [])
                # One entry per XID: an XID storm on a drained GPU must not grow this until someone resets it.
                if all(_event_xid(e) != _event_xid(event) for e in latched):
                    latched.append(event)
        while self.recent and now - self.recent[0].at > keep_s:
            self.recent.popleft()


def _event_xid(event: GpuEvent) -> int | None:
    if event.kind == "ecc_double_bit":
        return 48
    return event.xid


def _event_severity(event: GpuEvent) -> Severity:
    if event.kind == "ecc_single_bit":
        return Severity.INFO
    xid = _event_xid(event)
    return describe(xid).severity if xid is not None else Severity.INFO


def check_events(ledger: EventLedger, now: float, t: Thresholds, uuids: dict[int, str] | None = None) -> list[Finding]:
    uuids = uuids or {}
    out: list[Finding] = []
    for gpu, events in sorted(ledger.latched.items()):
        seen: set[int] = set()
        for event in events:
            xid = _event_xid(event)
            if xid is None or xid in seen:
                continue
            seen.add(xid)
            info = describe(xid)
            out.append(
                Finding("xid", info.severity, info.action, f"XID {xid}: {info.meaning}", gpu, uuids.get(gpu), xid)
            )
    app: dict[int, list[int]] = {}
    warned: set[tuple[int, int]] = set()
    for event in ledger.recent:
        xid = _event_xid(event)
        if xid is None:
            continue
        info = describe(xid)
        age = now - event.at
        if xid in APPLICATION_XIDS and age <= t.app_xid_window_s:
            app.setdefault(event.gpu, []).append(xid)
        elif info.severity == Severity.WARNING and age <= t.warning_xid_hold_s and (event.gpu, xid) not in warned:
            warned.add((event.gpu, xid))
            out.append(
                Finding(
                    "xid",
                    Severity.WARNING,
                    info.action,
                    f"XID {xid}: {info.meaning}",
                    event.gpu,
                    uuids.get(event.gpu),
                    xid,
                )
            )
    # Application XIDs count together per GPU: one is the job's fault, repeats point at the GPU.
    for gpu, xids in sorted(app.items()):
        last, kinds = xids[-1], sorted(set(xids))
        if len(kinds) == 1:
            what = f"XID {last} x{len(xids)}"
        else:
            what = "application XIDs " + ", ".join(f"{x} x{xids.count(x)}" for x in kinds)
        if len(xids) >= t.app_xid_repeats:
            message = f"{what} within {t.app_xid_window_s:g} s: {describe(last).meaning}"
            out.append(Finding("xid_repeated", Severity.CRITICAL, Action.DRAIN, message, gpu, uuids.get(gpu), last))
        else:
            message = f"{what}: {describe(last).meaning}"
            out.append(Finding("xid", Severity.INFO, Action.NONE, message, gpu, uuids.get(gpu), last))
    return out


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
