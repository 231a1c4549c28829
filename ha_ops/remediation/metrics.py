"""The controller's Prometheus metrics, over a read-only view of it (MetricsSource): leadership, the state's nodes,
intents and breaker, the audit log's head and shipping, the Slurm controllers, the fleet's history (history.py)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from ha_ops.remediation import history
from ha_ops.remediation.audit import AuditLog
from ha_ops.remediation.audit_sink import AuditShipper
from ha_ops.remediation.blocked import BlockedTracker, blocked_metrics
from ha_ops.remediation.certificates import CertificateService
from ha_ops.remediation.config import ControllerConfig
from ha_ops.remediation.model import ControllerState, NodePhase

# The MTBI histogram's buckets: hours to months.
MTBI_BUCKETS_S = tuple(h * 3600.0 for h in (1, 6, 12, 24, 48, 96, 168, 336, 720, 1440, 2160))


class MetricsSource(Protocol):
    """What the metrics read of the controller (app.py's Controller)."""

    config: ControllerConfig
    certificates: CertificateService | None
    blocked: BlockedTracker
    clock: Callable[[], float]
    audit: AuditLog
    shipper: AuditShipper | None

    @property
    def is_leader(self) -> bool: ...

    @property
    def scheduler(self) -> Any: ...

    @property
    def state(self) -> ControllerState | None: ...

    @property
    def slurm_controllers(self) -> list[tuple[str, str]]: ...

    @property
    def records_unwritten(self) -> int: ...


class ControllerMetrics(Collector):
    """The controller's metrics, read at each scrape from what it holds (leader or standby)."""

    def __init__(self, controller: MetricsSource) -> None:
        self.c = controller

    def collect(self) -> Iterator[Metric]:
        c = self.c
        yield _single("ha_ops_controller_leader", "1 on the leader", {"id": c.config.id}, float(c.is_leader))
        if c.certificates is not None:  # (a standby issues too)
            issued = CounterMetricFamily("ha_ops_certificates_issued", "Certificates this controller issued",
                                         labels=["id", "how"])  # fmt: skip
            for how in ("renewal", "enrollment", "own"):
                issued.add_metric([c.config.id, how], float(c.certificates.issued[how]))
            yield issued
        watches = getattr(c.scheduler, "watches_synced", None)  # (the Kubernetes scheduler's caches)
        if watches is not None:
            synced = GaugeMetricFamily(
                "ha_ops_controller_watch_synced", "1 once the watch of a resource has its first list in",
                labels=["id", "resource"],
            )  # fmt: skip
            for resource, done in watches().items():
                synced.add_metric([c.config.id, resource], float(done))
            yield synced
        yield from blocked_metrics(c.blocked, c.config.id, c.clock())  # (a standby's, too)
        state = c.state
        if state is None:
            return
        yield _single(
            "ha_ops_controller_breaker_open",
            "1 while the circuit breaker is open",
            {"id": c.config.id},
            float(state.breaker.open),
        )
        ids = {"id": c.config.id}
        yield _single("ha_ops_controller_records_unwritten", "Node records a new leader holds and has not yet written "
                      "to their own place (0 once its takeover's background write is done)", ids,
                      float(c.records_unwritten))  # fmt: skip
        yield _single("ha_ops_controller_view_whole", "1 while the leader's view of the fleet is whole",
                      ids, float(bool(state.contact.sound)))  # fmt: skip
        yield _single("ha_ops_controller_suspects_held", "Nodes silent and down not found lost (a silent domain, a "
                      "mass verdict: observers.py)", ids, float(len(state.contact.held)))  # fmt: skip
        phases = GaugeMetricFamily("ha_ops_controller_node_phase", "1 for each node's phase", labels=["node", "phase"])
        for rec in state.nodes.values():
            phases.add_metric([rec.name, rec.phase.value], 1.0)
        yield phases
        counts = Counter(i.status for i in state.intents)
        intents = GaugeMetricFamily("ha_ops_controller_intents", "Intents by status", labels=["status"])
        for status in ("pending", "done", "failed", "skipped"):
            intents.add_metric([status], float(counts.get(status, 0)))
        yield intents
        yield _single(
            "ha_ops_controller_deferred", "Cordons held back", {"id": c.config.id}, float(len(state.deferred))
        )
        storage_alerts = GaugeMetricFamily(
            "ha_ops_controller_storage_alert",
            "1 for each storage alert the controller has seen firing",
            labels=["alert"],
        )
        for alert in state.storage_alerts:
            storage_alerts.add_metric([alert], 1.0)
        yield storage_alerts
        head = c.audit.head_as_written()
        yield _single("ha_ops_audit_head_seq", "The audit log's last entry", {"id": c.config.id}, float(head.seq))
        if c.shipper is not None:
            yield _single("ha_ops_audit_shipped_seq", "The last entry shipped to the sink", ids, c.shipper.shipped_seq)
            yield _single("ha_ops_audit_ship_pending", "Entries waiting for the sink", ids, c.shipper.pending())
            yield _single("ha_ops_audit_ship_dropped", "Entries lost while the sink was away", ids, c.shipper.dropped)
        yield _single(
            "ha_ops_audit_intact",
            "0 when this leader's takeover found the audit log cut or changed",
            {"id": c.config.id},
            float(not state.audit_problems),
        )
        yield _single(
            "ha_ops_controller_monitoring_down",
            "1 while the controller finds Prometheus down",
            {"id": c.config.id},
            float(state.monitoring_down_since is not None),
        )
        replace = GaugeMetricFamily(
            "ha_ops_controller_needs_replacement", "1 for nodes held for replacement", labels=["node"]
        )
        for rec in state.nodes.values():
            if rec.phase == NodePhase.AWAITING_REPAIR and rec.rung is not None and rec.rung.value == "replace":
                replace.add_metric([rec.name], 1.0)
        yield replace
        slurm = GaugeMetricFamily(
            "ha_ops_slurm_controller_up", "1 while slurmctld on the host answers scontrol ping", labels=["host"]
        )
        for host, answer in c.slurm_controllers:
            slurm.add_metric([host], float(answer == "UP"))
        yield slurm
        yield from _fleet_metrics(list(state.nodes.values()), c.clock(), c.config, state.history_since)


def _fleet_metrics(records: list[Any], now: float, config: ControllerConfig, since: float) -> Iterator[Metric]:
    """The fleet's history (history.py): incidents by cause, the nodes' MTBI, each pool's MTBI, nodes by tier."""
    by_cause = history.causes(records)
    incidents = GaugeMetricFamily(
        "ha_ops_fleet_incidents",
        "Incidents in the controller's history by cause (the latest fleet.max_incidents; survives failovers)",
        labels=["cause"],
    )
    for cause in sorted(set(history.CAUSES) | set(by_cause)):
        incidents.add_metric([cause], float(by_cause.get(cause, 0)))
    yield incidents
    window = config.fleet.mtbi_window_s
    mtbis = [m for m in (history.node_mtbi(r, now, window, since) for r in records) if m is not None]
    buckets = [(f"{le:g}", float(sum(m <= le for m in mtbis))) for le in MTBI_BUCKETS_S]
    yield HistogramMetricFamily(
        "ha_ops_fleet_mtbi_seconds",
        "Nodes' mean time between incidents over fleet.mtbi_window_s (nodes with an incident in it)",
        buckets=[*buckets, ("+Inf", float(len(mtbis)))],
        sum_value=sum(mtbis),
    )
    pools = GaugeMetricFamily(
        "ha_ops_fleet_pool_mtbi_seconds", "A pool's node-time observed over its incidents", labels=["pool"]
    )
    for name, pool in sorted(history.pool_mtbi(records, now, window, since).items()):
        if pool["mtbi_s"] is not None:
            pools.add_metric([name], pool["mtbi_s"])
    yield pools
    tiers = Counter(history.tier_of(r, now, config.fleet, config.lemon) for r in records)
    by_tier = GaugeMetricFamily("ha_ops_fleet_nodes", "Nodes by reliability tier", labels=["tier"])
    for tier in history.TIERS:
        by_tier.add_metric([tier], float(tiers.get(tier, 0)))
    yield by_tier


def _single(name: str, doc: str, labels: dict[str, str], value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=list(labels))
    family.add_metric(list(labels.values()), value)
    return family
