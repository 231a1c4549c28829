"""When the leader may trust silence: a partition of the control plane must never look like node faults.

A node is lost when two observers find it gone: its scheduler (Slurm's `down*`, Kubernetes' NotReady) and its agent,
silent to every controller. Two observers that share a cause are one observer. Slurm marks every node `down*` when
slurmd cannot reach any slurmctld, and every agent is silent when its reports reach no controller: both happen
when the controllers' own hosts are cut off, and neither says anything about the nodes. So before silence counts,
the leader checks that its own view of the fleet is whole (`Contact`):

- **The agents**: more than `quorum` of the nodes it expects to hear (in service, not in maintenance) were heard by
  some controller within `blind_after_s` (longer than an agent's heartbeat: every live agent is heard within it).
- **The scheduler**: in the latest poll, more than `quorum` of those nodes respond, and the poll came after no gap
  (a gap of more than `poll_gap_s` between polls is a scheduler the leader could not read: contact lost).

Each is whole *since* a time: when it last became whole. The view is sound since the later of the two (and of when
the leader began to lead). Silence counts from then, never from before: silence that began while the leader (or
Slurm's controllers) was cut off counts from when contact came back. So a leader back from its own partition finds
nothing lost for `agent_silence_s` after the mend: its settle window, longer than an agent's report interval.

Two more rules, for what a whole view can still get wrong:
- **A failure domain heard as a whole, or not at all.** A suspect whose failure domain's other nodes (those expected
  to report) are mostly silent too is not lost on its own: a silent domain is a partition of that domain (a leaf
  switch) or the domain's failure, never one node's (issue 46 acts on domains).
- **A mass verdict is the observer's partition.** More nodes found lost in one pool at once than the circuit
  breaker allows are not that many faults: none of them is acted on.

Everything here is pure: the policy (policy.on_tick) calls `judge` with what it read; the tracker's memory is the
leader's own (a new leader starts afresh, from when it began to lead).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class NodeView:
    """What Slurm says about a node right now (gathered by the controller before a tick)."""

    state: str = ""
    jobs: tuple[str, ...] = ()
    # The jobs on it at the read before: Slurm requeues a lost node's jobs in the moment it reports it down, so the
    # read that finds it down may already find them pending elsewhere, held for cred_expire (120 s) unless released.
    jobs_before: tuple[str, ...] = ()
    reason: str = ""  # Slurm's reason for a drained or down node
    heard_at: float = 0.0  # when any controller last heard the node's agent
    polled_at: float = 0.0  # when the poll that read `state` began


# A node with no view this tick (no fresh poll): one shared value, frozen, not one made per node per tick (at 25,000
# nodes, five ticks a second, that was 375,000 objects a second).
NO_VIEW = NodeView()


def responding(scheduler_state: str) -> bool:
    """The scheduler reaches the node: not DOWN (`down`, `down*`, ...) and not `*` (not responding)."""
    state = scheduler_state.lower()
    return bool(state) and not (state.startswith("down") or state.endswith("*"))


@dataclass
class Contact:
    """The leader's memory of its contact with the fleet: since when each observer has been whole (None: not now)."""

    agents_since: float | None = None
    scheduler_since: float | None = None
    last_poll_at: float | None = None
    # What was last noted (a note is written when it changes, not at every poll): whole or not, and held suspects.
    sound: bool | None = None
    held: dict[str, str] = field(default_factory=dict)

    def sound_since(self, leading_since: float) -> float | None:
        if self.agents_since is None or self.scheduler_since is None:
            return None
        return max(self.agents_since, self.scheduler_since, leading_since)

    def summary(self, leading_since: float) -> dict[str, object]:
        """For `controller status` and the metrics: whether the view is whole, since when, the suspects held."""
        return {"view_whole": bool(self.sound), "whole_since": self.sound_since(leading_since), "held": dict(self.held)}


@dataclass(frozen=True)
class Observation:
    """One node as the leader sees it at a poll."""

    name: str
    scheduler_state: str
    heard_at: float  # when any controller last heard its agent (or its last report arrived)


@dataclass(frozen=True)
class Judgement:
    """What silence may be trusted for, at this poll."""

    sound_since: float | None  # None: the leader's view is not whole; no node is lost on silence now
    heard: int  # expected nodes heard within the silence window
    responding: int  # expected nodes the scheduler reaches
    expected: int


def _whole(count: int, expected: int, quorum: float) -> bool:
    return expected > 0 and count > quorum * expected


def observe(
    contact: Contact,
    nodes: Iterable[Observation],
    now: float,
    polled_at: float,
    window_s: float,
    quorum: float,
    poll_gap_s: float,
) -> tuple[int, int, int]:
    """Update `contact` from one poll of the expected nodes; return (heard, responding, expected)."""
    seen = list(nodes)
    expected = len(seen)
    heard = sum(1 for n in seen if now - n.heard_at <= window_s)
    answering = sum(1 for n in seen if responding(n.scheduler_state))
    gap = contact.last_poll_at is not None and polled_at - contact.last_poll_at > poll_gap_s
    contact.last_poll_at = max(polled_at, contact.last_poll_at or 0.0)
    if _whole(heard, expected, quorum):
        contact.agents_since = now if contact.agents_since is None else contact.agents_since
    else:
        contact.agents_since = None
    if not _whole(answering, expected, quorum):
        contact.scheduler_since = None
    elif gap or contact.scheduler_since is None:
        # After a gap (the scheduler could not be read meanwhile) it is whole again only from this poll on.
        contact.scheduler_since = polled_at
    return heard, answering, expected


def domain_silent(
    suspect: str, domains: Mapping[str, str], members: Mapping[str, list[str]], heard: Mapping[str, bool], quorum: float
) -> str | None:
    """Why `suspect` is not judged alone (its domain's other expected nodes mostly silent too), or None."""
    domain = domains.get(suspect)
    if domain is None:
        return None
    others = [n for n in members.get(domain, []) if n != suspect and n in heard]
    if not others:
        return None
    count = sum(1 for n in others if heard[n])
    if _whole(count, len(others), quorum):
        return None
    return (
        f"its failure domain {domain} is silent too ({count} of {len(others)} other node(s) heard): a partition or "
        f"the domain's failure, not {suspect}'s alone"
    )


def mass_verdict(suspects_by_pool: Mapping[str, list[str]], limits: Mapping[str, int]) -> dict[str, str]:
    """Suspects of pools where more nodes are found lost at once than the breaker allows: none of them is lost."""
    blocked: dict[str, str] = {}
    for pool, suspects in suspects_by_pool.items():
        limit = limits.get(pool, 1)
        if len(suspects) > limit:
            why = (
                f"{len(suspects)} nodes of pool {pool} silent and down at once, more than the breaker allows "
                f"({limit}): a partition of the observer, not that many faults"
            )
            blocked |= dict.fromkeys(suspects, why)
    return blocked


def describe(judgement: Judgement, now: float) -> str:
    whole = f"{judgement.heard} of {judgement.expected} agents heard, {judgement.responding} of {judgement.expected} "
    whole += "nodes responding to the scheduler"
    if judgement.sound_since is None:
        return f"the leader's view is not whole ({whole}): no node is found lost on silence"
    return f"the leader's view is whole ({whole}) since {now - judgement.sound_since:.1f} s"
