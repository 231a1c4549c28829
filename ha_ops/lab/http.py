"""HTTP GET/POST to a service inside a lab namespace, over a socket opened in that namespace."""

from __future__ import annotations

import http.client
from urllib.parse import urlsplit

from ha_ops.lab.netns import connect_in


def _request(
    netns: str, method: str, url: str, body: bytes | None, headers: dict[str, str], timeout: float
) -> tuple[int, bytes]:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    conn.sock = connect_in(netns, (host, port), timeout=timeout)
    conn.sock.settimeout(timeout)
    try:
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def http_get(netns: str, url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    return _request(netns, "GET", url, None, {}, timeout)


def http_post(
    netns: str, url: str, body: bytes, content_type: str = "application/json", timeout: float = 5.0
) -> tuple[int, bytes]:
    return _request(netns, "POST", url, body, {"Content-Type": content_type}, timeout)
