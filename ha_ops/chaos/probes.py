"""Chaos Toolkit probes: what the steady state and the recovery are judged by. Use them as
`{"type": "probe", "provider": {"type": "python", "module": "ha_ops.chaos.probes", "func": NAME, ...},
"tolerance": ...}`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ha_ops.lab import monitoring
from ha_ops.lab.cluster import Lab
from ha_ops.lab.http import http_get

__all__ = [
    "agent_verdict",
    "alert_firing",
    "controller_phase",
    "job_ran_exactly_once",
    "job_state",
    "prometheus_query",
    "reachable",
    "slurm_controller_responds",
    "slurm_node_state",
    "slurm_nodes_in_service",
    "storage_health",
]


def _lab(name: str) -> Lab:
    return Lab.from_state(name)


def _client(handle: Lab) -> str:
    return handle.ctx.layout.nodes_with_role("gpu")[0].name


def slurm_controller_responds(lab: str = "lab") -> bool:
    """True when some slurmctld answers clients (sinfo succeeds within its timeout)."""
    handle = _lab(lab)
    return handle.node(_client(handle)).run(["sinfo", "-h"], check=False, timeout=15).ok


def slurm_node_state(node: str, lab: str = "lab") -> str:
    """The node's state as Slurm reports it, lower case (idle, allocated, drained, down*, ...)."""
    handle = _lab(lab)
    out = handle.node(_client(handle)).run(["sinfo", "-h", "-N", "-n", node, "-o", "%T"], check=False, timeout=15)
    return out.stdout.strip().splitlines()[0] if out.ok and out.stdout.strip() else "unknown"


def slurm_nodes_in_service(lab: str = "lab") -> bool:
    """True when every GPU node is idle, allocated or mixed (none drained, down or not responding)."""
    return not _lab(lab).slurm_problems()


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


def agent_verdict(node: str, lab: str = "lab") -> str:
    """The agent's current verdict for a node (healthy, degraded, unhealthy, unknown), from its metrics."""
    handle = _lab(lab)
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
    from ha_ops.lab.controllers import state_dir
    from ha_ops.remediation.store import read_state

    state = read_state(state_dir(_lab(lab).ctx) / "state.json")
    return state.nodes[node].phase.value


def storage_health(lab: str = "lab") -> dict[str, Any]:
    """The replicated storage's health (master up, chunkservers, chunks under goal or missing, space), through the
    storage adapter; `healthy` is true when the master answers and nothing is under its replica count."""
    from ha_ops.lab import storage_ops

    health = storage_ops.moosefs(_lab(lab)).health()
    return {**health.__dict__, "healthy": health.healthy}
