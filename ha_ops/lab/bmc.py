"""The lab's BMC, speaking Redfish: one ComputerSystem per lab host under /redfish/v1/Systems/<host>, with its
PowerState and the ComputerSystem.Reset action, behind a Redfish session login (X-Auth-Token) or HTTP basic
authentication. A reset powers the lab node off or cycles it (ha_ops.lab.node: every process killed and every link
down; booted again with its services), so the node-loss fault and its undo go through the same Redfish client a real
BMC gets.

Only what a power backend needs is served: the service root, sessions, the Systems collection, each system, and
its reset.
"""

from __future__ import annotations

import base64
import hmac
import json
import logging
import secrets
import sys
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ha_ops.lab import mgmt
from ha_ops.lab.context import LabContext, ServiceDef
from ha_ops.util.atomic import write_atomic

if TYPE_CHECKING:
    from ha_ops.lab.cluster import Lab

log = logging.getLogger(__name__)

ROOT = "/redfish/v1"
RESET_TYPES = ("On", "ForceOff", "GracefulShutdown", "ForceRestart", "PowerCycle")


class Machines(Protocol):
    """What the BMC drives: the lab's nodes (or, in a unit test, a dictionary)."""

    def names(self) -> list[str]: ...

    def powered_on(self, name: str) -> bool: ...

    def reset(self, name: str, reset_type: str) -> None: ...


def _system(name: str, on: bool) -> dict[str, Any]:
    path = f"{ROOT}/Systems/{name}"
    return {
        "@odata.id": path,
        "@odata.type": "#ComputerSystem.v1_13_0.ComputerSystem",
        "Id": name,
        "Name": name,
        "SystemType": "Physical",
        "PowerState": "On" if on else "Off",
        "Status": {"State": "Enabled", "Health": "OK"},
        "Actions": {
            "#ComputerSystem.Reset": {
                "target": f"{path}/Actions/ComputerSystem.Reset",
                "ResetType@Redfish.AllowableValues": list(RESET_TYPES),
            }
        },
    }


SESSIONS = f"{ROOT}/SessionService/Sessions"


def make_handler(machines: Machines, user: str, password: str) -> type[BaseHTTPRequestHandler]:
    expected = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    sessions: dict[str, str] = {}  # session id -> its X-Auth-Token (Redfish session login, as clients prefer)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        open_sessions = sessions  # for the BMC's owner to see who is still logged in

        def log_message(self, fmt: str, *args: Any) -> None:
            log.debug("bmc: " + fmt, *args)

        def end_headers(self) -> None:
            # A client that asks for the connection to close (sushy does) is told it will be, so that its pool does
            # not send the next request down a socket this side is closing (RemoteDisconnected on a POST).
            if self.close_connection:
                self.send_header("Connection", "close")
            super().end_headers()

        def _send(self, status: int, body: dict[str, Any] | None = None) -> None:
            data = json.dumps(body).encode() if body is not None else b""
            self.send_response(status)
            if body is not None:
                self.send_header("Content-Type", "application/json")
                self.send_header("OData-Version", "4.0")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _error(self, status: HTTPStatus, message: str) -> None:
            self._send(status, {"error": {"code": "Base.1.8.GeneralError", "message": message}})

        def _authorized(self) -> bool:
            given = self.headers.get("Authorization", "")
            if hmac.compare_digest(given.encode(), expected.encode()):
                return True
            token = self.headers.get("X-Auth-Token", "")
            if token and any(hmac.compare_digest(token.encode(), t.encode()) for t in list(sessions.values())):
                return True
            self._error(HTTPStatus.UNAUTHORIZED, "authentication required")
            return False

        def _path(self) -> str:
            return self.path.split("?", 1)[0].rstrip("/") or "/"

        def do_GET(self) -> None:
            path = self._path()
            if path == ROOT:  # the service root answers without credentials, as Redfish requires
                self._send(200, {
                    "@odata.id": f"{ROOT}/", "@odata.type": "#ServiceRoot.v1_5_0.ServiceRoot", "Id": "RootService",
                    "Name": "ha-ops lab BMC", "RedfishVersion": "1.8.0",
                    "UUID": "8f1c0a52-0b44-4c36-9d57-6a1d7e1b9e01",
                    "Systems": {"@odata.id": f"{ROOT}/Systems"},
                    "SessionService": {"@odata.id": f"{ROOT}/SessionService"},
                    "Links": {"Sessions": {"@odata.id": SESSIONS}},
                })  # fmt: skip
                return
            if not self._authorized():
                return
            names = machines.names()
            if path == f"{ROOT}/Systems":
                self._send(200, {
                    "@odata.id": f"{ROOT}/Systems",
                    "@odata.type": "#ComputerSystemCollection.ComputerSystemCollection",
                    "Name": "Computer System Collection",
                    "Members": [{"@odata.id": f"{ROOT}/Systems/{n}"} for n in names],
                    "Members@odata.count": len(names),
                })  # fmt: skip
                return
            name = path.removeprefix(f"{ROOT}/Systems/")
            if path.startswith(f"{ROOT}/Systems/") and name in names:
                self._send(200, _system(name, machines.powered_on(name)))
                return
            self._error(HTTPStatus.NOT_FOUND, f"no resource {path}")

        def _body(self) -> Any:
            length = int(self.headers.get("Content-Length") or 0)
            return json.loads(self.rfile.read(length) or b"{}")

        def _login(self) -> None:
            """POST to the Sessions collection: the credentials in the body, a token in X-Auth-Token."""
            try:
                given = self._body()
                ok = hmac.compare_digest(f"{given['UserName']}:{given['Password']}".encode(),
                                         f"{user}:{password}".encode())  # fmt: skip
            except (ValueError, KeyError, TypeError):
                ok = False
            if not ok:
                self._error(HTTPStatus.UNAUTHORIZED, "authentication failed")
                return
            session, token = secrets.token_hex(8), secrets.token_urlsafe(24)
            sessions[session] = token
            body = json.dumps({"@odata.id": f"{SESSIONS}/{session}", "Id": session, "UserName": user}).encode()
            self.send_response(HTTPStatus.CREATED)
            self.send_header("X-Auth-Token", token)
            self.send_header("Location", f"{SESSIONS}/{session}")
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_DELETE(self) -> None:
            path = self._path()
            if not self._authorized():
                return
            if not (path.startswith(f"{SESSIONS}/") and sessions.pop(path.removeprefix(f"{SESSIONS}/"), None)):
                self._error(HTTPStatus.NOT_FOUND, f"no session {path}")
                return
            self._send(HTTPStatus.NO_CONTENT)

        def do_POST(self) -> None:
            if self._path() == SESSIONS:
                self._login()
                return
            if not self._authorized():
                return
            path = self._path()
            prefix, suffix = f"{ROOT}/Systems/", "/Actions/ComputerSystem.Reset"
            name = path.removeprefix(prefix).removesuffix(suffix)
            if not (path.startswith(prefix) and path.endswith(suffix) and name in machines.names()):
                self._error(HTTPStatus.NOT_FOUND, f"no action {path}")
                return
            try:
                reset_type = self._body().get("ResetType")
            except (ValueError, AttributeError):
                self._error(HTTPStatus.BAD_REQUEST, "the body is not a JSON object")
                return
            if reset_type not in RESET_TYPES:
                self._error(HTTPStatus.BAD_REQUEST, f"ResetType {reset_type!r} is not one of {', '.join(RESET_TYPES)}")
                return
            log.warning("bmc: ComputerSystem.Reset %s %s", reset_type, name)  # the BMC's own record of each reset
            try:
                machines.reset(name, reset_type)
            except Exception as exc:  # a node that does not come back: the BMC did its part
                log.warning("bmc: %s %s: %s", reset_type, name, exc)
            self._send(HTTPStatus.NO_CONTENT)

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.warning("bmc: a request from %s failed", client_address, exc_info=True)  # not a bare print to stderr


class Bmc:
    """The Redfish service on `address:port` (port 0: any free one), served from its own threads."""

    def __init__(self, machines: Machines, user: str, password: str, address: str = "127.0.0.1", port: int = 0) -> None:
        self.server = _Server((address, port), make_handler(machines, user, password))
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="lab-bmc", daemon=True)  # fmt: skip

    @property
    def open_sessions(self) -> int:
        """Sessions logged in and not yet logged out: a client that leaks them fills a real BMC's few slots."""
        return len(self.server.RequestHandlerClass.open_sessions)  # type: ignore[attr-defined]

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> Bmc:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(5)


class DictMachines:
    """Machines as a dictionary of power states: for the BMC's own tests, and what a reset would do to each."""

    def __init__(self, on: dict[str, bool], on_reset: Callable[[str, str], None] | None = None) -> None:
        self.on = on
        self.on_reset = on_reset

    def names(self) -> list[str]:
        return list(self.on)

    def powered_on(self, name: str) -> bool:
        return self.on[name]

    def reset(self, name: str, reset_type: str) -> None:
        self.on[name] = reset_type not in ("ForceOff", "GracefulShutdown")
        if self.on_reset:
            self.on_reset(name, reset_type)


# --- the lab's BMC service ---------------------------------------------------------------------------------------
PORT = 8000
USER = "admin"


def password_file(ctx: LabContext) -> Path:
    return ctx.paths.root / "bmc" / "password"


def url(ctx: LabContext) -> str:
    """On the operator's end of the management network, where a cluster's BMCs are reached."""
    return f"http://{mgmt.operator_address(ctx)}:{PORT}"


def prepare(ctx: LabContext) -> None:
    """A password of the lab's own (kept; readable by root only), which the lab's inventory names by file."""
    path = password_file(ctx)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.parent.chmod(0o700)
        write_atomic(path, secrets.token_urlsafe(18) + "\n", mode=0o600)


def service(ctx: LabContext) -> ServiceDef:
    argv = [sys.executable, "-m", "ha_ops", "lab", "bmc", "--name", ctx.name,
            "--password-file", str(password_file(ctx))]  # fmt: skip
    return ServiceDef("host", "bmc", argv, ctx.paths.host_logs / "bmc.log")


class LabMachines:
    """The lab's hosts as a BMC sees them: a reset powers a node off or boots it (ha_ops.lab.node)."""

    def __init__(self, lab: Lab) -> None:
        self.lab = lab

    def names(self) -> list[str]:
        return self.lab.ctx.host_names()

    def powered_on(self, name: str) -> bool:
        return self.lab.node(name).power_is_on()

    def reset(self, name: str, reset_type: str) -> None:
        node = self.lab.node(name)
        if reset_type in ("ForceOff", "GracefulShutdown"):
            node.power_off()
        elif reset_type in ("ForceRestart", "PowerCycle") or not node.power_is_on():
            node.power_cycle()  # "On" of a node that is on changes nothing, as on a real BMC
