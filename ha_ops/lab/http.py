"""HTTP GET/POST to a service inside a lab namespace, over a socket opened in that namespace."""

from __future__ import annotations

import ssl

from ha_ops.lab.netns import connect_in
from ha_ops.transport.http import request


def _request(
    netns: str, method: str, url: str, body: bytes | None, headers: dict[str, str], timeout: float,
    context: ssl.SSLContext | None,
) -> tuple[int, bytes]:  # fmt: skip
    def connect(host: str, port: int, timeout: float):  # -> socket.socket
        return connect_in(netns, (host, port), timeout=timeout)

    return request(connect, method, url, body, headers, timeout, context)


def http_get(netns: str, url: str, timeout: float = 5.0, context: ssl.SSLContext | None = None) -> tuple[int, bytes]:
    """GET `url` from inside `netns`; an https URL over TLS with `context` (the caller's certificate)."""
    return _request(netns, "GET", url, None, {}, timeout, context)


def http_post(
    netns: str, url: str, body: bytes, content_type: str = "application/json", timeout: float = 5.0,
    context: ssl.SSLContext | None = None,
) -> tuple[int, bytes]:  # fmt: skip
    return _request(netns, "POST", url, body, {"Content-Type": content_type}, timeout, context)
