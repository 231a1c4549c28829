"""The controller's HTTP API (JSON). Bad input gets 400 with the reason and changes nothing; the standby answers
503 naming the leader, so agents move on to the other controller.

POST /v1/reports            an agent report (ha_ops.health.report, schema ha-ops/agent-report v1)
POST /v1/alerts             an Alertmanager webhook (version 4)
POST /v1/nodes/NODE/repaired   a person reports a replaced node repaired
POST /v1/breaker/reset      close the circuit breaker
GET  /v1/state              the controller's state
GET  /metrics               Prometheus metrics
GET  /healthz               200 (leader or standby)
"""

from __future__ import annotations

import json
import logging
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, Literal

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ConfigDict, ValidationError

from ha_ops.health.report import AgentReport

if TYPE_CHECKING:
    from ha_ops.remediation.controller import Controller

log = logging.getLogger(__name__)
MAX_BODY = 1 << 20


class AlertmanagerAlert(BaseModel):
    model_config = ConfigDict(extra="allow")
    status: Literal["firing", "resolved"]
    labels: dict[str, str]
    annotations: dict[str, str] = {}


class AlertmanagerWebhook(BaseModel):
    model_config = ConfigDict(extra="allow")
    version: Literal["4"]
    alerts: list[AlertmanagerAlert]


class BadRequest(Exception):
    pass


def _errors(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False)[:5]:
        loc = ".".join(str(p) for p in err["loc"]) or "body"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)


def make_handler(controller: Controller) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "ha-ops-controller"

        def log_message(self, fmt: str, *args: Any) -> None:
            log.debug("%s " + fmt, self.address_string(), *args)

        def _send(self, status: int, body: Any, content_type: str = "application/json") -> None:
            data = body if isinstance(body, bytes) else (json.dumps(body, default=str) + "\n").encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> Any:
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                raise BadRequest(f"Content-Length {self.headers.get('Content-Length')!r} is not a number") from None
            if length <= 0 or length > MAX_BODY:
                raise BadRequest(f"a JSON body of 1 byte to {MAX_BODY} bytes is required (got {length})")
            try:
                return json.loads(self.rfile.read(length))
            except ValueError as exc:
                raise BadRequest(f"body is not valid JSON: {exc}") from None

        def do_GET(self) -> None:
            if self.path == "/healthz":
                self._send(200, {"id": controller.config.id, "leader": controller.is_leader})
            elif self.path == "/metrics":
                self._send(200, generate_latest(controller.registry), CONTENT_TYPE_LATEST)
            elif self.path == "/v1/state":
                self._send(200, controller.describe())
            else:
                self._send(404, {"error": f"no such path {self.path}"})

        def do_POST(self) -> None:
            try:
                report = None
                if self.path == "/v1/reports":
                    try:
                        report = AgentReport.model_validate(self._body())
                    except ValidationError as exc:
                        raise BadRequest(f"not a valid agent report: {_errors(exc)}") from None
                    controller.heard_from(report.node)  # a standby hears agents too: they cannot reach the leader
                if not controller.is_leader:
                    self._send(503, {"error": "standby", "leader": controller.leader_name()})
                    return
                if report is not None:
                    self._send(200, controller.handle_report(report))
                elif self.path == "/v1/alerts":
                    try:
                        webhook = AlertmanagerWebhook.model_validate(self._body())
                    except ValidationError as exc:
                        raise BadRequest(f"not a valid Alertmanager webhook: {_errors(exc)}") from None
                    self._send(200, controller.handle_alerts([a.model_dump() for a in webhook.alerts]))
                elif self.path.startswith("/v1/nodes/") and self.path.endswith("/repaired"):
                    node = self.path.removeprefix("/v1/nodes/").removesuffix("/repaired")
                    self._send(200, controller.handle_repaired(node))
                elif self.path == "/v1/breaker/reset":
                    self._send(200, controller.reset_breaker())
                else:
                    self._send(404, {"error": f"no such path {self.path}"})
            except BadRequest as exc:
                self._send(HTTPStatus.BAD_REQUEST, {"error": str(exc)})
            except Exception as exc:  # the leader lost its lease mid-request, or an adapter failed
                log.warning("request %s failed: %s", self.path, exc)
                self._send(503, {"error": str(exc)})

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # The listen backlog: socketserver's default of 5 resets connections when a rack's agents report at once
    # (150 agents' reports within a millisecond did exactly that).
    request_queue_size = 1024


def serve(controller: Controller, address: str, port: int) -> ThreadingHTTPServer:
    return _Server((address, port), make_handler(controller))
