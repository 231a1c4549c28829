"""An HTTP/1.1 server on one asyncio event loop, for an API that thousands of callers keep connections to and that
no caller may starve (the controller's: every agent of a 25,000-node fleet reports every 10 s).

Why this shape: a thread per connection (http.server) cannot hold 25,000 kept-alive connections, and a caller that
never finishes its TLS handshake or its request held one of its threads for good (issue 44: 1,000 silent
connections stopped the API). Here the accepting, the TLS handshake and the reading of each request run on the loop
under deadlines, and only a complete request reaches a worker thread (a handler may wait for the controller's group
commit). h11 parses HTTP/1.1: the sans-I/O state machine of httpcore and uvicorn (keep-alive, pipelining, chunked
bodies, HTTP/1.0 callers), well kept and already installed with lightkube's httpx. uvicorn or hypercorn would bring
an ASGI application model the handlers do not need, and neither caps connections per peer or per certificate.

Limits (Limits): the handshake within `handshake_s`; a request from its first byte to the end of its body within
`request_s` (a whole-request deadline, not one per read: a request trickled a byte at a time ends there); a
kept-alive connection with no request closed after `idle_s`; at most `per_address` connections from one address,
`per_identity` with one certificate's name, `connections` in all (more are closed at once, before any handshake).
Routes answer cheap requests (a health probe) on the loop itself, refuse a request on its headers before its body
is read, and hand the rest to `workers` threads.
"""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import json
import logging
import resource
import socket
import ssl
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Protocol

import h11
from pydantic import Field

from ha_ops.security.tls import Identity, identity_of
from ha_ops.util.models import ConfigModel

log = logging.getLogger(__name__)
READ_CHUNK = 64 << 10
# asyncio gives each TLS connection a read buffer of 256 KiB (SSLProtocol.max_size), filled with zeros when made:
# 6.4 GB for 25,000 agents' kept connections. Two TLS records (16 KiB of plaintext each) serve a report as well.
asyncio.sslproto.SSLProtocol.max_size = 32 << 10
MAX_HEADERS_BYTES = 16 << 10


class Limits(ConfigModel):
    """What one caller may hold of the server (the controller's config: `api`)."""

    handshake_s: float = Field(5.0, gt=0, le=60, description="A TLS handshake must end within this.")
    request_s: float = Field(10.0, gt=0, le=300, description="A request, from its first byte to the end of its body "
                             "(and a new connection's first request), must arrive within this.")  # fmt: skip
    idle_s: float = Field(60.0, gt=0, le=3600, description="A kept connection with no request is closed after this "
                          "(an agent reports every 10 s: its connection stays open between reports).")  # fmt: skip
    per_address: int = Field(64, ge=1, description="Connections from one address (agents behind one NAT address: "
                             "raise it).")  # fmt: skip
    per_identity: int = Field(16, ge=1, description="Connections with one certificate's name.")
    connections: int = Field(60_000, ge=1, description="Connections in all (never more than the open-files limit "
                             "allows; at the cap a new one closes the kept one that went idle last).")  # fmt: skip
    workers: int = Field(256, ge=1, le=4096, description="Threads that handle complete requests (a report's waits "
                         "for the group commit that holds its decision).")  # fmt: skip


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]  # names in lower case
    body: bytes
    identity: Identity | None  # the caller's verified certificate, with TLS
    presented: bytes | None  # that certificate (DER)
    peer: str


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()  # more (Retry-After)


class Routes(Protocol):
    def early(self, method: str, path: str, headers: dict[str, str], identity: Identity | None) -> Response | None:
        """On the loop, once the headers are in: an answer now (a refusal, or a request as cheap as a health
        probe), or None to read the body and hand the request to `handle`. Must not block."""
        ...

    def body_limit(self, path: str) -> int: ...

    def handle(self, request: Request) -> Response:
        """In a worker thread: the answer to a complete request."""
        ...


def open_files_limit() -> int:
    """The open-files limit, its soft value raised to the hard one (systemd's LimitNOFILE; a shell's soft default of
    1,024 would refuse most of a large fleet's connections)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


@dataclass
class _Caps:
    """Open connections by peer address and by certificate name, and in all (the loop's thread alone uses them)."""

    limits: Limits
    total: int = 0
    by_address: Counter[str] = field(default_factory=Counter)
    by_identity: Counter[str] = field(default_factory=Counter)

    def admit(self, address: str, room_made: bool = False) -> bool:
        """`room_made`: an idle connection is being closed to make room (its release follows)."""
        full = self.total >= self.limits.connections and not room_made
        if full or self.by_address[address] >= self.limits.per_address:
            return False
        self.total += 1
        self.by_address[address] += 1
        return True

    def admit_identity(self, name: str) -> bool:
        if self.by_identity[name] >= self.limits.per_identity:
            return False
        self.by_identity[name] += 1
        return True

    def release(self, address: str, name: str | None) -> None:
        self.total -= 1
        for counter, key in ((self.by_address, address), (self.by_identity, name)):
            if key is not None and key in counter:
                counter[key] -= 1
                if counter[key] <= 0:
                    del counter[key]


class HttpFront:
    """Serves `routes` on address:port (TLS with `context()`'s context at each handshake, so a rotated
    certificate serves the next one). The interface of socketserver's servers: serve_forever in a thread of its
    own, shutdown from another, server_close, server_address."""

    def __init__(self, routes: Routes, address: str, port: int, context: Callable[[], ssl.SSLContext] | None = None,
                 limits: Limits | None = None, name: str = "http") -> None:  # fmt: skip
        self.routes, self.context, self.name = routes, context, name
        limits = limits or Limits()
        reserve = 256  # (files the rest of the process needs: state, logs, clients)
        self.limits = limits.model_copy(update={"connections": min(limits.connections, open_files_limit() - reserve)})
        self._socket = socket.create_server((address, port), backlog=4096)
        self.server_address = self._socket.getsockname()
        self._loop = asyncio.new_event_loop()
        self._stopping: asyncio.Future[None] = self._loop.create_future()
        self._done = threading.Event()
        self._workers = ThreadPoolExecutor(self.limits.workers, thread_name_prefix=f"{name}-worker")
        self._caps = _Caps(self.limits)
        self._connections: set[asyncio.Task[None]] = set()
        # Kept connections waiting for their next request, the one that went idle last at the end: at the cap, a
        # new connection closes that one. Agents report on a period, so it is the one whose next report is furthest
        # away: with more agents than the open-files limit allows connections, the fewest reconnect.
        self._idle: OrderedDict[asyncio.Task[None], None] = OrderedDict()

    # --- socketserver's interface --------------------------------------------------------------------------------
    def serve_forever(self, poll_interval: float | None = None) -> None:
        try:
            if not self._stopping.done():
                self._loop.run_until_complete(self._serve())
        finally:
            self._done.set()

    def shutdown(self) -> None:
        """Stop serving and wait until serve_forever has returned (at most 10 s: it may never have started)."""
        if self._loop.is_closed():
            return  # (closed already: stopped long ago)
        self._loop.call_soon_threadsafe(self._stop)
        self._done.wait(10)

    def server_close(self) -> None:
        self._socket.close()
        self._workers.shutdown(wait=False, cancel_futures=True)
        if not self._loop.is_running():
            self._loop.close()

    @property
    def open_connections(self) -> int:
        return self._caps.total

    # --- the loop ------------------------------------------------------------------------------------------------
    def _stop(self) -> None:
        if not self._stopping.done():
            self._stopping.set_result(None)

    async def _serve(self) -> None:
        server = await asyncio.start_server(self._connection, sock=self._socket, limit=READ_CHUNK)
        try:
            await self._stopping
        finally:
            server.close()
            for task in list(self._connections):
                task.cancel()
            await asyncio.gather(*self._connections, return_exceptions=True)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        address = str(writer.get_extra_info("peername")[0])
        if not self._caps.admit(address) and not self._make_room(address):
            log.warning("%s: refused a connection from %s (over the limit of connections)", self.name, address)
            self._connections.discard(task)
            writer.transport.abort()
            return
        name = None
        try:
            identity = presented = None
            if self.context is not None:
                await writer.start_tls(self.context(), ssl_handshake_timeout=self.limits.handshake_s)
                ssl_object = writer.get_extra_info("ssl_object")
                identity = identity_of(ssl_object.getpeercert())
                presented = ssl_object.getpeercert(binary_form=True)
                if identity is not None:
                    if not self._caps.admit_identity(identity.name):
                        log.warning("%s: refused a connection of %s (over %d with one certificate)", self.name,
                                    identity.name, self.limits.per_identity)  # fmt: skip
                        return
                    name = identity.name
            await self._requests(reader, writer, address, identity, presented)
        except (TimeoutError, ConnectionError, ssl.SSLError, OSError, h11.ProtocolError) as exc:
            # A caller refused at TLS (no certificate, another CA's, plain HTTP), too slow, or gone: one line.
            log.debug("%s: connection from %s ended: %s", self.name, address, exc or type(exc).__name__)
        except asyncio.CancelledError:
            pass
        finally:
            self._caps.release(address, name)
            self._connections.discard(task)
            self._idle.pop(task, None)
            writer.transport.abort()

    def _make_room(self, address: str) -> bool:
        """At the cap of connections in all: close the kept connection that went idle last, and admit this one."""
        if self._caps.total < self.limits.connections or not self._idle:
            return False
        if not self._caps.admit(address, room_made=True):
            return False  # (over its own address's cap: nothing closed for it)
        victim, _ = self._idle.popitem(last=True)
        victim.cancel()
        return True

    async def _requests(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, address: str,
                        identity: Identity | None, presented: bytes | None) -> None:  # fmt: skip
        """Requests on one connection, one after another, until either side closes it."""
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEADERS_BYTES)
        wait_s = self.limits.request_s  # (a connection that never sends a request is dropped as a slow one)
        while True:
            if conn.next_event() is h11.NEED_DATA:  # waiting for a request: closed after idle_s
                task = asyncio.current_task()
                assert task is not None
                self._idle[task] = None
                try:
                    async with asyncio.timeout(wait_s):
                        conn.receive_data(await reader.read(READ_CHUNK))
                finally:
                    self._idle.pop(task, None)
            try:
                async with asyncio.timeout(self.limits.request_s):  # from the request's first byte to its end
                    request = await self._read(reader, writer, conn, identity, presented, address)
            except h11.RemoteProtocolError as exc:  # not HTTP/1.1 as h11 reads it: answered, then closed
                if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                    await self._send(writer, conn, _error(exc.error_status_hint, f"bad request: {exc}"))
                return await _close(writer)
            if isinstance(request, Request):
                try:
                    response = await asyncio.get_running_loop().run_in_executor(self._workers, self.routes.handle,
                                                                                request)  # fmt: skip
                except Exception as exc:  # (the routes answer their own errors: this is a bug, not the caller's)
                    log.exception("%s: %s %s failed", self.name, request.method, request.path)
                    response = _error(500, type(exc).__name__)
                async with asyncio.timeout(self.limits.request_s):  # a caller that does not read its answer
                    await self._send(writer, conn, response)
            if request is None or conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                return await _close(writer)  # (the caller closed, HTTP/1.0 or `Connection: close`, a refusal)
            conn.start_next_cycle()
            wait_s = self.limits.idle_s

    async def _read(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, conn: h11.Connection,
                    identity: Identity | None, presented: bytes | None,
                    address: str) -> Request | Response | None:  # fmt: skip
        """The next request; or the answer the routes gave on its headers, sent already (the connection goes on
        only when that request had no body); or None when the caller closed the connection."""
        method = path = ""
        headers: dict[str, str] = {}
        body = bytearray()
        limit = 0
        early: Response | None = None
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await reader.read(READ_CHUNK))
            elif isinstance(event, h11.ConnectionClosed):
                return None
            elif isinstance(event, h11.Request):
                headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in event.headers}
                method, path = event.method.decode("ascii"), event.target.decode("latin-1")
                early = self.routes.early(method, path, headers, identity)
                limit = self.routes.body_limit(path)
                if early is None and _declared_length(headers) > limit:
                    early = _error(400, body_required(limit, headers.get("content-length", "")))
                if early is not None and (_declared_length(headers) or "transfer-encoding" in headers):
                    await self._send(writer, conn, early)  # refused before its body is read: then closed
                    return early
                if early is None and conn.they_are_waiting_for_100_continue:
                    writer.write(conn.send(h11.InformationalResponse(status_code=100, headers=[])))
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > limit:
                    early = _error(400, f"the body is over its limit of {limit} bytes")
                    await self._send(writer, conn, early)
                    return early
            elif isinstance(event, h11.EndOfMessage):
                if early is not None:
                    await self._send(writer, conn, early)
                    return early
                return Request(method, path, headers, bytes(body), identity, presented, address)

    async def _send(self, writer: asyncio.StreamWriter, conn: h11.Connection, response: Response) -> None:
        headers = [("Content-Type", response.content_type), ("Content-Length", str(len(response.body))),
                   ("Server", "ha-ops"), *response.headers]  # fmt: skip
        try:
            reason = HTTPStatus(response.status).phrase.encode()
        except ValueError:
            reason = b""
        writer.write(conn.send(h11.Response(status_code=response.status, headers=headers, reason=reason))
                     + conn.send(h11.Data(data=response.body)) + conn.send(h11.EndOfMessage()))  # fmt: skip
        await writer.drain()


async def _close(writer: asyncio.StreamWriter) -> None:
    """Close after the answer is sent (abort would drop what the transport still holds)."""
    writer.close()
    try:
        async with asyncio.timeout(1.0):
            await writer.wait_closed()
    except (TimeoutError, OSError, ssl.SSLError):
        pass


def body_required(limit: int, got: str) -> str:
    """What a request whose body is empty or over its path's limit is told."""
    return f"a JSON body of 1 byte to {limit} bytes is required (got {got})"


def _declared_length(headers: dict[str, str]) -> int:
    try:
        return int(headers.get("content-length") or 0)
    except ValueError:
        return 0  # (h11 refuses a Content-Length that is not a number before this)


def _error(status: int, message: str) -> Response:
    return Response(status, (json.dumps({"error": message}) + "\n").encode())
