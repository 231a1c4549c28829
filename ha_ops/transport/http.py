"""HTTP over a connection someone else opens: a socket inside a lab namespace, or a channel an SSH server opens to
a service on its side (how an operator reaches Prometheus or the controller behind a cluster's bastion)."""

from __future__ import annotations

import http.client
import socket
import ssl
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from ha_ops.transport.tls_stream import TlsStream

# (host, port, timeout) -> an object with sendall, makefile, settimeout and close (a socket or a paramiko Channel).
Connect = Callable[[str, int, float], Any]


def request(
    connect: Connect, method: str, url: str, body: bytes | None = None, headers: dict[str, str] | None = None,
    timeout: float = 5.0, context: ssl.SSLContext | None = None,
) -> tuple[int, bytes]:  # fmt: skip
    """One request over a connection `connect` opens; an https URL over TLS with `context` (the caller's certificate
    and the CA), on a socket or through a stream such as an SSH channel."""
    parts = urlsplit(url)
    secure = parts.scheme == "https"
    if secure and context is None:
        raise ValueError(f"{url}: https needs a TLS context (the caller's certificate and the CA)")
    host, port = parts.hostname or "127.0.0.1", parts.port or (443 if secure else 80)
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    raw = connect(host, port, timeout)
    raw.settimeout(timeout)
    if secure:
        assert context is not None
        raw = (
            context.wrap_socket(raw, server_hostname=host)
            if isinstance(raw, socket.socket)
            else TlsStream(raw, context, server_hostname=host)
        )
    conn.sock = _Held(raw)
    try:
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()
        raw.close()


class _Held:
    """The connection, with close() left to `request`. http.client closes its connection as soon as an HTTP/1.0
    response's headers are in, counting on the socket to stay readable through the file it made; a paramiko
    Channel does not, and would drop a body still in flight."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw

    def close(self) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)
