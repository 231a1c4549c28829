"""The event-driven HTTP server (ha_ops.util.http_front) with real sockets on 127.0.0.1: connections kept alive,
the whole-request, handshake and idle deadlines, the caps per address and per certificate, and the health probe
answered while every worker is busy (issue 44's findings 1-3; issue 43's keep-alive)."""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ha_ops.health.poster import HttpPoster
from ha_ops.health.report import AgentReport
from ha_ops.security import tls
from ha_ops.security.pki import CertificateAuthority
from ha_ops.security.tls import Identity, ReloadingContext, TlsFiles
from ha_ops.util.http_front import HttpFront, Limits, Request, Response
from tests.unit.test_controller_tls import issue


class Echo:
    """Routes: /healthz on the loop; /slow waits for `release`; the rest echoes who asked and what."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.handled: list[Request] = []

    def early(self, method: str, path: str, headers: dict[str, str], identity: Identity | None) -> Response | None:
        return Response(200, b'{"ok": true}') if path == "/healthz" else None

    def body_limit(self, path: str) -> int:
        return 1000

    def handle(self, request: Request) -> Response:
        self.handled.append(request)
        if request.path == "/slow":
            self.release.wait(10)
        who = request.identity.name if request.identity else "-"
        return Response(200, f"{request.method} {request.path} {len(request.body)} {who}".encode(), "text/plain")


@contextmanager
def front(routes: Echo, limits: Limits, context: ReloadingContext | None = None, port: int = 0) -> Iterator[HttpFront]:
    server = HttpFront(routes, "127.0.0.1", port, context.get if context else None, limits)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        routes.release.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


def closed_within(sock: socket.socket, seconds: float) -> float:
    """How long until the server closed `sock` (EOF or reset), failing past `seconds`."""
    started = time.monotonic()
    sock.settimeout(seconds)
    try:
        while sock.recv(100):
            pass
    except ConnectionResetError:
        pass
    return time.monotonic() - started


def test_one_connection_carries_many_requests() -> None:
    routes = Echo()
    with front(routes, Limits()) as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=5)
        for i in range(3):
            conn.request("POST", f"/r{i}", b"x" * i)
            answer = conn.getresponse()
            assert (answer.status, answer.read()) == (200, f"POST /r{i} {i} -".encode())
        assert server.open_connections == 1
        conn.close()


def test_a_request_trickled_byte_by_byte_is_dropped_at_its_whole_request_deadline() -> None:
    """Each byte arrives well within any per-read timeout; the request as a whole does not (issue 44, finding 2)."""
    with front(Echo(), Limits(request_s=0.5)) as server:
        sock = socket.create_connection(("127.0.0.1", server.server_address[1]))
        request = b"POST /r HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
        started = time.monotonic()
        with pytest.raises((BrokenPipeError, ConnectionResetError)):
            for byte in request:
                sock.send(bytes([byte]))
                time.sleep(0.05)
        assert 0.4 < time.monotonic() - started < 5.0
        sock.close()


def test_a_silent_connection_holds_no_worker_and_is_closed_at_the_request_deadline_an_idle_one_at_idle_s() -> None:
    routes = Echo()
    with front(routes, Limits(idle_s=0.3, request_s=1.0, workers=1)) as server:
        silent = [socket.create_connection(("127.0.0.1", server.server_address[1])) for _ in range(50)]
        conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=5)
        conn.request("GET", "/x")
        assert conn.getresponse().read() == b"GET /x 0 -"  # (50 silent callers, one worker: served)
        assert closed_within(conn.sock, 5) < 0.9  # kept after its request, idle: closed after idle_s
        assert 0.5 < closed_within(silent[0], 5) < 5.0  # never sent a request: closed at request_s
        for sock in silent:
            sock.close()
        conn.close()


def test_connections_over_the_cap_of_one_address_are_closed_at_once() -> None:
    with front(Echo(), Limits(per_address=3)) as server:
        held = [socket.create_connection(("127.0.0.1", server.server_address[1])) for _ in range(3)]
        time.sleep(0.2)
        extra = socket.create_connection(("127.0.0.1", server.server_address[1]))
        assert closed_within(extra, 2) < 1.0
        assert server.open_connections == 3
        # Another address of the host is another peer: served.
        other = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=5,
                                           source_address=("127.0.0.2", 0))  # fmt: skip
        other.request("GET", "/y")
        assert other.getresponse().status == 200
        for sock in [*held, extra]:
            sock.close()
        other.close()


def test_at_the_cap_a_new_connection_closes_the_kept_one_that_went_idle_last() -> None:
    """More agents than connections allowed (the open-files limit): each new one closes the kept connection whose
    request ended last (periodic reporters: the one whose next report is furthest away); the poster that finds its
    connection closed sends again on a new one."""
    with front(Echo(), Limits(connections=3)) as server:
        port = server.server_address[1]
        kept = [http.client.HTTPConnection("127.0.0.1", port, timeout=5) for _ in range(3)]
        for conn in kept:
            conn.request("GET", "/a")
            conn.getresponse().read()
        time.sleep(0.1)
        fourth = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        fourth.request("GET", "/b")
        assert fourth.getresponse().read() == b"GET /b 0 -"
        assert closed_within(kept[2].sock, 2) < 1.0  # (the last to go idle)
        assert server.open_connections == 3
        kept[0].request("GET", "/c")  # the others still kept
        assert kept[0].getresponse().status == 200
        for conn in [*kept, fourth]:
            conn.close()


def test_the_health_probe_is_answered_while_every_worker_is_busy() -> None:
    routes = Echo()
    with front(routes, Limits(workers=1)) as server:
        port = server.server_address[1]
        slow = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        slow.request("GET", "/slow")
        time.sleep(0.2)
        probe = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        started = time.monotonic()
        probe.request("GET", "/healthz")
        assert probe.getresponse().read() == b'{"ok": true}'
        assert time.monotonic() - started < 1.0
        routes.release.set()
        assert slow.getresponse().status == 200
        slow.close()
        probe.close()


def test_a_body_over_its_limit_is_refused_on_its_length_and_an_http10_caller_is_answered() -> None:
    with front(Echo(), Limits()) as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=5)
        conn.putrequest("POST", "/r")
        conn.putheader("Content-Length", "5000")
        conn.endheaders()
        answer = conn.getresponse()
        assert answer.status == 400 and b"1 byte to 1000 bytes" in answer.read()
        conn.close()
        sock = socket.create_connection(("127.0.0.1", server.server_address[1]))
        sock.sendall(b"GET /old HTTP/1.0\r\n\r\n")
        sock.settimeout(5)
        data = b""
        while chunk := sock.recv(1000):
            data += chunk
        assert data.startswith(b"HTTP/1.1 200") and data.endswith(b"GET /old 0 -")
        sock.close()


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, TlsFiles]:
    ca = CertificateAuthority(tmp_path / "ca")
    ca.ensure("ha-ops test CA")
    return {
        "server": issue(ca, "ctl1", "ctl1", ("ha-ops:controllers",), ("127.0.0.1",)),
        "n1": issue(ca, "n1", "n1", (tls.AGENTS,)),
    }


@pytest.mark.parametrize("over_tls", [False, True], ids=["http", "tls"])
@pytest.mark.parametrize("closed_by", ["idle deadline", "server restarted"])
def test_the_agents_poster_sends_again_once_when_the_server_closed_its_kept_connection(
    pki: dict[str, TlsFiles], over_tls: bool, closed_by: str
) -> None:
    # Over TLS a connection the server closed meanwhile fails the next request with "EOF occurred in violation of
    # protocol" (SSLEOFError), not RemoteDisconnected: the game day's agents lost three reports to it (ci of stop 52).
    routes = Echo()
    server_context = ReloadingContext(pki["server"], server=True) if over_tls else None
    client_context = ReloadingContext(pki["n1"], server=False) if over_tls else None
    with front(routes, Limits(idle_s=0.2), server_context) as server:
        port = server.server_address[1]
        scheme = "https" if over_tls else "http"
        poster = HttpPoster([f"{scheme}://127.0.0.1:{port}/r"], 5.0, client_context)
        report = AgentReport(node="n1", seq=1, agent_id="a", sent_at=0.0, state="healthy", action="none", reason="")
        poster(report)
        if closed_by == "idle deadline":
            time.sleep(0.6)  # (closed by the server as idle; the poster does not know yet)
            assert server.open_connections == 0
            poster(report.model_copy(update={"seq": 2}))
            assert server.open_connections == 1
        else:
            server.shutdown()
            server.server_close()
            with front(routes, Limits(), server_context, port) as again:
                poster(report.model_copy(update={"seq": 2}))
                assert again.open_connections == 1
        assert [r.body.count(b'"seq"') for r in routes.handled] == [1, 1]  # (each report once, on a new connection)
        poster.close()


def test_tls_handshake_deadline_identity_cap_and_the_agent_poster_keeping_its_connection(
    pki: dict[str, TlsFiles],
) -> None:
    routes = Echo()
    context = ReloadingContext(pki["server"], server=True)
    with front(routes, Limits(handshake_s=0.3, per_identity=2), context) as server:
        port = server.server_address[1]
        # A connection that never starts its handshake is dropped at the handshake deadline (issue 44, finding 1).
        silent = socket.create_connection(("127.0.0.1", port))
        assert 0.2 < closed_within(silent, 5) < 5.0
        silent.close()
        # The agent's poster: one connection, kept, for every report; its identity from its certificate.
        poster = HttpPoster([f"https://127.0.0.1:{port}/v1/reports"], 5.0, ReloadingContext(pki["n1"], server=False))
        report = AgentReport(node="n1", seq=1, agent_id="a", sent_at=0.0, state="healthy", action="none", reason="")
        for seq in range(1, 4):
            poster(report.model_copy(update={"seq": seq}))
        assert [r.identity.name for r in routes.handled if r.identity] == ["n1"] * 3
        assert server.open_connections == 1
        # At most per_identity connections with one certificate: the poster's, one more, then refused.
        client = ReloadingContext(pki["n1"], server=False).get()
        second = client.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname="127.0.0.1")
        third = client.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname="127.0.0.1")
        with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError, OSError)):
            third.sendall(b"GET /z HTTP/1.1\r\nHost: x\r\n\r\n")
            third.settimeout(2)
            if not third.recv(100):
                raise ConnectionResetError("closed")
        second.sendall(b"GET /z HTTP/1.1\r\nHost: x\r\n\r\n")
        second.settimeout(5)
        assert second.recv(100).startswith(b"HTTP/1.1 200")
        second.close()
        third.close()
        poster.close()


def test_the_agents_poster_returns_the_accepting_controllers_answer(pki: dict[str, TlsFiles]) -> None:
    """The answer carries the heartbeat the controller asks for (issue 43): a JSON object is returned as it is, any
    other answer as {}."""
    with front(Echo(), Limits(), ReloadingContext(pki["server"], server=True)) as server:
        port = server.server_address[1]
        report = AgentReport(node="n1", seq=1, agent_id="a", sent_at=0.0, state="healthy", action="none", reason="")
        for path, answer in (("/healthz", {"ok": True}), ("/v1/reports", {})):  # (Echo's text: no object)
            poster = HttpPoster([f"https://127.0.0.1:{port}{path}"], 5.0, ReloadingContext(pki["n1"], server=False))
            assert poster(report) == answer, path
            poster.close()
