"""The safety gate in front of every cordon: pure functions over the controller's state.

A cordon is refused when the circuit breaker is open or would trip, when it would leave a pool below its minimum
healthy share, or for an opted-out node; it is deferred (tried again on the next tick) when the rate limit is
reached. A monitoring glitch that makes every node look broken therefore takes out at most the breaker's limit.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from ha_ops.remediation.config import Safety
from ha_ops.remediation.model import OUT_OF_SERVICE, ControllerState, NodeRecord


@dataclass(frozen=True)
class GateResult:
    outcome: Literal["allow", "defer", "refuse"]
    why: str = ""
    trips_breaker: bool = False


def prune(state: ControllerState, safety: Safety, now: float) -> None:
    state.breaker.cordons = [(t, n) for t, n in state.breaker.cordons if now - t < safety.breaker_window_s]


def pool_counts(state: ControllerState, pool: str) -> tuple[int, int]:
    """(size, in service) of a pool in one pass over the nodes: its size counts the nodes meant to be in service (its
    spares excluded); in service, those in its main partition (spares standing in included) not taken out and not in
    a maintenance window (a rollout has them drained)."""
    size = serving = 0
    for r in state.nodes.values():
        if r.pool == pool:
            size += not r.spare
            serving += r.in_main and r.phase not in OUT_OF_SERVICE and r.maintenance is None
    return size, serving


def pool_size(state: ControllerState, pool: str) -> int:
    return pool_counts(state, pool)[0]


def in_service(state: ControllerState, pool: str) -> int:
    return pool_counts(state, pool)[1]


def breaker_limit(state: ControllerState, pool: str, safety: Safety, size: int | None = None) -> int:
    size = pool_size(state, pool) if size is None else size
    by_fraction = max(1, math.floor(safety.breaker_max_fraction * size + 1e-9))
    return min(safety.breaker_max_nodes, by_fraction)


def gate_cordon(
    state: ControllerState, record: NodeRecord, safety: Safety, now: float, free_spares: Callable[[], int]
) -> GateResult:
    """`free_spares` is called only when capacity matters (it scans the pool)."""
    if record.opt_out or record.name in safety.opt_out:
        return GateResult("refuse", f"{record.name} has opted out of remediation")
    prune(state, safety, now)
    if state.breaker.open:
        return GateResult("refuse", f"circuit breaker open: {state.breaker.reason}")
    size, serving = pool_counts(state, record.pool)
    limit = breaker_limit(state, record.pool, safety, size)
    nodes = {n for _, n in state.breaker.cordons}
    recent = len(nodes)
    # A node cordoned again (a flap) is not another node: the ladder, not the breaker, handles it.
    if record.name not in nodes and recent >= limit:
        why = (
            f"{recent} node(s) cordoned within {safety.breaker_window_s:g} s reaches the limit of {limit} "
            f"(breaker_max_nodes {safety.breaker_max_nodes}, breaker_max_fraction {safety.breaker_max_fraction:g} of "
            f"pool {record.pool}); not cordoning {record.name}: a fault this widespread may be a monitoring fault"
        )
        return GateResult("refuse", why, trips_breaker=True)
    if record.in_main:
        after = serving - 1 + min(free_spares(), 1)
        minimum = math.ceil(safety.min_healthy_fraction * size - 1e-9)
        if after < minimum:
            return GateResult(
                "refuse",
                f"cordoning {record.name} would leave {after} of {size} nodes of pool {record.pool} in service, "
                f"below min_healthy_fraction {safety.min_healthy_fraction:g} ({minimum})",
            )
    in_last_minute = sum(1 for t, _ in state.breaker.cordons if now - t < 60)
    if in_last_minute >= safety.max_cordons_per_minute:
        return GateResult("defer", f"rate limit: {in_last_minute} cordons in the last minute")
    return GateResult("allow")


def summary(state: ControllerState, safety: Safety) -> dict[str, object]:
    """What a driver rollout reads before each wave (GET /v1/state's `safety`): the breaker, and each pool's size,
    nodes in service and minimum healthy count."""
    pools: dict[str, dict[str, int]] = {}
    for name in sorted({r.pool for r in state.nodes.values()}):
        size, serving = pool_counts(state, name)
        pools[name] = {"size": size, "in_service": serving,
                       "minimum": math.ceil(safety.min_healthy_fraction * size - 1e-9)}  # fmt: skip
    return {"breaker_open": state.breaker.open, "breaker_reason": state.breaker.reason, "pools": pools}
