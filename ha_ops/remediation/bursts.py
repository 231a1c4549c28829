"""Bursts of application XIDs across nodes: one job's fault, not a fleet failure. Pure: no I/O, no clock.

A job that crashes on 50 nodes makes every one of its GPUs log XID 13 (or 31, 43) within seconds, and repeats on a
GPU escalate on its agent (ha_ops.health.checks): without this, the controller would drain 50 healthy nodes, or trip
its breaker on the first few and then ignore a real failure. The rule:

- a node's *onset* of application-class findings (its report has them, its previous one did not) enters a sliding
  window of `window_s` seconds (bounded: at most `max_events` entries);
- when `min_nodes` distinct nodes have an onset within the window, that is a burst: one finding, "XID 13 on 50 nodes
  within 5 s: one job's fault (job J)", the job being the one running on most of the burst's nodes (named by the
  controller, which asks its scheduler once per burst: `pick_job`);
- a node that reports application-class findings while a burst is on joins it; the burst lasts while its nodes
  keep reporting them, and ends `hold_s` after the last such report;
- an unhealthy report whose every critical finding is an application XID (an escalated repeat) from a node of the
  burst does not take the node out of service; from any other node it is held for `window_s` first (the burst may
  still be forming), then acted on as before. Any other critical finding (79, 95, a temperature, ...) is never held
  nor spared.

The tracker lives in the leader's memory (not in the persisted state): a new leader starts with an empty window.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ha_ops.gpu.xid import APPLICATION_XIDS

MAX_SAMPLE = 16  # node names kept in a burst's record (the count is exact)


class _Finding(Protocol):
    severity: str
    xid: int | None


class _Job(Protocol):
    id: str
    name: str
    nodes: tuple[str, ...]


def application_xids(findings: Iterable[_Finding]) -> list[int]:
    """The application-class XIDs among a report's findings (any severity)."""
    return [f.xid for f in findings if f.xid is not None and f.xid in APPLICATION_XIDS]


def only_application(findings: Iterable[_Finding]) -> bool:
    """True when the report's critical findings are all application XIDs (escalated repeats), and there is one."""
    critical = [f for f in findings if f.severity == "critical"]
    return bool(critical) and all(f.xid is not None and f.xid in APPLICATION_XIDS for f in critical)


@dataclass
class Burst:
    id: str
    started_at: float  # the first onset in the window that made it
    joined_at: float  # the latest node to join
    last_at: float  # the latest application-class report from one of its nodes
    nodes: set[str] = field(default_factory=set)
    sample: list[str] = field(default_factory=list)  # the first MAX_SAMPLE nodes, for the record
    xids: Counter[int] = field(default_factory=Counter)  # onsets per XID
    job: str | None = None
    spared: int = 0  # escalated reports not acted on

    def message(self) -> str:
        kinds = sorted(self.xids, key=lambda x: (-self.xids[x], x))
        what = f"XID {kinds[0]}" if len(kinds) == 1 else "XIDs " + ", ".join(str(x) for x in kinds)
        span = self.joined_at - self.started_at
        job = f" ({self.job})" if self.job else ""
        return f"{what} on {len(self.nodes)} nodes within {span:.0f} s: one job's fault{job}"


@dataclass
class BurstTracker:
    """The sliding window of onsets, the burst under way, and the escalated reports held back."""

    window: deque[tuple[float, str, tuple[int, ...]]] = field(default_factory=deque)
    onset_at: dict[str, float] = field(default_factory=dict)  # node -> its latest onset in the window
    reporting: set[str] = field(default_factory=set)  # nodes whose latest report has application-class findings
    burst: Burst | None = None
    held: dict[str, float] = field(default_factory=dict)  # node -> since when its escalated report waits
    bursts_seen: int = 0

    def _prune(self, now: float, window_s: float, max_events: int) -> None:
        window, onset = self.window, self.onset_at
        while window and (now - window[0][0] > window_s or len(window) > max_events):
            at, node, _ = window.popleft()
            if onset.get(node) == at:
                del onset[node]

    def active(self, now: float, hold_s: float) -> Burst | None:
        burst = self.burst
        if burst is not None and now - burst.last_at > hold_s:
            self.burst = burst = None
        return burst

    def observe(
        self,
        node: str,
        xids: Sequence[int],
        now: float,
        min_nodes: int,
        window_s: float,
        hold_s: float,
        max_events: int,
        learning: bool = False,
    ) -> Burst | None:
        """One report's application-class XIDs (none: the node has none now). Returns a burst that begins with it.
        `learning`: a new leader's first moments, when every node that still reports them would look like an onset:
        they are noted as reporting, not counted."""
        if not xids:
            self.reporting.discard(node)
            return None
        onset = node not in self.reporting
        self.reporting.add(node)
        if learning:
            return None
        burst = self.active(now, hold_s)
        if burst is not None:
            burst.last_at = now
            if node not in burst.nodes:
                burst.nodes.add(node)
                if len(burst.sample) < MAX_SAMPLE:
                    burst.sample.append(node)
                burst.joined_at = now
                burst.xids.update(set(xids))
            return None
        if not onset:
            return None
        self.window.append((now, node, tuple(sorted(set(xids)))))
        self.onset_at[node] = now
        self._prune(now, window_s, max_events)
        if len(self.onset_at) < min_nodes:
            return None
        self.bursts_seen += 1
        entries = [e for e in self.window if self.onset_at.get(e[1]) == e[0]]
        burst = Burst(
            id=f"burst-{self.bursts_seen}-{now:.0f}",
            started_at=min(e[0] for e in entries),
            joined_at=now,
            last_at=now,
            nodes=set(self.onset_at),
            sample=sorted(self.onset_at)[:MAX_SAMPLE],
        )
        for _, _, kinds in entries:
            burst.xids.update(kinds)
        self.burst = burst
        self.window.clear()
        self.onset_at.clear()
        for member in burst.nodes:  # the nodes held while it formed are its nodes now: spared
            if self.held.pop(member, None) is not None:
                burst.spared += 1
        return burst

    def member(self, node: str, now: float, hold_s: float) -> bool:
        """True when `node` is one of the nodes of the burst under way."""
        burst = self.active(now, hold_s)
        return burst is not None and node in burst.nodes

    def spares(self, node: str, now: float, hold_s: float) -> bool:
        """An escalated report from `node`: True (and counted) when the burst under way spares it."""
        if not self.member(node, now, hold_s):
            return False
        assert self.burst is not None
        self.burst.spared += 1
        return True

    def hold(self, node: str, now: float) -> None:
        self.held.setdefault(node, now)

    def release(self, node: str) -> None:
        self.held.pop(node, None)

    def due(self, now: float, window_s: float) -> list[str]:
        """Held nodes whose wait is over (and no burst took them in): to act on now. Removed from the held."""
        done = [n for n, since in self.held.items() if now - since >= window_s]
        for node in done:
            del self.held[node]
        return done


def pick_job(nodes: Iterable[str], jobs: Iterable[_Job]) -> str | None:
    """The job running on most of the burst's nodes, as "job ID NAME"; None when none runs on any of them."""
    members = set(nodes)
    best: tuple[int, str, str] | None = None
    for job in jobs:
        share = len(members.intersection(job.nodes))
        if share and (best is None or share > best[0]):
            best = (share, job.id, job.name)
    if best is None:
        return None
    _, job_id, name = best
    return f"job {job_id}" + (f" {name}" if name else "")


def record_of(burst: Burst) -> dict[str, Any]:
    """The burst as the controller's state keeps it (model.BurstRecord's fields)."""
    return {
        "id": burst.id,
        "started_at": burst.started_at,
        "last_at": burst.last_at,
        "nodes": len(burst.nodes),
        "sample": list(burst.sample),
        "xids": sorted(burst.xids),
        "job": burst.job,
        "spared": burst.spared,
        "message": burst.message(),
    }
