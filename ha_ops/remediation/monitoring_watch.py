"""The controller's watch over the monitoring: is Prometheus answering, and the alert it raises when not."""

from __future__ import annotations

import json
import logging
import socket
import time

from ha_ops.monitoring.web import UNANSWERED, MonitoringSession
from ha_ops.remediation.config import MonitoringWatch

log = logging.getLogger(__name__)

ALERT_NAME = "HaOpsPrometheusDown"


def direct(host: str, port: int, timeout: float) -> socket.socket:
    return socket.create_connection((host, port), timeout=timeout)


def session(watch: MonitoringWatch) -> MonitoringSession:
    """The controller's connections to its monitoring, with the certificate and password `watch.client` names."""
    return MonitoringSession(watch.client)


def prometheus_healthy(watch: MonitoringWatch, timeout: float = 1.0, via: MonitoringSession | None = None) -> bool:
    try:
        status, _ = (via or session(watch)).request(direct, "GET", watch.prometheus_url.rstrip("/") + "/-/healthy",
                                                    timeout=timeout)  # fmt: skip
    except UNANSWERED:
        return False
    return status == 200


def raise_alert(
    watch: MonitoringWatch, controller: str, since: float, timeout: float = 1.0, via: MonitoringSession | None = None
) -> bool:
    """Post HaOpsPrometheusDown to Alertmanager (its v2 API; the alert lives while it is re-posted). Best effort:
    Alertmanager may be down too, which the controller's own state and metric still show."""
    if watch.alertmanager_url is None:
        return False
    alert = {
        "labels": {"alertname": ALERT_NAME, "severity": "critical", "source": controller},
        "annotations": {
            "summary": f"Prometheus has not answered since {time.strftime('%H:%M:%S', time.gmtime(since))} UTC",
            "runbook": "runbooks/monitoring-outage.md",
        },
        "startsAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(since)),
        "endsAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3 * watch.poll_s + 10)),
    }
    url = watch.alertmanager_url.rstrip("/") + "/api/v2/alerts"
    try:
        status, answer = (via or session(watch)).request(direct, "POST", url, json.dumps([alert]).encode(), timeout)
    except UNANSWERED as exc:
        log.warning("cannot raise %s on Alertmanager: %s", ALERT_NAME, exc)
        return False
    if status != 200:
        log.warning("Alertmanager refused %s: %s %s", ALERT_NAME, status, answer[:200].decode(errors="replace"))
    return status == 200
