"""The checkpoint interval that minimises lost time, from the MTBF M and the checkpoint cost d (both seconds).

Young (1974), "A first order approximation to the optimum checkpoint interval", CACM 17(9):
    tau = sqrt(2 d M)
Daly (2006), "A higher order estimate of the optimum checkpoint interval for restart dumps", FGCS 22(3), eq. 37:
    tau = sqrt(2 d M) * (1 + (1/3) sqrt(d / (2M)) + (1/9) (d / (2M))) - d     for d < 2M
    tau = M                                                                    for d >= 2M
tau is the compute time between the ends of two checkpoints' writes (the write itself not included). Young's is
the first-order term; Daly's adds the higher-order terms, which matter once d is no longer small against M, and
subtracts the write. Example: M = 3.1 h, d = 30 s -> Young 13.6 min, Daly 13.3 min.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


def _check(mtbf_s: float, cost_s: float) -> None:
    if not (mtbf_s > 0 and math.isfinite(mtbf_s)):
        raise ValueError(f"the MTBF must be a positive number of seconds, not {mtbf_s}")
    if not (cost_s > 0 and math.isfinite(cost_s)):
        raise ValueError(f"the checkpoint cost must be a positive number of seconds, not {cost_s}")


def young_interval(mtbf_s: float, cost_s: float) -> float:
    """Young (1974): sqrt(2 d M)."""
    _check(mtbf_s, cost_s)
    return math.sqrt(2.0 * cost_s * mtbf_s)


def daly_interval(mtbf_s: float, cost_s: float) -> float:
    """Daly (2006), eq. 37; M itself once the cost reaches 2M (checkpointing cannot pay for itself there)."""
    _check(mtbf_s, cost_s)
    if cost_s >= 2.0 * mtbf_s:
        return mtbf_s
    x = cost_s / (2.0 * mtbf_s)
    return math.sqrt(2.0 * cost_s * mtbf_s) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - cost_s


@dataclass(frozen=True)
class CheckpointPlan:
    mtbf_s: float
    cost_s: float
    young_s: float
    daly_s: float


def plan_checkpoints(mtbf_s: float, cost_s: float) -> CheckpointPlan:
    return CheckpointPlan(mtbf_s, cost_s, young_interval(mtbf_s, cost_s), daly_interval(mtbf_s, cost_s))
