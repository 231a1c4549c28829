"""The controller's watch over the monitoring, against a real HTTP server on loopback standing in for Prometheus and
Alertmanager: health polls, and the HaOpsPrometheusDown alert in Alertmanager's v2 format."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ha_ops.remediation.config import MonitoringWatch
from ha_ops.remediation.monitoring_watch import ALERT_NAME, prometheus_healthy, raise_alert


class Fake(BaseHTTPRequestHandler):
    healthy = True
    posted: list = []

    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/-/healthy" and Fake.healthy else 503)
        self.end_headers()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        Fake.posted.append((self.path, json.loads(body)))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    Fake.healthy, Fake.posted = True, []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Fake)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_healthy_unhealthy_and_unreachable(server: str) -> None:
    watch = MonitoringWatch(prometheus_url=server)
    assert prometheus_healthy(watch)
    Fake.healthy = False
    assert not prometheus_healthy(watch)
    assert not prometheus_healthy(MonitoringWatch(prometheus_url="http://127.0.0.1:9"))  # nothing listens


def test_the_alert_reaches_alertmanager_with_a_start_and_an_end(server: str) -> None:
    watch = MonitoringWatch(prometheus_url="http://127.0.0.1:9", alertmanager_url=server, poll_s=1)
    since = time.time() - 30
    assert raise_alert(watch, "ctl1", since=since)
    [(path, alerts)] = Fake.posted
    assert path == "/api/v2/alerts"
    [alert] = alerts
    assert alert["labels"] == {"alertname": ALERT_NAME, "severity": "critical", "source": "ctl1"}
    assert alert["startsAt"] == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(since))
    assert alert["endsAt"] > time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())  # re-posted before it ends


def test_no_alertmanager_configured_or_reachable_is_not_an_error() -> None:
    assert not raise_alert(MonitoringWatch(prometheus_url="http://127.0.0.1:9"), "ctl1", since=0.0)
    down = MonitoringWatch(prometheus_url="http://127.0.0.1:9", alertmanager_url="http://127.0.0.1:9")
    assert not raise_alert(down, "ctl1", since=0.0)
