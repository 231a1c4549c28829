"""Chaos Toolkit probes: what the steady state and the recovery are judged by. Use them as
`{"type": "probe", "provider": {"type": "python", "module": "ha_ops.chaos.probes", "func": NAME, ...},
"tolerance": ...}`."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ha_ops.errors import CommandTimeout, WaitTimeout
from ha_ops.lab import monitoring
from ha_ops.lab.cluster import Lab
from ha_ops.lab.http import http_get
from ha_ops.util.wait import wait_for

__all__ = [
    "agent_verdict",
    "alert_firing",
    "alertmanager_alert_active",
    "controller_phase",
    "controller_took_out",
    "ecmp_paths",
    "gpu_capacity_in_service",
    "job_ran_exactly_once",
    "job_runs",
    "job_state",
    "monitoring_outage_seen",
    "prometheus_query",
    "reachable",
    "remediation_leader",
    "remediation_lease_holder",
    "rollout_fleet_as_before",
    "rollout_phase",
    "slurm_controller_responds",
    "slurm_controller_status",
    "slurm_node_state",
    "slurm_nodes_in_service",
    "storage_data_intact",
    "storage_health",
    "storage_healthy",
]


def _lab(name: str) -> Lab:
    return Lab.from_state(name)


def _client(handle: Lab) -> str:
    return handle.ctx.layout.nodes_with_role("gpu")[0].name


def _partition(handle: Lab) -> str:
    return handle.spec.schedulers.slurm.partition if handle.spec.schedulers.slurm else "gpu"


def slurm_controller_responds(lab: str = "lab") -> bool:
    """True when some slurmctld answers clients (sinfo succeeds within its timeout)."""
    handle = _lab(lab)
    return handle.node(_client(handle)).run(["sinfo", "-h"], check=False, timeout=15).ok


def slurm_controller_status(host: str, lab: str = "lab") -> str:
    """UP or DOWN: whether `host`'s slurmctld answers, as `scontrol ping` reports it (UNKNOWN if not listed)."""
    try:
        return _lab(lab).slurm_controllers().get(host, "UNKNOWN")
    except CommandTimeout:
        return "UNKNOWN"


def job_runs(timeout_s: float = 20.0, lab: str = "lab") -> bool:
    """True when a one-node job submitted now runs to completion within `timeout_s`: the scheduler really works."""
    handle = _lab(lab)
    argv = ["srun", "-p", _partition(handle), "-N", "1", "-t", "1", "-J", "ha-ops-probe", "true"]
    try:
        return handle.node(_client(handle)).run(argv, check=False, timeout=timeout_s).ok
    except CommandTimeout:
        return False


def gpu_capacity_in_service(lab: str = "lab") -> bool:
    """True when the main partition has at least as many nodes in service (idle, allocated, mixed) as the pools
    have non-spare nodes: capacity holds, with spares standing in for nodes that are out."""
    handle = _lab(lab)
    wanted = sum(1 for n in handle.ctx.layout.nodes_with_role("gpu") if not n.spare)
    argv = ["sinfo", "-h", "-N", "-p", _partition(handle), "-o", "%N|%T"]
    out = handle.node(_client(handle)).run(argv, check=False, timeout=15)
    states = dict(line.split("|", 1) for line in out.stdout.split() if "|" in line) if out.ok else {}
    return sum(1 for s in states.values() if s in ("idle", "allocated", "mixed")) >= wanted


def slurm_node_state(node: str, lab: str = "lab") -> str:
    """The node's state as Slurm reports it, lower case (idle, allocated, drained, down*, ...)."""
    handle = _lab(lab)
    out = handle.node(_client(handle)).run(["sinfo", "-h", "-N", "-n", node, "-o", "%T"], check=False, timeout=15)
    return out.stdout.strip().splitlines()[0] if out.ok and out.stdout.strip() else "unknown"


def slurm_nodes_in_service(lab: str = "lab", within_s: float = 0.0) -> bool:
    """True when every GPU node is idle, allocated or mixed (none drained, down or not responding). With `within_s`,
    polls until that holds or the time is up: "the fleet is whole again within N s" as a steady-state probe, instead
    of a fixed pause before an instant check that fails whenever recovery takes a little longer than the pause."""
    handle = _lab(lab)
    return _within(within_s, lambda: not handle.slurm_problems())


def job_state(job_id: str, lab: str = "lab") -> str:
    """A job's state (PENDING, RUNNING, COMPLETED, ...), from squeue or, once finished, scontrol."""
    handle = _lab(lab)
    node = handle.node(_client(handle))
    out = node.run(["squeue", "-h", "-j", job_id, "-o", "%T"], check=False, timeout=15).stdout.strip()
    if out:
        return out
    shown = node.run(["scontrol", "show", "job", "-o", job_id], check=False, timeout=15).stdout
    return next((t.split("=", 1)[1] for t in shown.split() if t.startswith("JobState=")), "UNKNOWN")


def job_ran_exactly_once(marker_dir: str, lab: str = "lab") -> bool:
    """True when the job that writes markers to `marker_dir` completed exactly once (one line in `done`).

    The job contract: append a line to `started` when it starts and to `done` when it finishes.
    """
    done = Path(marker_dir) / "done"
    return done.exists() and len([ln for ln in done.read_text().splitlines() if ln.strip()]) == 1


def reachable(source: str, target: str, lab: str = "lab") -> bool:
    """True when `source` can ping `target` across the fabric."""
    handle = _lab(lab)
    address = str(handle.ctx.layout.node(target).address)
    return handle.node(source).run(["ping", "-c", "1", "-W", "1", address], check=False, timeout=5).ok


def ecmp_paths(node: str, target: str, lab: str = "lab") -> int:
    """How many next hops `node` (a leaf) has in its most specific kernel route to `target`: the spines in use."""
    from ha_ops.chaos.rollbacks import in_netns

    handle = _lab(lab)
    address = str(handle.ctx.layout.node(target).address)
    out = in_netns(handle, node, "ip", "-j", "-4", "route", "show", "match", address, check=False)
    routes = [r for r in (json.loads(out.stdout or "[]") if out.ok else []) if r.get("type", "unicast") == "unicast"]
    if not routes:
        return 0

    def prefix(route: dict[str, Any]) -> int:
        dst = route.get("dst", "default")
        return -1 if dst == "default" else int(dst.split("/")[1]) if "/" in dst else 32

    best = max(routes, key=prefix)
    return len(best.get("nexthops", [])) or 1


def prometheus_query(query: str, lab: str = "lab") -> list[dict[str, Any]]:
    """The instant vector of a PromQL query: [{"metric": {...}, "value": float}, ...]."""
    handle = _lab(lab)
    url = monitoring.prometheus_url(handle.ctx) + "/api/v1/query?query=" + quote(query)
    status, body = http_get(handle.ctx.netns(handle.ctx.spec.monitoring.host.name), url, timeout=5)
    if status != 200:
        raise RuntimeError(f"Prometheus answered {status}: {body[:200]!r}")
    return [{"metric": r["metric"], "value": float(r["value"][1])} for r in json.loads(body)["data"]["result"]]


def alert_firing(alertname: str, lab: str = "lab") -> bool:
    """True while Prometheus has the alert firing."""
    handle = _lab(lab)
    url = monitoring.prometheus_url(handle.ctx) + "/api/v1/alerts"
    _, body = http_get(handle.ctx.netns(handle.ctx.spec.monitoring.host.name), url, timeout=5)
    alerts = json.loads(body)["data"]["alerts"]
    return any(a["labels"].get("alertname") == alertname and a["state"] == "firing" for a in alerts)


def alertmanager_alert_active(alertname: str, lab: str = "lab") -> bool:
    """True while Alertmanager holds the alert active (it may come from Prometheus or from the controller's watch)."""
    handle = _lab(lab)
    url = monitoring.alertmanager_url(handle.ctx) + "/api/v2/alerts?active=true"
    _, body = http_get(handle.ctx.netns(handle.ctx.spec.monitoring.host.name), url, timeout=5)
    return any(a["labels"].get("alertname") == alertname for a in json.loads(body))


def agent_verdict(node: str, lab: str = "lab", wait_for: str = "", within_s: float = 0.0) -> str:
    """The agent's current verdict for a node (healthy, degraded, unhealthy, unknown), from its metrics; with
    `wait_for`, polled until it is that verdict or `within_s` is up (the last verdict read is returned)."""
    handle = _lab(lab)
    seen = [""]

    def read() -> bool:
        seen[0] = _agent_verdict(handle, node)
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


def _agent_verdict(handle: Lab, node: str) -> str:
    address = handle.ctx.layout.node(node).address
    _, body = http_get(
        handle.ctx.netns(node), f"http://{address}:{handle.spec.monitoring.agent_port}/metrics", timeout=5
    )
    for line in body.decode().splitlines():
        if line.startswith("ha_ops_node_health{") and line.endswith(" 1.0"):
            return line.split('state="', 1)[1].split('"', 1)[0]
    return "unknown"


def controller_phase(node: str, lab: str = "lab") -> str:
    """The remediation controller's phase for a node (healthy, cordoned, ..., returned), from its shared state."""
    return _controller_state(lab).nodes[node].phase.value


def _controller_state(lab: str) -> Any:
    from ha_ops.lab.controllers import state_dir
    from ha_ops.remediation.store import read_state

    return read_state(state_dir(_lab(lab).ctx) / "state.json")


def remediation_leader(lab: str = "lab") -> str:
    """The controller node whose /healthz says it leads, or "none" while no controller leads."""
    from ha_ops.lab import controllers

    handle = _lab(lab)
    nodes = handle.ctx.layout.nodes_with_role("controller")
    for node, url in zip(nodes, controllers.base_urls(handle.ctx), strict=False):
        if not handle.node(node.name).is_running("controller"):
            continue  # dead or frozen: it leads nothing, and a frozen one would only time out
        try:
            status, body = http_get(handle.ctx.netns(node.name), url + "/healthz", timeout=1)
        except Exception:
            continue
        if status == 200 and json.loads(body).get("leader"):
            return node.name
    return "none"


def remediation_lease_holder(lab: str = "lab") -> str:
    """Who holds the controllers' lease on the shared storage (changes when a standby takes over)."""
    from ha_ops.lab.controllers import state_dir

    path = state_dir(_lab(lab).ctx) / "lease.json"
    return str(json.loads(path.read_text()).get("holder", "")) if path.exists() else ""


def monitoring_outage_seen(lab: str = "lab") -> bool:
    """True while the remediation controller's watch finds Prometheus down."""
    return _controller_state(lab).monitoring_down_since is not None


def storage_health(lab: str = "lab") -> dict[str, Any]:
    """The replicated storage's health (master up, chunkservers, chunks under goal or missing, space), through the
    storage adapter; `healthy` is true when the master answers and nothing is under its replica count."""
    from ha_ops.lab import storage_ops

    health = storage_ops.moosefs(_lab(lab)).health()
    return {**health.__dict__, "healthy": health.healthy}


def storage_healthy(lab: str = "lab") -> bool:
    """True when the storage master answers and no chunk is under its replica count or missing."""
    return bool(storage_health(lab)["healthy"])


def controller_took_out(node: str, lab: str = "lab") -> bool:
    """True once the remediation controller has taken the node out of service (cordoned through awaiting repair)."""
    return bool(_controller_state(lab).nodes[node].phase.out_of_service)


def storage_data_intact(folder: str = "chaos-probe", files: int = 4, lab: str = "lab") -> bool:
    """True when every probe file on the replicated storage reads back intact with every chunk at its replica count.
    The first call writes the files (so call it before the fault: a steady-state probe); later calls check them."""
    from ha_ops.lab import storage_ops

    handle = _lab(lab)
    manifest_path = handle.paths.root / f"chaos-{folder}.json"
    if not manifest_path.exists():
        manifest_path.write_text(json.dumps(storage_ops.write_files(handle, files, 1, folder=folder)))
    manifest = json.loads(manifest_path.read_text())
    intact = not storage_ops.unreadable_files(handle, manifest)
    return intact and not storage_ops.under_replicated(handle, list(manifest))


def rollout_phase(lab: str = "lab") -> str:
    """The phase of the lab's driver rollout (planned, running, halted, completed, ...), or "none"."""
    from ha_ops.lab import rollouts

    return rollouts.rollout_state(_lab(lab)).get("phase", "none")


def rollout_fleet_as_before(lab: str = "lab") -> bool:
    """True when every GPU node runs the driver it ran before the lab's rollout touched it (by the role's fact) and
    its GPUs report that version, and no node is half-way (its GPUs disagree or are lost)."""
    from ha_ops.lab import rollouts

    handle = _lab(lab)
    nodes = rollouts.rollout_state(handle).get("nodes", {})
    active, reported = rollouts.active_versions(handle), rollouts.reported_versions(handle)
    for name, version in active.items():
        before = (nodes.get(name, {}).get("before") or {}).get("active_version")
        if version is None or reported[name] != [version] or before not in (None, version):
            return False
    return True
