"""The controller's persisted state: one record per node, the intents (actions decided, not yet confirmed done),
the circuit breaker, and the audit head. Versioned; written atomically under the lease (store.py)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, Field, PrivateAttr

from ha_ops.remediation.bursts import BurstTracker
from ha_ops.remediation.fence_heal import FenceRecord, Hold
from ha_ops.remediation.observers import Contact

STATE_VERSION = 2  # 2: node records in shards and a journal (node_records.py); 1 is still read


class Incident(BaseModel):
    """One episode out of service of one node (kept in its NodeRecord: the node is the record's)."""

    cause: str
    at: float  # when it was taken out of service
    episode: int
    reason: str = ""  # the reason it was taken out (shortened)
    actions: list[str] = Field(default_factory=list)  # the steps, in order: drain, reset_gpu, reboot_node, ...
    outcome: str = ""  # "": still out; "returned"; "held for replacement"; "held for replacement (lemon)"; ...
    ended_at: float | None = None


class NodePhase(StrEnum):
    """Where a node is in remediation. The normal path: healthy -> cordoned -> draining -> drained ->
    awaiting_repair (a rung of the ladder runs) -> returned (validated, back in service on probation) -> healthy."""

    HEALTHY = "healthy"
    SUSPECT = "suspect"  # degraded or unknown reports: watched, not touched
    CORDONED = "cordoned"  # drained in Slurm: no new jobs
    DRAINING = "draining"  # its jobs are being requeued
    DRAINED = "drained"  # no jobs left; the repair ladder starts
    AWAITING_REPAIR = "awaiting_repair"  # a repair step (reset, reboot) runs, or a person must replace it
    RETURNED = "returned"  # back in service, on probation

    @property
    def out_of_service(self) -> bool:
        return self in OUT_OF_SERVICE


# (a set: the policy asks this of every node of a 1,500-node pool, several times per report)
OUT_OF_SERVICE = frozenset({NodePhase.CORDONED, NodePhase.DRAINING, NodePhase.DRAINED, NodePhase.AWAITING_REPAIR})


class Rung(StrEnum):
    """The escalation ladder."""

    RESET_GPU = "reset_gpu"
    REBOOT_NODE = "reboot_node"
    REPLACE = "replace"

    def next(self) -> Rung:
        order = list(Rung)
        return order[min(order.index(self) + 1, len(order) - 1)]


class LastReport(BaseModel):
    state: str
    action: str
    reason: str
    # Kept in the state (a later report with a lower seq from the same agent run is stale); left out of the API's
    # /v1/state, which a reader parses with these defaults (ha_ops.remediation.server.public_state).
    seq: int = 0
    agent_id: str = ""
    sent_at: float = 0.0  # (the agent's clock: a report sent well before this one is stale, whatever its agent_id)
    at: float
    gpus: list[int] = Field(default_factory=list)  # GPUs with critical findings


class Maintenance(BaseModel):
    """A maintenance window announced for a node (a driver rollout's batch): until it ends or expires the controller
    records the node's reports but remediates nothing on it, and counts it out of service for the safety limits."""

    until: float
    reason: str
    by: str
    since: float


class NodeRecord(BaseModel):
    name: str
    pool: str
    spare: bool = False
    in_main: bool = True  # in the main partition (spares start outside it)
    phase: NodePhase = NodePhase.HEALTHY
    since: float = 0.0
    reason: str = ""
    rung: Rung | None = None
    gpus: list[int] = Field(default_factory=list)  # the GPUs at fault when it was taken out (the reset's targets)
    rung_started: float = 0.0
    episode: int = 0  # increases each time the node is taken out of service
    returns: list[float] = Field(default_factory=list)  # when it was returned to service (flap detection)
    opt_out: bool = False
    last_report: LastReport | None = None
    spare_for: str | None = None  # for a spare in service: the node it stands in for
    slurm_state: str = ""  # as Slurm last reported it
    lost: bool = False  # found lost at the last node-state poll (acted on when it becomes true)
    # Fleet memory (history.py): its latest incidents (oldest first), when the controller first knew it if that was
    # after the history began (MTBI's observation starts there; 0: at ControllerState.history_since), when a person
    # last reported it repaired (lemon and tier counts start afresh), and the reliability tier last published to the
    # scheduler ("": none yet, as the scheduler's configuration has it).
    incidents: list[Incident] = Field(default_factory=list)
    seen_since: float = 0.0
    repaired_at: float = 0.0
    tier: str = ""
    maintenance: Maintenance | None = None
    # Where a change to the record is noted (node_records.py: the writer serializes only the records named there, so
    # a commit costs the nodes it changed, not the fleet): every assignment that changes a field, and touch() for an
    # in-place change (history.py's to the incidents). None: not tracked (a record read, not led).
    _changes: set[str] | None = PrivateAttr(default=None)

    def __setattr__(self, name: str, value: Any) -> None:
        if not name.startswith("_") and getattr(self, name) != value:
            self.touch()
        super().__setattr__(name, value)

    def touch(self) -> None:
        """The record changed in place (a list or a nested record, without an assignment to this record)."""
        changes = self.__pydantic_private__["_changes"]  # type: ignore[index]
        if changes is not None:
            changes.add(self.name)

    def track(self, changes: set[str] | None) -> None:
        self.__pydantic_private__["_changes"] = changes  # type: ignore[index]


IntentKind = Literal[
    "drain", "requeue_jobs", "spare_in", "spare_out", "reset_gpu", "reboot_node", "validate", "resume", "alert"
]


class Intent(BaseModel):
    """An action decided by the policy. Persisted before it runs; marked done after; re-run (idempotently) by the
    next leader if the previous one died in between."""

    id: str
    node: str
    kind: IntentKind
    why: str
    args: dict[str, Any] = Field(default_factory=dict)
    status: Literal["pending", "done", "failed", "skipped"] = "pending"
    created_at: float = 0.0
    token: int = 0
    attempts: int = 0
    not_before: float = 0.0  # a failed attempt is retried with a growing delay
    result: str = ""
    # The token of the term whose action pipeline is carrying it out now (0: none): a rung's timeout never climbs
    # the ladder under a validation that is still waiting for its node to boot (episodes.follow_repair).
    running: int = Field(0, exclude=True)  # (never written: a successor's pipeline runs it anew)


class Breaker(BaseModel):
    open: bool = False
    reason: str = ""
    opened_at: float = 0.0
    cordons: list[tuple[float, str]] = Field(default_factory=list)  # (when, node) the controller cordoned a node


class BurstRecord(BaseModel):
    """A burst of application XIDs across nodes: one job's fault (remediation/bursts.py)."""

    id: str
    started_at: float
    last_at: float
    nodes: int  # how many nodes (the names: `sample`, the first few)
    sample: list[str] = Field(default_factory=list)
    xids: list[int] = Field(default_factory=list)
    job: str | None = None
    spared: int = 0  # escalated reports from its nodes that did not take them out of service
    message: str


MAX_BURSTS = 50  # the latest bursts kept in the state


class ControllerState(BaseModel):
    version: int = STATE_VERSION
    nodes: dict[str, NodeRecord] = Field(default_factory=dict)
    intents: list[Intent] = Field(default_factory=list)
    breaker: Breaker = Field(default_factory=Breaker)
    next_intent: int = 1
    audit_seq: int = 0
    audit_hash: str = "0" * 64
    # The audit key's HMAC over (audit_seq, audit_hash) (audit.head_mac; "" without a key): the record of where the
    # log ends cannot be moved without the key
    audit_head_mac: str = ""
    audit_problems: list[str] = Field(default_factory=list)  # what the last takeover found wrong in the audit log
    deferred: dict[str, str] = Field(default_factory=dict)  # node -> why a cordon was held back (rate, capacity)
    leading_since: float = 0.0  # when the current leader took over
    storage_alerts: dict[str, float] = Field(default_factory=dict)  # firing storage alerts -> since when
    monitoring_down_since: float | None = None  # when the controller's watch found Prometheus down
    bursts: list[BurstRecord] = Field(default_factory=list)  # the latest MAX_BURSTS, oldest first
    history_since: float = 0.0  # when the fleet's history (history.py) began: the first leader that kept it
    # Fenced Slurm controller hosts being brought back (fence_heal.py), and the hosts a person holds (not brought back):
    # in the shared state, so that a new leader finishes a heal its predecessor began.
    fences: dict[str, FenceRecord] = Field(default_factory=dict)
    held: dict[str, Hold] = Field(default_factory=dict)
    # The window of application-XID onsets: the leader's memory only (a new leader starts afresh).
    _burst_tracker: BurstTracker = PrivateAttr(default_factory=BurstTracker)
    # Since when the leader's view of the fleet is whole (observers.py): its own observation, never inherited.
    _contact: Contact = PrivateAttr(default_factory=Contact)

    @property
    def burst_tracker(self) -> BurstTracker:
        return self._burst_tracker

    @property
    def contact(self) -> Contact:
        return self._contact

    def pending(self) -> list[Intent]:
        return [i for i in self.intents if i.status == "pending"]

    def node_intents(self, node: str, kind: str | None = None, status: str | None = None) -> list[Intent]:
        return [
            i
            for i in self.intents
            if i.node == node and (kind is None or i.kind == kind) and (status is None or i.status == status)
        ]
