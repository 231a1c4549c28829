"""XID error codes: what each means and what to do. Sources: NVIDIA's Xid catalog and GPU debug guidelines.

Application XIDs (13, 31, 43, 45, 68) are usually the job's fault: one alone never drains a node; repeats on the
same GPU within a window escalate (see ha_ops.health.checks).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from ha_ops.health.model import Action, Severity


@dataclass(frozen=True)
class XidInfo:
    xid: int
    meaning: str
    action: Action
    severity: Severity
    application: bool = False


_TABLE = [
    XidInfo(13, "Graphics engine exception (usually the application)", Action.NONE, Severity.INFO, True),
    XidInfo(
        31, "GPU memory page fault (usually an illegal address in the application)", Action.NONE, Severity.INFO, True
    ),
    XidInfo(43, "GPU stopped processing (the application hit a fault)", Action.NONE, Severity.INFO, True),
    XidInfo(45, "Preemptive cleanup after a previous error (channel torn down)", Action.NONE, Severity.INFO, True),
    XidInfo(48, "Double-bit (uncorrectable) ECC error", Action.RESET_GPU, Severity.CRITICAL),
    XidInfo(61, "Internal micro-controller breakpoint/warning", Action.RESET_GPU, Severity.CRITICAL),
    XidInfo(62, "Internal micro-controller halt", Action.RESET_GPU, Severity.CRITICAL),
    XidInfo(
        63,
        "ECC page retirement or row remapping recorded; takes effect at the next GPU reset",
        Action.WATCH,
        Severity.WARNING,
    ),
    XidInfo(64, "ECC page retirement or row remapping failed", Action.RESET_GPU, Severity.CRITICAL),
    XidInfo(68, "Video decoder (NVDEC) exception (usually the application)", Action.NONE, Severity.INFO, True),
    XidInfo(69, "Graphics engine class error", Action.RESET_GPU, Severity.CRITICAL),
    XidInfo(74, "NVLink error", Action.RESET_GPU, Severity.CRITICAL),
    XidInfo(79, "GPU has fallen off the bus", Action.REBOOT_NODE, Severity.CRITICAL),
    XidInfo(92, "High single-bit ECC error rate", Action.WATCH, Severity.WARNING),
    XidInfo(
        94,
        "Contained uncorrectable ECC error: the application was stopped, the GPU can continue",
        Action.WATCH,
        Severity.WARNING,
    ),
    XidInfo(
        95,
        "Uncontained uncorrectable ECC error: every application on the GPU is affected",
        Action.RESET_GPU,
        Severity.CRITICAL,
    ),
    XidInfo(119, "GSP RPC timeout (GPU System Processor not responding)", Action.RESET_GPU, Severity.CRITICAL),
    XidInfo(120, "GSP error (GPU System Processor fault)", Action.RESET_GPU, Severity.CRITICAL),
    # 136 is listed as reserved in older driver tables; newer drivers report a hardware fault with it. Treated
    # as needing a GPU reset until the recovery-action field (154) says otherwise.
    XidInfo(
        136, "Hardware fault reported by newer drivers (reserved in older tables)", Action.RESET_GPU, Severity.CRITICAL
    ),
    XidInfo(
        140,
        "Unrecovered ECC error: uncorrectable memory errors could not be offlined or remapped",
        Action.RESET_GPU,
        Severity.CRITICAL,
    ),
    XidInfo(
        154,
        "GPU recovery action changed: read the NVML recovery-action field for what to do",
        Action.WATCH,
        Severity.WARNING,
    ),
]

XID_TABLE: dict[int, XidInfo] = {info.xid: info for info in _TABLE}
APPLICATION_XIDS = frozenset(info.xid for info in _TABLE if info.application)


def describe(xid: int) -> XidInfo:
    """Known XIDs from the table; an unknown XID is a warning to watch, never a drain on its own."""
    return XID_TABLE.get(xid) or XidInfo(xid, f"XID {xid} (not in ha-ops' table)", Action.WATCH, Severity.WARNING)


# --- supersession: which XID cancels which (data; the logic is `superseded` and `cause_of` below) ----------------
# From NVIDIA's Xid catalog (https://docs.nvidia.com/deploy/xid-errors/, "Xid catalog" and "Xid triage"): an
# uncontained ECC error (95) is the worse outcome of the same fault a contained one (94) reports; a failed row remap
# (64) is the end of the remap a pending one (63) announced; a GPU off the bus (79) makes every other report of it
# moot; and 45 is the driver tearing down the channels of a fault it already reported (13, 31, 43): "preemptive
# cleanup, due to previous errors".
SUPERSEDES: dict[int, frozenset[int]] = {
    95: frozenset({94}),
    64: frozenset({63}),
}
SUPERSEDES_ALL = frozenset({79})  # supersede every other XID of the GPU
# XID -> (the XIDs it follows, seconds): one that follows one of those on the same GPU within the seconds is part of
# that fault (counted with it, never a new fault or a repeat of its own).
CONSEQUENCE_OF: dict[int, tuple[frozenset[int], float]] = {
    45: (frozenset({13, 31, 43}), 10.0),
}


def superseded(xids: Collection[int]) -> set[int]:
    """Of the XIDs one GPU reports, those another of them cancels (94 when there is a 95; all but 79 with a 79).
    Order does not matter: while both are held, the worse one names the fault."""
    present = set(xids)
    out: set[int] = set()
    for xid in present:
        if xid in SUPERSEDES_ALL:
            out |= present - {xid}
        else:
            out |= SUPERSEDES.get(xid, frozenset()) & present
    return out


def cause_of(xid: int, at: float, last_seen: Mapping[int, float]) -> int | None:
    """The XID whose consequence `xid` (seen at `at`) is, given when each XID was last seen on the same GPU: 45 within
    10 s of a 13, 31 or 43. None: a fault of its own."""
    rule = CONSEQUENCE_OF.get(xid)
    if rule is None:
        return None
    causes, within_s = rule
    best: int | None = None
    for cause in causes:
        seen = last_seen.get(cause)
        if seen is not None and abs(at - seen) <= within_s and (best is None or seen > last_seen[best]):
            best = cause
    return best
