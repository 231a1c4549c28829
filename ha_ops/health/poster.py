"""The agent's reports to the controllers: POSTed over kept-alive HTTP/1.1 connections (mutual TLS with the agent's
own, rotated certificate), to whichever controller leads."""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import urllib.parse
from typing import Any

from ha_ops.health.report import AgentReport
from ha_ops.security.tls import CertificateContext, ReloadingContext


class _KeptConnections:
    """One HTTP/1.1 connection per controller URL, kept alive across reports: a 25,000-node fleet's heartbeats are
    2,500 reports a second, and a TLS handshake per report was a fifth to a third of the controller's work (issue
    43). A connection the controller closed meanwhile (its idle timeout, a restart) is opened again once."""

    def __init__(self, timeout: float, context: ReloadingContext | CertificateContext | None,
                 source_address: str | None = None) -> None:  # fmt: skip
        self.timeout, self.context = timeout, context
        self.source = (source_address, 0) if source_address else None
        self._open: dict[str, http.client.HTTPConnection] = {}

    def post(self, url: str, body: bytes) -> tuple[int, bytes]:
        """The answer's status and body (read whole, so the connection can carry the next request)."""
        parts = urllib.parse.urlsplit(url)
        conn = self._open.pop(url, None)
        reused = conn is not None
        while True:
            if conn is None:
                conn, reused = self._connect(parts), False
            try:
                conn.request("POST", parts.path or "/", body, {"Content-Type": "application/json"})
                response = conn.getresponse()
                answer = response.read()
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                # A kept connection the controller closed meanwhile (its idle deadline, a restart) fails the next
                # request however the close reads: RemoteDisconnected, a reset, a broken pipe, or over TLS "EOF
                # occurred in violation of protocol". Send it again once on a new connection (which is not `reused`:
                # no second retry); a report sent twice is the same heartbeat. Not after a timeout: that controller
                # is slow, not gone, and the next URL is the better try.
                if reused and not isinstance(exc, TimeoutError):
                    conn = None
                    continue
                raise OSError(str(exc) or type(exc).__name__) from None
            if response.will_close:
                conn.close()
            else:
                self._open[url] = conn
            return response.status, answer

    def close(self) -> None:
        for conn in self._open.values():
            conn.close()
        self._open.clear()

    def _connect(self, parts: urllib.parse.SplitResult) -> http.client.HTTPConnection:
        host, port = parts.hostname or "localhost", parts.port
        if parts.scheme == "https":
            context = self.context.get() if self.context is not None else ssl.create_default_context()
            return http.client.HTTPSConnection(host, port, timeout=self.timeout, source_address=self.source,
                                               context=context)  # fmt: skip
        return http.client.HTTPConnection(host, port, timeout=self.timeout, source_address=self.source)


class HttpPoster:
    """POST reports to the controller that leads: a standby answers 503, so the next URL is tried; the one that
    accepted is tried first next time. With `context`, over mutual TLS with this agent's (rotated) certificate;
    the connection to each controller kept alive (_KeptConnections). `source_address`: the address its connections
    come from (a host with several; the ingestion benchmark's agents, one loopback address each)."""

    def __init__(self, urls: list[str], timeout: float, context: ReloadingContext | CertificateContext | None = None,
                 source_address: str | None = None) -> None:  # fmt: skip
        self.order = list(urls)
        self.connections = _KeptConnections(timeout, context, source_address)
        self.lock = threading.Lock()

    def __call__(self, report: AgentReport) -> dict[str, Any]:
        """The accepting controller's answer (its JSON object; {} if it is none)."""
        body = json.dumps(report.to_json()).encode()
        errors = []
        with self.lock:
            order = self.order
            for url in list(order):
                try:
                    status, answer = self.connections.post(url, body)
                except OSError as exc:
                    # No answer (down, or frozen): try it last from now on, so one dead controller costs one timeout.
                    errors.append(f"{url}: {exc}")
                    order.remove(url)
                    order.append(url)
                    continue
                if status >= 300:  # answered: a standby (503) or a refusal
                    errors.append(f"{url}: HTTP {status}")
                    continue
                order.remove(url)
                order.insert(0, url)
                return _object(answer)
        raise ConnectionError("no controller accepted the report: " + "; ".join(errors))

    def close(self) -> None:
        with self.lock:
            self.connections.close()


def _object(body: bytes) -> dict[str, Any]:
    try:
        answer = json.loads(body)
    except ValueError:  # (UnicodeDecodeError too)
        return {}
    return answer if isinstance(answer, dict) else {}
