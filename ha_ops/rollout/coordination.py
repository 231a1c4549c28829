"""A driver rollout and the remediation controllers, coordinated (docs/architecture.md): before each wave the rollout
reads the leader's safety summary and does not go on while the breaker is open or a pool is under its minimum healthy
share; each node it changes is in a maintenance window from before its drain until it is back (one left for a
person keeps it for a week, until that person ends it), so the controller records the node's reports but does not
"repair" a driver change, and counts it out of service."""

from __future__ import annotations

from typing import Any

from ha_ops.remediation.client import Controllers
from ha_ops.security.tls import TlsFiles

MAINTENANCE_TTL_S = 3600.0  # renewed at each step of the node: a rollout that dies leaves windows that end by then
# A node the rollout left out of service for a person keeps its window this long (the longest a controller grants):
# out of the window, the controller would "repair" it and could return a node with a broken driver to service. The
# person ends it (`ha-ops controller maintenance end NODE`) once the node is right.
HELD_TTL_S = 7 * 86400.0


def blocked_by(safety: dict[str, Any]) -> str | None:
    """Why a wave may not start, from GET /v1/state's `safety` (pure)."""
    if safety.get("breaker_open"):
        return f"the remediation controller's circuit breaker is open ({safety.get('breaker_reason') or 'no reason'})"
    for pool, counts in sorted((safety.get("pools") or {}).items()):
        if counts["in_service"] < counts["minimum"]:
            return (f"pool {pool} has {counts['in_service']} of {counts['size']} nodes in service, under its minimum "
                    f"healthy share ({counts['minimum']})")  # fmt: skip
    return None


class ControllerCoordinator:
    def __init__(self, urls: list[str], files: TlsFiles | None = None) -> None:
        self.controllers = Controllers(urls, files)

    def blocked(self) -> str | None:
        return blocked_by(self.controllers.leader_state().get("safety") or {})

    def begin(self, nodes: list[str], reason: str, ttl_s: float) -> None:
        self.controllers.post("/v1/maintenance", {"nodes": nodes, "reason": reason, "ttl_s": ttl_s})

    def end(self, nodes: list[str]) -> None:
        self.controllers.post("/v1/maintenance/end", {"nodes": nodes})
