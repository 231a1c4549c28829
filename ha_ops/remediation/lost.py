"""Which nodes are lost at this poll: the observers' rules (observers.py) applied to the leader's state and views.

A node is lost when its scheduler finds it DOWN or not responding and its agent is silent to every controller, the
silence counted from when the leader's view of the fleet last became whole (never from before), unless its failure
domain is silent with it or more nodes are found lost at once than the breaker allows. Pure: no I/O.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from ha_ops.remediation import observers
from ha_ops.remediation.config import ControllerConfig
from ha_ops.remediation.model import ControllerState, NodeRecord
from ha_ops.remediation.observers import NodeView
from ha_ops.remediation.safety import breaker_limit


@dataclass(frozen=True)
class Verdict:
    """Lost nodes at this poll, and what to note (the suspects held back and why are in `state.contact.held`)."""

    lost: frozenset[str] = frozenset()
    notes: tuple[str, ...] = ()  # changes of judgement, for the log


def node_lost(slurm_state: str, agent_silent: bool) -> bool:
    """Slurm's DOWN (`down`, `down*`, ...) or not responding (`idle*`, ...), and the node's agent silent too: a lost
    node. Two observers, because a busy slurmd can miss a ping and a Slurm primary cut off from the network finds
    every node not responding; an agent that still reports through either controller keeps its node."""
    return not observers.responding(slurm_state) and bool(slurm_state) and agent_silent


def _heard_at(rec: NodeRecord, view: NodeView) -> float:
    return max(rec.last_report.at if rec.last_report else 0.0, view.heard_at)


def judge(state: ControllerState, views: dict[str, NodeView], config: ControllerConfig, now: float) -> Verdict:
    """The lost nodes among those with a fresh scheduler state in `views` (none without a fresh poll)."""
    polled = {n: v for n, v in views.items() if v.state and n in state.nodes}
    if not polled:
        return Verdict()
    expected = {
        n: v
        for n, v in polled.items()
        if not state.nodes[n].phase.out_of_service and state.nodes[n].maintenance is None
    }
    # Each node's last word and whether its scheduler reaches it, once: at 25,000 nodes this runs at every poll, under
    # the term's lock (issue 43).
    heard_at = {n: _heard_at(state.nodes[n], v) for n, v in polled.items()}
    down = [n for n, v in polled.items() if not observers.responding(v.state)]
    contact = state.contact
    heard_count, answering, total = observers.observe(
        contact,
        (observers.Observation(n, v.state, heard_at[n]) for n, v in expected.items()),
        now,
        polled_at=max(v.polled_at for v in polled.values()),
        window_s=config.blind_after_s,
        quorum=config.observer_quorum,
        # A read that failed (a slurmctld cut off or hung costs slurm_timeout_s) leaves a gap of over this.
        poll_gap_s=2 * config.node_states_poll_s + config.slurm_timeout_s,
    )
    sound_since = contact.sound_since(state.leading_since)
    why = observers.describe(observers.Judgement(sound_since, heard_count, answering, total), now)
    notes = [why] if contact.sound != (sound_since is not None) else []
    contact.sound = sound_since is not None
    lost: set[str] = set()
    held: dict[str, str] = {}
    if sound_since is not None:
        suspects = [n for n in down
                    if _silent_and_down(state.nodes[n], polled[n], heard_at[n], sound_since, config, now)]  # fmt: skip
        heard_now = {n: now - heard_at[n] <= config.blind_after_s for n in expected}
        domain_of = {node: domain for domain, members in config.failure_domains.items() for node in members}
        for name in suspects:
            reason = observers.domain_silent(name, domain_of, config.failure_domains, heard_now, config.observer_quorum)
            if reason is not None:
                held[name] = reason
        # A mass verdict counts every node on its way to being found lost, not only those that cross the silence in
        # this very poll: the agents' heartbeats are spread over seconds, so the nodes a partition silenced together
        # cross agent_silence_s one poll apart. On its way: in service, down, and silent past blind_after_s.
        by_pool: dict[str, list[str]] = defaultdict(list)
        for name in down:
            if name in expected and name not in held and not heard_now[name]:
                by_pool[state.nodes[name].pool].append(name)
        limits = {pool: breaker_limit(state, pool, config.safety) for pool in by_pool}
        held |= {n: why for n, why in observers.mass_verdict(by_pool, limits).items() if n in suspects}
        lost = {n for n in suspects if n not in held}
    if held != contact.held:  # (noted when it changes, not at every poll)
        notes += [f"{node} is silent and down but not found lost: {reason}" for node, reason in held.items()]
        contact.held = held
    return Verdict(lost=frozenset(lost), notes=tuple(notes))


def _silent_and_down(rec: NodeRecord, view: NodeView, heard_at: float, sound_since: float, config: ControllerConfig,
                     now: float) -> bool:  # fmt: skip
    # Silence is what this leader observed with a whole view: from when it began to lead, and from when its contact
    # with the fleet came back, never from before.
    heard = max(heard_at, sound_since)
    return rec.maintenance is None and node_lost(view.state, now - heard > config.agent_silence_s)
