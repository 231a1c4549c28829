"""The controller's watch over the monitoring: is Prometheus answering, and the alert it raises when not."""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request

from ha_ops.remediation.config import MonitoringWatch

log = logging.getLogger(__name__)

ALERT_NAME = "HaOpsPrometheusDown"


def prometheus_healthy(watch: MonitoringWatch, timeout: float = 1.0) -> bool:
    try:
        with urllib.request.urlopen(watch.prometheus_url.rstrip("/") + "/-/healthy", timeout=timeout) as answer:
            return answer.status == 200
    except (OSError, urllib.error.URLError):
        return False


def raise_alert(watch: MonitoringWatch, controller: str, since: float, timeout: float = 1.0) -> bool:
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
    request = urllib.request.Request(
        watch.alertmanager_url.rstrip("/") + "/api/v2/alerts",
        data=json.dumps([alert]).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status == 200
    except (OSError, urllib.error.URLError) as exc:
        log.warning("cannot raise %s on Alertmanager: %s", ALERT_NAME, exc)
        return False
