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

Limits, so that no caller can exhaust it: bodies of at most MAX_BODY bytes (an Alertmanager notification, which
carries a whole group of alerts, MAX_ALERTS_BODY), read within SOCKET_TIMEOUT_S (a request
sent slowly or half is dropped, its thread freed), at most MAX_WORKERS requests handled at once (more wait in the
listen backlog), node names checked (ha_ops.util.names), report fields bounded (ha_ops.health.report).
"""

from __future__ import annotations

import json
import logging
import ssl
import sys
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal, TypeVar

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ha_ops.health.report import AgentReport
from ha_ops.remediation.api import ControllerApi
from ha_ops.remediation.certificates import EnrollmentRefused
from ha_ops.security import tls
from ha_ops.security.issuer import MAX_CSR_BYTES, RequestRefused, request_key
from ha_ops.security.tls import Identity
from ha_ops.util.bounded import Line, Token
from ha_ops.util.names import node_name_problem

log = logging.getLogger(__name__)
MAX_BODY = 256 << 10  # a report of a node with 16 GPUs, each with findings, is under 20 KiB
# An Alertmanager notification carries its whole group: every node of a large cluster at once (1,500 alerts of about
# 1 KiB each when a whole fleet's agents go down).
MAX_ALERTS_BODY = 32 << 20
MAX_ALERTS = 20_000
SOCKET_TIMEOUT_S = 10.0
# A report's thread waits for the write that holds its decision (a group commit), so the pool must hold a storm's
# reports at once: with 64, 150 agents reporting together were decided in three rounds of writes instead of one or
# two (answered in 1.0 s at the median instead of 0.3-0.5 s). Each waiting thread costs little; a caller that holds
# one without sending is dropped at SOCKET_TIMEOUT_S.
MAX_WORKERS = 256


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


def make_handler(controller: ControllerApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "ha-ops-controller"
        timeout = SOCKET_TIMEOUT_S  # on the connection's socket: a request sent slowly or half ends here
        identity: Identity | None = None
        presented: bytes | None = None  # the caller's certificate (DER), for a renewal

        def setup(self) -> None:
            if isinstance(self.request, ssl.SSLSocket):
                # The handshake here, in the request's own thread under the socket timeout, not in the accept loop:
                # a client that never completes it holds one worker, not the server.
                self.request.settimeout(SOCKET_TIMEOUT_S)
                self.request.do_handshake()
                self.identity = tls.identity_of(self.request.getpeercert())
                self.presented = self.request.getpeercert(binary_form=True)
            super().setup()

        @property
        def public(self) -> bool:
            return bool(getattr(self.server, "public", False))

        def _allow(self, method: str, report_node: str | None = None) -> None:
            why = refusal(self.identity, method, self.path, report_node)
            if why is not None:
                raise Forbidden(why)

        def _caller(self) -> str:
            return f"operator {self.identity.name}" if self.identity is not None else "an operator"

        def log_message(self, fmt: str, *args: Any) -> None:
            log.debug("%s " + fmt, self.address_string(), *args)

        def _send(self, status: int, body: Any, content_type: str = "application/json") -> None:
            data = body if isinstance(body, bytes) else (json.dumps(body, default=str) + "\n").encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self, model: type[M], what: str, limit: int = MAX_BODY) -> M:
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                raise BadRequest(f"Content-Length {self.headers.get('Content-Length')!r} is not a number") from None
            if length <= 0 or length > limit:
                raise BadRequest(f"a JSON body of 1 byte to {limit} bytes is required (got {length})")
            return parse_body(self.rfile.read(length), model, what)

        def do_GET(self) -> None:
            if self.public and self.path not in ("/healthz", "/metrics"):
                self._send(404, {"error": f"no such path {self.path} on the enrollment port"})
                return
            try:
                self._allow("GET")
            except Forbidden as exc:
                self._send(HTTPStatus.FORBIDDEN, {"error": str(exc)})
                return
            if self.path == "/healthz":
                self._send(200, {"id": controller.config.id, "leader": controller.is_leader})
            elif self.path == "/metrics":
                self._send(200, generate_latest(controller.registry), CONTENT_TYPE_LATEST)
            elif self.path == "/v1/state":
                self._send(200, public_state(controller.describe()))
            else:
                self._send(404, {"error": f"no such path {self.path}"})

        def _certificate(self) -> None:
            """A renewal (the TLS port: the caller's own certificate) or an enrollment (the enrollment port: a token).
            Any controller issues, leader or standby: both hold the issuer."""
            if controller.certificates is None:
                self._send(404, {"error": "this controller issues no certificates (no `certificates` in its config)"})
                return
            request = self._body(CertificateRequest, "certificate request")
            try:
                if self.public:
                    scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
                    if scheme != "Bearer" or not token.strip():
                        raise EnrollmentRefused("a service account token is required (Authorization: Bearer)")
                    answer = controller.certificates.enroll(token.strip(), request.csr)
                else:
                    assert self.presented is not None  # (the mutual TLS port: a verified certificate)
                    answer = controller.certificates.renew(self.presented, request.csr)
            except RequestRefused as exc:
                raise BadRequest(str(exc)) from None
            except EnrollmentRefused as exc:
                raise Forbidden(str(exc)) from None
            self._send(200, answer)

        def do_POST(self) -> None:
            try:
                if self.path == "/v1/certificates" and (self.public or self.presented is not None):
                    self._allow("POST")
                    self._certificate()
                    return
                if self.public:
                    raise BadRequest(f"no such path {self.path} on the enrollment port")
                report = None
                if self.path == "/v1/reports":
                    self._allow("POST")  # an agent at all, before its body is read
                    report = self._body(AgentReport, "agent report")
                    self._allow("POST", report.node)
                    controller.heard_from(report.node)  # a standby hears agents too: they cannot reach the leader
                else:
                    self._allow("POST")
                if not controller.is_leader:
                    self._send(503, {"error": "standby", "leader": controller.leader_name()})
                    return
                if report is not None:
                    self._send(200, controller.handle_report(report))
                elif self.path == "/v1/alerts":
                    webhook = self._body(AlertmanagerWebhook, "Alertmanager webhook", MAX_ALERTS_BODY)
                    self._send(200, controller.handle_alerts([a.model_dump() for a in webhook.alerts]))
                elif self.path.startswith("/v1/nodes/") and self.path.endswith("/repaired"):
                    node = self.path.removeprefix("/v1/nodes/").removesuffix("/repaired")
                    problem = node_name_problem(node)
                    if problem is not None:
                        raise BadRequest(problem)
                    self._send(200, controller.handle_repaired(node, by=self._caller()))
                elif self.path == "/v1/breaker/reset":
                    self._send(200, controller.reset_breaker(by=self._caller()))
                elif self.path == "/v1/maintenance":
                    start = self._body(MaintenanceStart, "maintenance window")
                    _check_names(start.nodes)
                    try:
                        answer = controller.start_maintenance(start.nodes, start.reason, start.ttl_s, self._caller())
                    except ValueError as exc:
                        raise BadRequest(str(exc)) from None
                    self._send(200, answer)
                elif self.path == "/v1/maintenance/end":
                    end = self._body(MaintenanceEnd, "maintenance window end")
                    _check_names(end.nodes)
                    self._send(200, controller.end_maintenance(end.nodes, self._caller()))
                elif self.path == "/v1/holds":
                    hold = self._body(HoldRequest, "hold")
                    _check_names([hold.node])
                    try:
                        answer = controller.hold_host(hold.node, hold.release, hold.reason, self._caller(),
                                                      hold.dry_run)  # fmt: skip
                    except ValueError as exc:  # an unknown node: nothing changed
                        raise BadRequest(str(exc)) from None
                    self._send(200, answer)
                else:
                    self._send(404, {"error": f"no such path {self.path}"})
            except BadRequest as exc:
                self._send(HTTPStatus.BAD_REQUEST, {"error": str(exc)})
            except Forbidden as exc:
                log.warning("refused %s from %s: %s", self.path, self.identity, exc)
                self._send(HTTPStatus.FORBIDDEN, {"error": str(exc)})
            except Exception as exc:  # the leader lost its lease mid-request, or an adapter failed
                log.warning("request %s failed: %s", self.path, exc)
                self._send(503, {"error": str(exc)})

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    public = False  # the enrollment port
    # The listen backlog: socketserver's default of 5 resets connections when a rack's agents report at once
    # (150 agents' reports within a millisecond did exactly that).
    request_queue_size = 1024

    def __init__(self, *args: Any, context: tls.ReloadingContext | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._workers = threading.BoundedSemaphore(MAX_WORKERS)
        self.context = context

    def get_request(self) -> tuple[Any, Any]:
        sock, address = super().get_request()
        if self.context is None:
            return sock, address
        # The context as it is now: a rotated certificate serves the next handshake. (The handshake itself runs
        # in the request's thread: Handler.setup.)
        return self.context.get().wrap_socket(sock, server_side=True, do_handshake_on_connect=False), address

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A caller refused at TLS (no certificate, another CA's, plain HTTP) or gone mid-request: one line, not
        # socketserver's traceback on stderr.
        log.warning("connection from %s ended: %s", client_address[0], sys.exc_info()[1])

    def process_request(self, request: Any, client_address: Any) -> None:
        # A thread per request, at most MAX_WORKERS at once: the accept loop waits for a free one, and the
        # connections behind it wait in the backlog (40 half-sent requests once held 40 threads for good).
        self._workers.acquire()
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._workers.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._workers.release()


def serve(controller: ControllerApi, address: str, port: int) -> ThreadingHTTPServer:
    files = controller.config.tls
    context = tls.ReloadingContext(files, server=True) if files is not None else None
    return _Server((address, port), make_handler(controller), context=context)


def serve_public(controller: ControllerApi, address: str, port: int) -> ThreadingHTTPServer:
    """The enrollment port: TLS with the controller's certificate, no client certificate asked (agent pods have
    none yet; they prove who they are with a token). Besides enrollment it answers /healthz (a kubelet's probe
    presents no certificate) and /metrics (Prometheus' scrape)."""
    assert controller.config.tls is not None  # (certificates needs tls: the config's validator)
    context = tls.ReloadingContext(controller.config.tls, server=True, verify_client=False)
    server = _Server((address, port), make_handler(controller), context=context)
    server.public = True
    return server
