"""Chaos Toolkit probes: what the steady state and the recovery are judged by, read from the cluster the
experiment's configuration names (ha_ops.chaos.target). Use them as `{"type": "probe", "provider": {"type":
"python", "module": "ha_ops.chaos.probes", "func": NAME, ...}, "tolerance": ...}`.

Slurm is asked from a GPU node (what users' jobs see); Prometheus, Alertmanager, the agents and the remediation
controllers over HTTP (through the service host's SSH session on a real cluster, ha_ops.cluster.ssh). The
scheduler-neutral probes (nodes_in_service, node_state, capacity_in_service, scheduler_responds) ask the scheduler
the remediation controllers act on, Slurm or Kubernetes (Cluster.scheduler()), in sinfo's words either way: the same
experiment judges a Slurm cluster and a Kubernetes one."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from ha_ops.chaos import target
from ha_ops.chaos.actions import Configuration, rollout_before_fault
from ha_ops.cluster.base import Cluster
from ha_ops.cluster.rollouts import driver_rollouts
from ha_ops.errors import CommandTimeout, HaOpsError, TransportError, WaitTimeout
from ha_ops.util.wait import wait_for

__all__ = [
    "agent_verdict",
    "alert_firing",
    "alertmanager_alert_active",
    "capacity_in_service",
    "controller_phase",
    "controller_took_out",
    "ecmp_paths",
    "gpu_capacity_in_service",
    "job_ran_exactly_once",
    "job_runs",
    "job_state",
    "monitoring_outage_seen",
    "node_state",
    "nodes_in_service",
    "prometheus_query",
    "reachable",
    "remediation_leader",
    "remediation_lease_holder",
    "rollout_fleet_as_before",
    "rollout_phase",
    "scheduler_responds",
    "slurm_controller_responds",
    "slurm_controller_status",
    "slurm_node_state",
    "slurm_nodes_in_service",
    "storage_data_intact",
    "storage_health",
    "storage_healthy",
]

IN_SERVICE = ("idle", "allocated", "mixed")


def _cluster(configuration: Configuration) -> Cluster:
    return target.cluster(configuration)


def client(cluster: Cluster) -> str:
    """Where Slurm's client commands run: a GPU node, as a user's job would."""
    return cluster.layout.nodes_with_role("gpu")[0].name


def _partition(cluster: Cluster) -> str:
    return cluster.spec.gpu_partition


def _sinfo(cluster: Cluster, *argv: str) -> str | None:
    out = cluster.node(client(cluster)).run(["sinfo", "-h", *argv], check=False, timeout=15)
    return out.stdout if out.ok else None


def slurm_controller_responds(configuration: Configuration = None) -> bool:
    """True when some slurmctld answers clients (sinfo succeeds within its timeout)."""
    return _sinfo(_cluster(configuration)) is not None


def slurm_controller_status(host: str, configuration: Configuration = None) -> str:
    """UP or DOWN: whether `host`'s slurmctld answers, as `scontrol ping` reports it (UNKNOWN if not listed)."""
    try:
        return dict(_cluster(configuration).slurm().controllers()).get(host, "UNKNOWN")
    except (CommandTimeout, TransportError):
        return "UNKNOWN"


def job_runs(timeout_s: float = 20.0, configuration: Configuration = None) -> bool:
    """True when a one-node job submitted now runs to completion within `timeout_s`: the scheduler really works."""
    cluster = _cluster(configuration)
    argv = ["srun", "-p", _partition(cluster), "-N", "1", "-t", "1", "-J", "ha-ops-probe", "true"]
    try:
        return cluster.node(client(cluster)).run(argv, check=False, timeout=timeout_s).ok
    except CommandTimeout:
        return False


def _node_states(cluster: Cluster, partition: str | None = None) -> dict[str, str] | None:
    """Node -> state, in one partition or all (spares may wait outside the main one)."""
    out = _sinfo(cluster, "-N", *(["-p", partition] if partition else []), "-o", "%N|%T")
    return None if out is None else dict(line.split("|", 1) for line in out.split() if "|" in line)


def gpu_capacity_in_service(configuration: Configuration = None) -> bool:
    """True when the main partition has at least as many nodes in service (idle, allocated, mixed) as the pools
    have non-spare nodes: capacity holds, with spares standing in for nodes that are out."""
    cluster = _cluster(configuration)
    wanted = sum(1 for n in cluster.layout.nodes_with_role("gpu") if not n.spare)
    states = _node_states(cluster, _partition(cluster)) or {}
    return sum(1 for s in states.values() if s in IN_SERVICE) >= wanted


def slurm_node_state(node: str, configuration: Configuration = None) -> str:
    """The node's state as Slurm reports it, lower case (idle, allocated, drained, down*, ...)."""
    out = _sinfo(_cluster(configuration), "-N", "-n", node, "-o", "%T")
    return out.strip().splitlines()[0] if out and out.strip() else "unknown"


def _slurm_problems(cluster: Cluster) -> list[str]:
    states = _node_states(cluster)
    return ["no Slurm controller answers"] if states is None else _out_of_service(cluster, states)


def slurm_nodes_in_service(within_s: float = 0.0, configuration: Configuration = None) -> bool:
    """True when every GPU node is idle, allocated or mixed (none drained, down or not responding). With `within_s`,
    polls until that holds or the time is up: "the fleet is whole again within N s" as a steady-state probe, instead
    of a fixed pause before an instant check that fails whenever recovery takes a little longer than the pause."""
    cluster = _cluster(configuration)
    return _within(within_s, lambda: not _slurm_problems(cluster))


def _scheduler_states(cluster: Cluster) -> dict[str, str] | None:
    """Node -> state in sinfo's words from the controllers' scheduler, or None while it does not answer."""
    try:
        return {name: state for name, (state, _) in cluster.scheduler().node_states_and_reasons().items()}
    except HaOpsError:
        return None


def scheduler_responds(configuration: Configuration = None) -> bool:
    """True when the scheduler the remediation controllers act on (Slurm or Kubernetes) answers."""
    return _scheduler_states(_cluster(configuration)) is not None


def _gpu_node_problems(cluster: Cluster) -> list[str]:
    states = _scheduler_states(cluster)
    if states is None:
        return [f"{cluster.spec.scheduler} does not answer"]
    return _out_of_service(cluster, states)


def _out_of_service(cluster: Cluster, states: dict[str, str]) -> list[str]:
    problems = []
    for node in cluster.layout.nodes_with_role("gpu"):
        state = states.get(node.name)
        if state is None:
            problems.append(f"{node.name}: unknown to {cluster.spec.scheduler}")
        elif state not in (*IN_SERVICE, "completing"):
            problems.append(f"{node.name}: {state}")
    return problems


def nodes_in_service(within_s: float = 0.0, configuration: Configuration = None) -> bool:
    """slurm_nodes_in_service for whichever scheduler the controllers act on: every GPU node idle, allocated or
    mixed (on Kubernetes: Ready, not cordoned, not tainted down), now or within `within_s`."""
    cluster = _cluster(configuration)
    return _within(within_s, lambda: not _gpu_node_problems(cluster))


def node_state(node: str, configuration: Configuration = None) -> str:
    """The node's state in sinfo's words (idle, drained, down*, ...) from the controllers' scheduler."""
    return (_scheduler_states(_cluster(configuration)) or {}).get(node, "unknown")


def capacity_in_service(configuration: Configuration = None) -> bool:
    """gpu_capacity_in_service for whichever scheduler the controllers act on: the pool that takes work (Slurm's
    partition; on Kubernetes the pool without its spare-tainted nodes) has at least as many nodes in service as the
    pools have non-spare nodes, spares standing in for nodes that are out."""
    cluster = _cluster(configuration)
    wanted = sum(1 for n in cluster.layout.nodes_with_role("gpu") if not n.spare)
    states = _scheduler_states(cluster)
    try:
        working = cluster.scheduler().partition_nodes(cluster.spec.gpu_partition)
    except HaOpsError:
        return False
    return states is not None and sum(1 for name in working if states.get(name) in IN_SERVICE) >= wanted


def job_state(job_id: str, configuration: Configuration = None) -> str:
    """A job's state (PENDING, RUNNING, COMPLETED, ...; GONE once Slurm forgot it), read by the Slurm adapter from
    Slurm's structured output: a job's name cannot pose as its state."""
    try:
        return _cluster(configuration).slurm().job_state(job_id)
    except HaOpsError:
        return "UNKNOWN"


def job_ran_exactly_once(marker_dir: str, configuration: Configuration = None) -> bool:
    """True when the job that writes markers to `marker_dir` (on the cluster's shared storage) completed exactly
    once (one line in `done`). The job contract: a line in `started` when it starts and in `done` when it ends."""
    cluster = _cluster(configuration)
    out = cluster.node(client(cluster)).run(["cat", f"{marker_dir}/done"], check=False, timeout=15)
    return out.ok and len([ln for ln in out.stdout.splitlines() if ln.strip()]) == 1


def reachable(source: str, target: str, configuration: Configuration = None) -> bool:
    """True when `source` can ping `target` across the fabric."""
    cluster = _cluster(configuration)
    address = str(cluster.layout.node(target).address)
    return cluster.node(source).run(["ping", "-c", "1", "-W", "1", address], check=False, timeout=5).ok


def ecmp_paths(node: str, target: str, configuration: Configuration = None) -> int:
    """How many next hops `node` (a leaf) has in its most specific kernel route to `target`: the spines in use."""
    cluster = _cluster(configuration)
    address = str(cluster.layout.node(target).address)
    out = cluster.node(node).run(["ip", "-j", "-4", "route", "show", "match", address], check=False, timeout=10)
    routes = [r for r in (json.loads(out.stdout or "[]") if out.ok else []) if r.get("type", "unicast") == "unicast"]
    if not routes:
        return 0

    def prefix(route: dict[str, Any]) -> int:
        dst = route.get("dst", "default")
        return -1 if dst == "default" else int(dst.split("/")[1]) if "/" in dst else 32

    best = max(routes, key=prefix)
    return len(best.get("nexthops", [])) or 1


def _json(cluster: Cluster, service: Any, path: str, host: str | None = None, timeout: float = 5) -> Any:
    status, body = cluster.http(service, path, host=host, timeout=timeout)
    if status != 200:
        raise HaOpsError(f"{service} answered {status} to {path}: {body[:200]!r}")
    return json.loads(body)


def prometheus_query(query: str, configuration: Configuration = None) -> list[dict[str, Any]]:
    """The instant vector of a PromQL query: [{"metric": {...}, "value": float}, ...]."""
    data = _json(_cluster(configuration), "prometheus", "/api/v1/query?query=" + quote(query))
    return [{"metric": r["metric"], "value": float(r["value"][1])} for r in data["data"]["result"]]


def alert_firing(alertname: str, configuration: Configuration = None) -> bool:
    """True while Prometheus has the alert firing."""
    alerts = _json(_cluster(configuration), "prometheus", "/api/v1/alerts")["data"]["alerts"]
    return any(a["labels"].get("alertname") == alertname and a["state"] == "firing" for a in alerts)


def alertmanager_alert_active(alertname: str, configuration: Configuration = None) -> bool:
    """True while Alertmanager holds the alert active (it may come from Prometheus or from the controller's watch)."""
    alerts = _json(_cluster(configuration), "alertmanager", "/api/v2/alerts?active=true")
    return any(a["labels"].get("alertname") == alertname for a in alerts)


def agent_verdict(node: str, wait_for: str = "", within_s: float = 0.0, configuration: Configuration = None) -> str:
    """The agent's current verdict for a node (healthy, degraded, unhealthy, unknown), from its metrics; with
    `wait_for`, polled until it is that verdict or `within_s` is up (the last verdict read is returned)."""
    cluster = _cluster(configuration)
    seen = [""]

    def read() -> bool:
        seen[0] = _agent_verdict(cluster, node)
        return not wait_for or seen[0] == wait_for

    _within(within_s if wait_for else 0.0, read)
    return seen[0]


def _within(within_s: float, holds: Callable[[], bool]) -> bool:
    """Whether `holds()` is true now (its errors raised, as any probe's) or, with `within_s`, becomes true within
    that many seconds (errors on the way count as "not yet")."""
    if within_s <= 0:
        return bool(holds())
    try:
        wait_for("the probe's condition", holds, timeout=within_s, interval=0.2)
    except WaitTimeout:
        return False
    return True


def _agent_verdict(cluster: Cluster, node: str) -> str:
    _, body = cluster.http("agent", "/metrics", host=node, timeout=5)
    for line in body.decode().splitlines():
        if line.startswith("ha_ops_node_health{") and line.endswith(" 1.0"):
            return line.split('state="', 1)[1].split('"', 1)[0]
    return "unknown"


def _controllers(cluster: Cluster) -> list[str]:
    return [n.name for n in cluster.layout.nodes_with_role("controller")]


def _healthz(cluster: Cluster, host: str) -> dict[str, Any] | None:
    """A controller's /healthz, or None when it does not answer (dead, or frozen: skipped without waiting)."""
    if not cluster.node(host).service_active("controller"):
        return None
    try:
        return dict(_json(cluster, "controller", "/healthz", host=host, timeout=1))
    except Exception:
        return None


def remediation_leader(configuration: Configuration = None) -> str:
    """The controller node whose /healthz says it leads, or "none" while no controller leads."""
    return _leader(_cluster(configuration))


def _leader(cluster: Cluster) -> str:
    for host in _controllers(cluster):
        answer = _healthz(cluster, host)
        if answer and answer.get("leader"):
            return host
    return "none"


def _controller_state(cluster: Cluster) -> Any:
    """The leading controller's state (its /v1/state); HaOpsError while none leads."""
    from ha_ops.remediation.model import ControllerState

    leader = _leader(cluster)
    if leader == "none":
        raise HaOpsError("no remediation controller leads: nobody to ask for its state")
    data = _json(cluster, "controller", "/v1/state", host=leader)
    if "state" not in data:
        raise HaOpsError(f"the leader {leader} has no state yet")
    return ControllerState.model_validate(data["state"])


def controller_phase(node: str, configuration: Configuration = None) -> str:
    """The remediation controller's phase for a node (healthy, cordoned, ..., returned), from the leader's state."""
    return str(_controller_state(_cluster(configuration)).nodes[node].phase.value)


def controller_took_out(node: str, configuration: Configuration = None) -> bool:
    """True once the remediation controller has taken the node out of service (cordoned through awaiting repair)."""
    return bool(_controller_state(_cluster(configuration)).nodes[node].phase.out_of_service)


def remediation_lease_holder(configuration: Configuration = None) -> str:
    """Who holds the controllers' lease, as the controllers report it (changes when a standby takes over); an error
    while no live lease names anyone, so that "changed" means a new holder, not a lapse."""
    cluster = _cluster(configuration)
    for host in _controllers(cluster):
        if _healthz(cluster, host) is None:
            continue
        holder = str(_json(cluster, "controller", "/v1/state", host=host, timeout=2).get("leader_name") or "")
        if holder:
            return holder
    raise HaOpsError("no live lease: no controller names a holder")


def monitoring_outage_seen(configuration: Configuration = None) -> bool:
    """True while the remediation controller's watch finds Prometheus down."""
    return _controller_state(_cluster(configuration)).monitoring_down_since is not None


def storage_health(configuration: Configuration = None) -> dict[str, Any]:
    """The replicated storage's health (master up, chunkservers, chunks under goal or missing, space), through the
    storage adapter; `healthy` is true when the master answers and nothing is under its replica count."""
    return _cluster(configuration).storage_checks().health()


def storage_healthy(configuration: Configuration = None) -> bool:
    """True when the storage master answers and no chunk is under its replica count or missing."""
    return bool(storage_health(configuration)["healthy"])


def storage_data_intact(folder: str = "chaos-probe", files: int = 4, configuration: Configuration = None) -> bool:
    """True when every probe file on the replicated storage reads back intact with every chunk at its replica count.
    The first call writes the files (so call it before the fault: a steady-state probe); later calls check them."""
    return _cluster(configuration).storage_checks().data_intact(folder, files)


def rollout_phase(configuration: Configuration = None) -> str:
    """The phase of the cluster's driver rollout (planned, running, halted, completed, ...), or "none"; during a
    rollout fault, "none" until the fault's own rollout has started."""
    cluster = _cluster(configuration)
    return driver_rollouts(cluster).phase(rollout_before_fault(cluster))


def rollout_fleet_as_before(configuration: Configuration = None) -> bool:
    """True when every GPU node runs the driver it ran before the rollout touched it (by the role's fact) and its
    GPUs report that version, and no node is half-way (its GPUs disagree or are lost); during a rollout fault, only
    once the fault's own rollout has ended."""
    cluster = _cluster(configuration)
    return driver_rollouts(cluster).fleet_as_before(rollout_before_fault(cluster))
