"""The agent's HTTP port: its Prometheus metrics, and `/healthz` for the kubelet's probes.

prometheus_client's own `start_http_server` answers every path with the metrics, so a probe there says only that
the HTTP thread runs. `/healthz` says whether the agent still sweeps: 200 while a sweep ended within `stall_s`
(or the agent started within it), else 503, so that a sweep stuck for good (a hung NVML call, a deadlock) has the
kubelet restart the agent rather than leave a node silently unwatched. The metrics are prometheus_client's WSGI
app, unchanged.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

HEALTH_PATH = "/healthz"


def sweeping(last_sweep: Callable[[], float | None], started: float, stall_s: float,
             clock: Callable[[], float] = time.monotonic) -> Callable[[], bool]:  # fmt: skip
    """Alive while the last sweep (monotonic seconds; None before the first) or the start is within stall_s."""

    def alive() -> bool:
        last = last_sweep()
        return clock() - (started if last is None else max(last, started)) <= stall_s

    return alive


def agent_app(metrics_app: Callable[..., Iterable[bytes]], alive: Callable[[], bool]) -> Callable[..., Iterable[bytes]]:
    """`/healthz` answered from `alive`; every other path is the metrics app's."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != HEALTH_PATH:
            return metrics_app(environ, start_response)
        ok = alive()
        body = b"sweeping\n" if ok else b"no sweep ended within the stall time\n"
        status = "200 OK" if ok else "503 Service Unavailable"
        start_response(status, [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
        return [body]

    return app


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes and probes every few seconds are not worth a log line each."""


def serve(address: str, port: int, registry: object, alive: Callable[[], bool]) -> WSGIServer:
    """Serve the metrics and /healthz on a daemon thread; the server is returned so that a caller may shut it."""
    from prometheus_client import make_wsgi_app  # only the long-running agent serves
    from prometheus_client.exposition import ThreadingWSGIServer

    class Server(ThreadingWSGIServer):
        address_family = socket.AF_INET6 if ":" in address else socket.AF_INET

    httpd = make_server(address, port, agent_app(make_wsgi_app(registry), alive), Server,  # type: ignore[arg-type]
                        handler_class=_QuietHandler)  # fmt: skip
    threading.Thread(target=httpd.serve_forever, name="agent-http", daemon=True).start()
    return httpd
