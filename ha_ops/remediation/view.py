"""What each remediation controller can see, shared between them so that a blind leader steps down.

Every controller, leader or standby, writes its own view to the shared state (`views/<id>.json`) at each lease
step: when it last read Slurm successfully and when it last heard each node's agent (a standby hears the reports it
answers 503 to, which is how agents that cannot reach the leader show up). A lease held on shared storage survives
a leader cut off from the network, so the lease alone cannot tell a working leader from a blind one; the views can.

The rule (`should_yield`): a controller that hears no agent yields to a fresh peer that does. Agents report to
whichever controller they can reach, so they tell which side of a partition the cluster is on. Reaching Slurm cannot:
a controller on a Slurm primary cut off from the network still reads its own slurmctld, while the controllers on the
cluster's side read nothing until the backup takes over, so Slurm is recorded and described, not ranked. A leader
that hears as little as its standby keeps the lease: when the agents are quiet, a handover helps nobody. The same
views give the agents' reports through either controller, so node loss is never decided on one path's silence.
"""

from __future__ import annotations

import json
import logging

from pydantic import BaseModel, Field, ValidationError

from ha_ops.remediation.documents import Documents

log = logging.getLogger(__name__)


class View(BaseModel):
    id: str
    at: float  # when the view was written
    slurm_ok_at: float = 0.0  # the last successful read of Slurm's node states
    agents: dict[str, float] = Field(default_factory=dict)  # node -> when its agent's report last arrived
    heard_latest: float = 0.0  # when any agent's report last arrived (a published view may list no agents)

    def heard_at(self) -> float:
        return max(self.heard_latest, max(self.agents.values(), default=0.0))

    def published(self, leading: bool, window_s: float) -> View:
        """The view as written for the peers, never O(fleet) in a healthy fleet: a leader's lists no agents (it
        hears every node; the per-node times in a view are read only by a leader, in its standby's view, for the
        agents that reach the standby alone, and a new leader counts silence from its own takeover), a standby's
        lists those heard within `window_s` (an agent heard before that is silent to any reader). Written whole,
        a leader's view was 44 KiB at 1,500 nodes and 730 KiB at 25,000, at every lease step (issue 43)."""
        agents = {} if leading else {n: t for n, t in self.agents.items() if self.at - t <= window_s}
        return self.model_copy(update={"agents": agents, "heard_latest": self.heard_at()})

    def reaches_slurm(self, now: float, window_s: float) -> bool:
        return now - self.slurm_ok_at <= window_s

    def hears_agents(self, now: float, window_s: float) -> bool:
        return now - self.heard_at() <= window_s

    def describe(self, now: float, window_s: float) -> str:
        slurm, agents = self.reaches_slurm(now, window_s), self.hears_agents(now, window_s)
        if slurm:
            seen = "reaches Slurm"
        else:
            seen = f"has not read Slurm for {now - self.slurm_ok_at:.1f} s" if self.slurm_ok_at else "never read Slurm"
        if agents:
            heard = "hears agents"
        else:
            last = self.heard_at()
            heard = f"has heard no agent for {now - last:.1f} s" if last else "has heard no agent yet"
        return f"{self.id} {seen} and {heard}"


def should_yield(own: View, peers: list[View], now: float, window_s: float) -> View | None:
    """The fresh peer that hears agents while `own` hears none (the one that heard one last), or None."""
    if own.hears_agents(now, window_s):
        return None
    fresh = [p for p in peers if p.id != own.id and now - p.at <= window_s and p.hears_agents(now, window_s)]
    # (a peer that writes nothing is down or cut off itself: it cannot do better)
    return max(fresh, key=View.heard_at) if fresh else None


def last_heard(views: list[View], node: str) -> float:
    """When any controller last heard `node`'s agent."""
    return max((v.agents.get(node, 0.0) for v in views), default=0.0)


class ViewStore:
    """`views/<id>.json` in the shared documents: each controller writes only its own."""

    def __init__(self, documents: Documents, me: str) -> None:
        self.documents = documents
        self.me = me

    def write(self, view: View) -> None:
        self.documents.write(f"views/{self.me}.json", view.model_dump_json())

    def peers(self) -> list[View]:
        found = []
        for name, text in sorted(self.documents.folder("views").items()):
            if not name.endswith(".json") or name == f"{self.me}.json":
                continue
            try:
                found.append(View.model_validate(json.loads(text)))
            except (ValueError, ValidationError) as exc:
                log.debug("view %s unreadable: %s", name, exc)  # torn or damaged: that peer counts as not fresh
        return found
