"""How often the agents send a heartbeat, scaled to the fleet (issue 43).

A heartbeat is a report that changes nothing: it shows the controller that the agent lives and that the leader can
hear the fleet (blind_after_s, remediation/observers.py). Faults never wait for it: an agent reports a change at
once. At 10 s, 25,000 nodes send 2,500 heartbeats a second, more than one Python process serves (a report costs the
controller 0.5-0.75 CPU ms when busy; tests/bench/ingest.py), and a node's death does not need them: the scheduler
carries liveness (slurmd answers slurmctld's pings, a kubelet renews its node Lease), and a node is lost only when
the scheduler says it stopped responding *and* its agent is silent (remediation/lost.py). So the controller asks for
at most `max_per_s` heartbeats a second from the whole fleet: each agent is told the interval in the answer to its
report (`heartbeat_s`), never under `min_s` (the agent's own, 10 s), so up to 5,000 nodes nothing changes and at
25,000 nodes an agent beats every 50 s. The windows that count on hearing every live agent grow with it, unless the
config sets them (then they must be long enough): blind_after_s 1.5 heartbeats, agent_silence_s 3.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import Field

from ha_ops.health.config import MAX_HEARTBEAT_S
from ha_ops.util.models import ConfigModel

BLIND_HEARTBEATS = 1.5  # blind_after_s: every live agent heard within it, one late beat allowed
SILENCE_HEARTBEATS = 3.0  # agent_silence_s: two beats missed before silence counts
# Every node's scheduler state is read at least this many times a heartbeat (node_poll_s where it is shorter): 10 s at
# 25,000 nodes, where a lost node waits for three heartbeats of silence anyway and reading 25,000 states every 2 s
# was a sixth of the controller's core. The Slurm fence's pings keep node_poll_s, whatever the fleet.
POLLS_PER_HEARTBEAT = 5.0
DEFAULT_BLIND_AFTER_S = 15.0
DEFAULT_AGENT_SILENCE_S = 30.0


class Heartbeats(ConfigModel):
    """The agents' heartbeats, as the controller asks for them in its answers to their reports."""

    min_s: float = Field(10.0, gt=0, le=MAX_HEARTBEAT_S, description="The heartbeat asked of a small fleet (the "
                         "agent's own heartbeat_s: an agent never beats slower than it is told).")  # fmt: skip
    max_per_s: float = Field(500.0, gt=0, le=1e6, description="Heartbeats a second the controller asks of the whole "
                             "fleet at most: over max_per_s x min_s nodes each agent beats less often. Raise it on "
                             "a controller host that serves more (tests/bench/ingest.py --find-max).")  # fmt: skip


def heartbeat_s(fleet: int, heartbeats: Heartbeats) -> float:
    """The interval each agent of a fleet of `fleet` nodes is asked to beat at (whole seconds past min_s)."""
    return min(MAX_HEARTBEAT_S, max(heartbeats.min_s, float(math.ceil(fleet / heartbeats.max_per_s))))


def fleet_size(pools: Any) -> int:
    """Nodes and spares of every pool, from a config's raw `pools` (mappings) or its models; 0 when unreadable (its
    own validation names what is wrong)."""
    if not isinstance(pools, dict):
        return 0
    total = 0
    for pool in pools.values():
        for kind in ("nodes", "spares"):
            members = pool.get(kind) if isinstance(pool, dict) else getattr(pool, kind, None)
            total += len(members) if isinstance(members, list) else 0
    return total


def default_windows(data: Any) -> Any:
    """A controller config's raw data with blind_after_s and agent_silence_s, where it does not set them, made long
    enough for its fleet's heartbeat (unchanged up to max_per_s x min_s nodes)."""
    if not isinstance(data, dict):
        return data
    try:
        beat = heartbeat_s(fleet_size(data.get("pools")), Heartbeats.model_validate(data.get("heartbeats") or {}))
    except ValueError:  # (a ValidationError too: the field is named when the whole config is validated)
        return data
    return {"blind_after_s": max(DEFAULT_BLIND_AFTER_S, BLIND_HEARTBEATS * beat),
            "agent_silence_s": max(DEFAULT_AGENT_SILENCE_S, SILENCE_HEARTBEATS * beat), **data}  # fmt: skip


def window_problems(blind_after_s: float, agent_silence_s: float, beat: float, fleet: int) -> list[str]:
    """Windows a config set too short for its fleet's heartbeat: a leader would think itself blind, or nodes lost,
    between two beats of live agents."""
    why = f"the agents' heartbeat is {beat:g} s for {fleet} nodes (heartbeats.max_per_s)"
    problems = []
    if blind_after_s < BLIND_HEARTBEATS * beat:
        problems.append(f"blind_after_s ({blind_after_s:g}) must be at least {BLIND_HEARTBEATS * beat:g}: {why}")
    if agent_silence_s < SILENCE_HEARTBEATS * beat:
        problems.append(f"agent_silence_s ({agent_silence_s:g}) must be at least {SILENCE_HEARTBEATS * beat:g}: {why}")
    return problems
