"""The checkpoint interval: the figure `ha-ops plan checkpoint` prints (Daly 2006), and the pure `due` rule."""

from __future__ import annotations

from ha_ops.checkpoint.errors import CheckpointError
from ha_ops.plan.checkpoint import daly_interval


def interval_from_plan(mtbf_s: float, cost_s: float) -> float:
    """Daly's interval in seconds for an MTBF and a checkpoint cost (seconds), as `ha-ops plan checkpoint` prints.

    It is compute time between the end of one checkpoint's write and the start of the next. M = 3.1 h, d = 30 s
    gives 798.4 s (13.3 min).
    """
    try:
        return daly_interval(mtbf_s, cost_s)
    except ValueError as e:
        raise CheckpointError(f"checkpoint interval: {e}") from e


def is_due(last_end: float, now: float, interval_s: float | None) -> bool:
    """Whether `interval_s` has passed since the end of the last save (monotonic seconds). No interval: never."""
    return interval_s is not None and now - last_end >= interval_s
