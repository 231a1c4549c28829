"""What the controller's HTTP API (server.py) serves: a protocol, so that the server imports neither the controller
(app.py) nor its runnables."""

from __future__ import annotations

from typing import Any, Protocol

from prometheus_client import CollectorRegistry

from ha_ops.health.report import AgentReport
from ha_ops.remediation.certificates import CertificateService
from ha_ops.remediation.config import ControllerConfig


class ControllerApi(Protocol):
    """What the API serves (app.py's Controller): the server imports neither it nor its runnables."""

    config: ControllerConfig
    registry: CollectorRegistry
    certificates: CertificateService | None

    @property
    def is_leader(self) -> bool: ...

    def leader_name(self) -> str: ...

    def describe(self) -> dict[str, Any]: ...

    def heard_from(self, node: str) -> None: ...

    def handle_report(self, report: AgentReport) -> dict[str, Any]: ...

    def handle_alerts(self, alerts: list[dict[str, Any]]) -> dict[str, Any]: ...

    def handle_repaired(self, node: str, by: str = ...) -> dict[str, Any]: ...

    def reset_breaker(self, by: str = ...) -> dict[str, Any]: ...

    def start_maintenance(self, nodes: list[str], reason: str, ttl_s: float, by: str = ...) -> dict[str, Any]: ...

    def end_maintenance(self, nodes: list[str], by: str = ...) -> dict[str, Any]: ...

    def hold_host(
        self, node: str, release: bool, reason: str, by: str = ..., dry_run: bool = ...
    ) -> dict[str, Any]: ...
