"""The controllers' client finds the leader: a standby's 503 sends a request on to the next controller; a refusal
on the request's merits (4xx) is final, and says which controller refused and why."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ha_ops.errors import TransportError
from ha_ops.remediation.client import ControllerRefused, Controllers


def controller(status: int, body: bytes, asked: list[str]) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            asked.append(f"{self.server.server_address[1]}{self.path}")
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def asked() -> Iterator[list[str]]:
    yield []


def url(server: ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


def test_a_standby_sends_the_request_on_to_the_leader(asked: list[str]) -> None:
    standby = controller(503, b'{"error": "standby; the leader is ctl1"}', asked)
    leader = controller(200, b'{"ok": true}', asked)
    try:
        assert Controllers([url(standby), url(leader)], timeout=5).post("/v1/maintenance", {"node": "gpu1"}) == {
            "ok": True
        }
        assert len(asked) == 2
    finally:
        for server in (standby, leader):
            server.shutdown()
            server.server_close()


def test_a_refusal_on_its_merits_is_final_and_names_the_controller(asked: list[str]) -> None:
    refusing = controller(403, b'{"error": "operators only"}', asked)
    other = controller(200, b'{"ok": true}', asked)
    try:
        with pytest.raises(TransportError) as caught:
            Controllers([url(refusing), url(other)], timeout=5).post("/v1/maintenance", {"node": "gpu1"})
        assert asked == [f"{refusing.server_address[1]}/v1/maintenance"]  # the other was not asked
        assert f"{url(refusing)}/v1/maintenance: HTTP 403" in str(caught.value) and "operators only" in str(
            caught.value
        )
    finally:
        for server in (refusing, other):
            server.shutdown()
            server.server_close()


def test_a_refusal_carries_its_status() -> None:
    assert ControllerRefused("x: HTTP 409: busy", 409).status == 409
