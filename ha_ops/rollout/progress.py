"""How far a rollout is and when it should end (pure: its state and the clock in, figures out): the time since it
first ran, the nodes settled of all, and an ETA from the nodes changed so far.

The ETA assumes what the plan does: batches one after another, each taking its nodes out max_unavailable at a time,
each node as long as the changed nodes took on average (taken out to back in service), and a soak between waves. It
is None until a node has been changed (no rate yet), and overestimates where pending nodes turn out to be skipped
(already on the target), which takes no time."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ha_ops.plan.durations import format_duration
from ha_ops.rollout.state import TERMINAL_STEPS, NodeStep, RolloutState


@dataclass(frozen=True)
class Progress:
    settled: int  # nodes in a final step (done, skipped, failed, rolled back)
    total: int
    elapsed_s: float | None  # since it first ran; None before
    node_s: float | None  # the mean time a changed node took, from those done
    eta_s: float | None  # the time left; None until a node is done


def progress(state: RolloutState, now: float) -> Progress:
    nodes = state.nodes.values()
    settled = sum(1 for n in nodes if n.step in TERMINAL_STEPS)
    took = [n.updated_at - n.began_at for n in nodes if n.step == NodeStep.DONE and n.began_at > 0]
    node_s = sum(took) / len(took) if took else None
    elapsed = now - state.started_at if state.started_at > 0 else None
    eta = _left(state, now, node_s) if node_s is not None else None
    return Progress(settled, len(state.nodes), elapsed, node_s, eta)


def _left(state: RolloutState, now: float, node_s: float) -> float:
    at_once = max(1, state.max_unavailable)
    left = 0.0
    for i, wave in enumerate(state.waves):
        if wave.status == "done":
            continue
        for batch in wave.batches:
            unsettled = sum(1 for name in batch if state.nodes[name].step not in TERMINAL_STEPS)
            left += math.ceil(unsettled / at_once) * node_s
        last = i == len(state.waves) - 1
        if wave.status == "soaking" and wave.soak_until is not None:
            left += max(0.0, wave.soak_until - now)
        elif not last:
            left += state.policy.soak_s
    return left


def describe(p: Progress) -> str:
    """'14/64 nodes settled, 12.1 min in, ETA 38.2 min' (the ETA once a node is done)."""
    parts = [f"{p.settled}/{p.total} nodes settled"]
    if p.elapsed_s is not None:
        parts.append(f"{format_duration(p.elapsed_s)} in")
    if p.eta_s is not None:
        parts.append(f"ETA {format_duration(p.eta_s)}" if p.settled < p.total else "ETA now")
    return ", ".join(parts)
