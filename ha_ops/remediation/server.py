"""The controller's HTTP API (JSON). Bad input gets 400 with the reason and changes nothing; the standby answers
503 naming the leader, so agents move on to the other controller.

POST /v1/reports            an agent report (ha_ops.health.report, schema ha-ops/agent-report v1)
POST /v1/alerts             an Alertmanager webhook (version 4)
POST /v1/nodes/NODE/repaired   a person reports a replaced node repaired
POST /v1/breaker/reset      close the circuit breaker
POST /v1/maintenance        open (or extend) maintenance windows: {"nodes": [...], "reason": "...", "ttl_s": 3600}
POST /v1/maintenance/end    close them: {"nodes": [...]}
POST /v1/holds              a person holds a host (a fenced Slurm controller's is not brought back), or releases it:
                            {"node": "ctl1", "release": false, "reason": "...", "dry_run": false}
GET  /v1/state              the controller's state (without what would let a caller forge a report: each node's
                            agent_id and seq), and `safety`: the breaker and each pool's in-service count and minimum
POST /v1/certificates        a new certificate for the caller's own identity: {"csr": PEM} (with `certificates`)
GET  /metrics               Prometheus metrics
GET  /healthz               200 (leader or standby)

The enrollment port (`certificates.enrollment`, TLS without client certificates: serve_public) answers only
GET /healthz, GET /metrics and POST /v1/certificates with `Authorization: Bearer <service account token>`: an agent
pod's first certificate (ha_ops.remediation.certificates).

Served by ha_ops.util.http_front (one event loop: connections kept alive, TLS handshakes and requests read under
deadlines, connections capped per address and per certificate, /healthz answered on the loop), so that no caller
can exhaust it. Here: bodies of at most MAX_BODY bytes (an Alertmanager notification, which carries a whole group of
alerts, MAX_ALERTS_BODY), judged on their Content-Length before they are read; a caller's certificate checked
against the path before its body is read; node names checked (ha_ops.util.names), report fields bounded
(ha_ops.health.report).
"""

from __future__ import annotations

import json
import logging
from http import HTTPStatus
from typing import Any, Literal, TypeVar

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ha_ops.health.report import AgentReport
from ha_ops.remediation.api import ControllerApi
from ha_ops.remediation.certificates import EnrollmentRefused, TooManyRequests
from ha_ops.security import tls
from ha_ops.security.issuer import MAX_CSR_BYTES, RequestRefused, request_key
from ha_ops.security.tls import Identity
from ha_ops.util.bounded import Line, Token
from ha_ops.util.http_front import HttpFront, Limits, Request, Response, body_required
from ha_ops.util.names import node_name_problem

log = logging.getLogger(__name__)
MAX_BODY = 256 << 10  # a report of a node with 16 GPUs, each with findings, is under 20 KiB
# An Alertmanager notification carries its whole group: every node of a large cluster at once (1,500 alerts of about
# 1 KiB each when a whole fleet's agents go down).
MAX_ALERTS_BODY = 32 << 20
MAX_ALERTS = 20_000
CERTIFICATES = "/v1/certificates"


class AlertmanagerAlert(BaseModel):
    model_config = ConfigDict(extra="allow")
    status: Literal["firing", "resolved"]
    labels: dict[Token, Line] = Field(max_length=64)
    annotations: dict[Token, Line] = Field({}, max_length=64)


class AlertmanagerWebhook(BaseModel):
    model_config = ConfigDict(extra="allow")
    version: Literal["4"]
    alerts: list[AlertmanagerAlert] = Field(max_length=MAX_ALERTS)


class MaintenanceStart(BaseModel):
    model_config = ConfigDict(extra="forbid")
    nodes: list[Token] = Field(min_length=1, max_length=4096)
    reason: Line = Field(min_length=1)
    ttl_s: float = Field(3600.0, gt=0, le=7 * 86400)


class MaintenanceEnd(BaseModel):
    model_config = ConfigDict(extra="forbid")
    nodes: list[Token] = Field(min_length=1, max_length=4096)


class HoldRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    node: Token
    release: bool = False
    reason: Line = Field("held by an operator", min_length=1)
    dry_run: bool = False


class CertificateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    csr: str = Field(min_length=1, max_length=MAX_CSR_BYTES)

    @field_validator("csr")
    @classmethod
    def _a_request_for_a_key_it_holds(cls, csr: str) -> str:
        request_key(csr)  # a PEM request, signed by its key, the key strong enough (RequestRefused: a ValueError)
        return csr


class BadRequest(Exception):
    pass


def _errors(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False)[:5]:
        loc = ".".join(str(p) for p in err["loc"]) or "body"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)


M = TypeVar("M", bound=BaseModel)


def parse_body(raw: bytes, model: type[M], what: str) -> M:
    """A request body as `model`, or BadRequest naming what is wrong: not JSON (non-UTF-8 bytes, a 5,000-digit
    number, nesting too deep for the parser) or not the model's shape."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise BadRequest(f"body is not valid JSON: {str(exc)[:200]}") from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise BadRequest(f"not a valid {what}: {_errors(exc)}") from None
    except RecursionError:
        raise BadRequest(f"not a valid {what}: nested too deep") from None


def public_state(described: dict[str, Any]) -> dict[str, Any]:
    """The controller's description without each node's agent_id and seq: with them a caller could send one report
    whose seq is ahead of every genuine one, and the agent's later reports would all be ignored as stale."""
    for record in (described.get("state") or {}).get("nodes", {}).values():
        if record.get("last_report"):
            record["last_report"] = {k: v for k, v in record["last_report"].items() if k not in ("agent_id", "seq")}
    return described


def _check_names(nodes: list[str]) -> None:
    for node in nodes:
        if (problem := node_name_problem(node)) is not None:
            raise BadRequest(f"nodes: {problem}")


class Forbidden(Exception):
    """The caller's certificate does not allow this request (403)."""


def refusal(identity: Identity | None, method: str, path: str, report_node: str | None = None) -> str | None:
    """Why a caller may not make this request, or None when it may. Only with TLS: without it there is no identity
    and everything is allowed (and the API must be reachable from the cluster's own hosts only)."""
    if identity is None:
        return None
    if method == "GET" and path in ("/healthz", "/metrics"):
        return None  # any certificate the CA signed: who leads, and the figures, forge nothing
    if method == "POST" and path == "/v1/reports":
        if not identity.has(tls.AGENTS):
            return f"{identity} is not an agent"
        if report_node is not None and report_node != identity.name:
            return f"the certificate of {identity.name} may not report for {report_node}"
        return None
    if method == "POST" and path == "/v1/certificates":
        return None  # any certificate of the CA: it renews that identity only (security.issuer.template_of)
    if method == "POST" and path == "/v1/alerts":
        return None if identity.has(tls.ALERTMANAGER) else f"{identity} may not post alerts"
    if identity.has(tls.OPERATORS):
        return None  # /v1/state, repaired, breaker-reset, maintenance
    return f"{identity} is not an operator"


def _json(status: int, body: Any, headers: tuple[tuple[str, str], ...] = ()) -> Response:
    return Response(status, (json.dumps(body, default=str) + "\n").encode(), headers=headers)


def _body(request: Request, model: type[M], what: str) -> M:
    if not request.body:
        raise BadRequest(body_required(body_limit(request.path), "0"))
    return parse_body(request.body, model, what)


def body_limit(path: str) -> int:
    return MAX_ALERTS_BODY if path == "/v1/alerts" else MAX_BODY


class ControllerRoutes:
    """The API's paths over a ControllerApi (the routes of http_front.HttpFront). `public`: the enrollment port."""

    def __init__(self, controller: ControllerApi, public: bool = False) -> None:
        self.controller, self.public = controller, public

    body_limit = staticmethod(body_limit)

    def early(self, method: str, path: str, headers: dict[str, str], identity: Identity | None) -> Response | None:
        """On the server's loop, before a body is read: unknown methods and paths of the enrollment port, callers
        whose certificate does not allow the path, and the health probe (answered here: no worker, no lock)."""
        if method not in ("GET", "POST"):
            return _json(HTTPStatus.METHOD_NOT_ALLOWED, {"error": f"method {method} is not allowed"})
        if self.public and path not in ("/healthz", "/metrics") and not (method == "POST" and path == CERTIFICATES):
            return _json(404 if method == "GET" else 400, {"error": f"no such path {path} on the enrollment port"})
        why = refusal(identity, method, path)
        if why is not None:
            log.warning("refused %s from %s: %s", path, identity, why)
            return _json(HTTPStatus.FORBIDDEN, {"error": why})
        if method == "GET" and path == "/healthz":
            return _json(200, {"id": self.controller.config.id, "leader": self.controller.is_leader})
        return None

    def handle(self, request: Request) -> Response:
        try:
            if request.method == "GET":
                return self._get(request.path)
            return self._post(request)
        except BadRequest as exc:
            return _json(HTTPStatus.BAD_REQUEST, {"error": str(exc)})
        except Forbidden as exc:
            log.warning("refused %s from %s: %s", request.path, request.identity, exc)
            return _json(HTTPStatus.FORBIDDEN, {"error": str(exc)})
        except Exception as exc:  # the leader lost its lease mid-request, or an adapter failed
            log.warning("request %s failed: %s", request.path, exc)
            return _json(503, {"error": str(exc)})

    def _get(self, path: str) -> Response:
        controller = self.controller
        if path == "/metrics":
            return Response(200, generate_latest(controller.registry), CONTENT_TYPE_LATEST)
        if path == "/v1/state":
            return _json(200, public_state(controller.describe()))
        return _json(404, {"error": f"no such path {path}"})

    def _post(self, request: Request) -> Response:
        controller, path = self.controller, request.path
        if path == CERTIFICATES and (self.public or request.presented is not None):
            return self._certificate(request)
        report = None
        if path == "/v1/reports":
            report = _body(request, AgentReport, "agent report")
            why = refusal(request.identity, "POST", path, report.node)
            if why is not None:
                raise Forbidden(why)
            controller.heard_from(report.node)  # a standby hears agents too: they cannot reach the leader
        if not controller.is_leader:
            return _json(503, {"error": "standby", "leader": controller.leader_name()})
        by = f"operator {request.identity.name}" if request.identity is not None else "an operator"
        if report is not None:
            return _json(200, controller.handle_report(report))
        if path == "/v1/alerts":
            webhook = _body(request, AlertmanagerWebhook, "Alertmanager webhook")
            return _json(200, controller.handle_alerts([a.model_dump() for a in webhook.alerts]))
        if path.startswith("/v1/nodes/") and path.endswith("/repaired"):
            node = path.removeprefix("/v1/nodes/").removesuffix("/repaired")
            problem = node_name_problem(node)
            if problem is not None:
                raise BadRequest(problem)
            return _json(200, controller.handle_repaired(node, by=by))
        if path == "/v1/breaker/reset":
            return _json(200, controller.reset_breaker(by=by))
        if path == "/v1/maintenance":
            start = _body(request, MaintenanceStart, "maintenance window")
            _check_names(start.nodes)
            try:
                return _json(200, controller.start_maintenance(start.nodes, start.reason, start.ttl_s, by))
            except ValueError as exc:
                raise BadRequest(str(exc)) from None
        if path == "/v1/maintenance/end":
            end = _body(request, MaintenanceEnd, "maintenance window end")
            _check_names(end.nodes)
            return _json(200, controller.end_maintenance(end.nodes, by))
        if path == "/v1/holds":
            hold = _body(request, HoldRequest, "hold")
            _check_names([hold.node])
            try:
                return _json(200, controller.hold_host(hold.node, hold.release, hold.reason, by, hold.dry_run))
            except ValueError as exc:  # an unknown node: nothing changed
                raise BadRequest(str(exc)) from None
        return _json(404, {"error": f"no such path {path}"})

    def _certificate(self, request: Request) -> Response:
        """A renewal (the TLS port: the caller's own certificate) or an enrollment (the enrollment port: a token).
        Any controller issues, leader or standby: both hold the issuer."""
        certificates = self.controller.certificates
        if certificates is None:
            return _json(404, {"error": "this controller issues no certificates (no `certificates` in its config)"})
        csr = _body(request, CertificateRequest, "certificate request").csr
        try:
            if self.public:
                scheme, _, token = request.headers.get("authorization", "").partition(" ")
                if scheme.lower() != "bearer" or not token.strip():  # (RFC 7235: the scheme is case-insensitive)
                    raise EnrollmentRefused("a service account token is required (Authorization: Bearer)")
                answer = certificates.enroll(token.strip(), csr)
            else:
                assert request.presented is not None  # (the mutual TLS port: a verified certificate)
                answer = certificates.renew(request.presented, csr)
        except RequestRefused as exc:
            raise BadRequest(str(exc)) from None
        except EnrollmentRefused as exc:
            raise Forbidden(str(exc)) from None
        except TooManyRequests as exc:
            log.warning("refused a certificate: %s", exc)
            retry = str(max(1, round(exc.retry_after_s)))
            return _json(HTTPStatus.TOO_MANY_REQUESTS, {"error": str(exc)}, headers=(("Retry-After", retry),))
        return _json(200, answer)


def serve(controller: ControllerApi, address: str, port: int, limits: Limits | None = None) -> HttpFront:
    files = controller.config.tls
    context = tls.ReloadingContext(files, server=True).get if files is not None else None
    return HttpFront(ControllerRoutes(controller), address, port, context, limits or controller.config.api, name="api")


def serve_public(controller: ControllerApi, address: str, port: int) -> HttpFront:
    """The enrollment port: TLS with the controller's certificate, no client certificate asked (agent pods have
    none yet; they prove who they are with a token). Besides enrollment it answers /healthz (a kubelet's probe
    presents no certificate) and /metrics (Prometheus' scrape)."""
    assert controller.config.tls is not None  # (certificates needs tls: the config's validator)
    context = tls.ReloadingContext(controller.config.tls, server=True, verify_client=False)
    return HttpFront(ControllerRoutes(controller, public=True), address, port, context.get, controller.config.api,
                     name="enrollment")  # fmt: skip
