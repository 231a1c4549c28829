"""Prometheus and Alertmanager on the monitoring node, configured from the spec.

With the spec's `remediation.tls` both serve over TLS and ask every caller for a certificate from the lab's CA and
the monitoring password (ha_ops.monitoring.web says why both): the operator, the controllers' watch, and Prometheus
itself (scraping itself and Alertmanager, posting alerts)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Literal

import bcrypt
import yaml

from ha_ops.lab import tls
from ha_ops.lab.context import LabContext, ServiceDef
from ha_ops.lab.controllers import base_urls
from ha_ops.lab.netns import connect_in
from ha_ops.lab.storage import EXPORTER_PORT
from ha_ops.lab.storage import enabled as storage_enabled
from ha_ops.monitoring import rules
from ha_ops.monitoring.web import MonitoringClient, MonitoringSession, hash_password, web_config

Server = Literal["prometheus", "alertmanager"]
SERVERS: tuple[Server, ...] = ("prometheus", "alertmanager")
USER = "ha-ops"  # the lab's one monitoring user: the operator, the controllers and Prometheus


def _mon(ctx: LabContext) -> tuple[str, int, int]:
    mon = ctx.spec.monitoring
    address = str(ctx.layout.node(mon.host.name).address)
    return address, mon.prometheus_port, mon.alertmanager_port


def _scheme(ctx: LabContext) -> str:
    return "https" if tls.enabled(ctx) else "http"


def prometheus_url(ctx: LabContext) -> str:
    address, port, _ = _mon(ctx)
    return f"{_scheme(ctx)}://{address}:{port}"


def alertmanager_url(ctx: LabContext) -> str:
    address, _, port = _mon(ctx)
    return f"{_scheme(ctx)}://{address}:{port}"


def password_file(ctx: LabContext) -> Path:
    """The monitoring password, drawn once per lab (0600, beside the lab's certificates)."""
    path = tls.folder(ctx) / "monitoring.password"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as out:
            out.write(secrets.token_urlsafe(24) + "\n")
    return path


def client(ctx: LabContext, identity: str = "operator") -> MonitoringClient | None:
    """How `identity` (`operator`, `controller-ctl1`, `prometheus`) calls Prometheus and Alertmanager; None
    without TLS (plain HTTP, no password)."""
    if not tls.enabled(ctx):
        return None
    return MonitoringClient(tls=tls.files(ctx, identity), username=USER, password_file=password_file(ctx))


_SESSIONS: dict[tuple[Path, str], MonitoringSession] = {}  # one per lab and caller: certificates loaded once


def request(
    ctx: LabContext, server: Server, path: str, method: str = "GET", body: bytes | None = None, timeout: float = 5.0,
    identity: str = "operator",
) -> tuple[int, bytes]:  # fmt: skip
    """A request to Prometheus or Alertmanager from inside the monitoring node, as `identity`."""
    key = (ctx.paths.root, identity)
    if key not in _SESSIONS:
        _SESSIONS[key] = MonitoringSession(client(ctx, identity))
    url = (prometheus_url(ctx) if server == "prometheus" else alertmanager_url(ctx)) + path
    netns = ctx.netns(ctx.spec.monitoring.host.name)
    return _SESSIONS[key].request(lambda h, p, t: connect_in(netns, (h, p), timeout=t), method, url, body, timeout)


def prometheus_duration(seconds: float) -> str:
    """A Prometheus duration: whole units only ("0.5s" is rejected), so fractions of a second go in ms."""
    if float(seconds).is_integer():
        return f"{int(seconds)}s"
    return f"{max(1, round(seconds * 1000))}ms"


def render_prometheus(ctx: LabContext) -> dict:
    mon = ctx.spec.monitoring
    address, prom_port, am_port = _mon(ctx)
    interval = prometheus_duration(mon.scrape_interval_s)
    # One target group per node, labelled with its name: alerts then say which node, not which address.
    agents = [
        {"targets": [f"{n.address}:{mon.agent_port}"], "labels": {"node": n.name}}
        for n in ctx.layout.nodes_with_role("gpu")
    ]
    controllers = [u.split("://", 1)[1] for u in base_urls(ctx)]
    # Over TLS, Prometheus scrapes the controllers with its own certificate (any of the CA's may read /metrics), and
    # itself and Alertmanager with the monitoring password too.
    secure = {"scheme": "https", "tls_config": _tls_config(ctx, "prometheus")} if tls.enabled(ctx) else {}
    own = own_client.prometheus_block() if (own_client := client(ctx, "prometheus")) else {}
    return {
        "global": {
            "scrape_interval": interval,
            "evaluation_interval": interval,
            "external_labels": {"cluster": ctx.name},
        },
        "alerting": {"alertmanagers": [{**own, "static_configs": [{"targets": [f"{address}:{am_port}"]}]}]},
        "rule_files": [str(ctx.paths.etc / "prometheus" / "rules.yml")],
        "scrape_configs": [
            {"job_name": "prometheus", **own, "static_configs": [{"targets": [f"{address}:{prom_port}"]}]},
            {"job_name": "alertmanager", **own, "static_configs": [{"targets": [f"{address}:{am_port}"]}]},
            {"job_name": "ha-ops-agent", "static_configs": agents},
            *(
                [{"job_name": "ha-ops-controller", **secure, "static_configs": [{"targets": controllers}]}]
                if controllers
                else []
            ),
            *(
                [{"job_name": "ha-ops-storage", "static_configs": [{"targets": [f"{address}:{EXPORTER_PORT}"]}]}]
                if storage_enabled(ctx)
                else []
            ),
        ],
    }


def _tls_config(ctx: LabContext, name: str) -> dict[str, str]:
    """Prometheus' and Alertmanager's client TLS settings for one of the lab's identities."""
    block = tls.config_block(ctx, name)
    return {"ca_file": block["ca_file"], "cert_file": block["cert_file"], "key_file": block["key_file"]}


def render_rules() -> dict:
    """The lab's rules: only the lab group, whose `for: 0s` rules the lab's tests and the remediation controller
    watch. The cluster group's node-level alerts would also reach the lab's controllers (their webhook) and change
    what they do; the monitoring role ships both groups."""
    return rules.render_rules(groups=[rules.LAB_GROUP])


def render_alertmanager(ctx: LabContext | None = None) -> dict:
    secure = {"http_config": {"tls_config": _tls_config(ctx, "alertmanager")}} if ctx and tls.enabled(ctx) else {}
    hooks = [{"url": f"{u}/v1/alerts", "send_resolved": True, **secure} for u in (base_urls(ctx) if ctx else [])]
    return {
        "route": {
            "receiver": "default",
            "group_by": ["alertname", "instance"],
            "group_wait": "0s",
            "group_interval": "1s",
            "repeat_interval": "1h",
        },
        "receivers": [{"name": "default", **({"webhook_configs": hooks} if hooks else {})}],
    }


def prepare(ctx: LabContext) -> None:
    etc = ctx.paths.etc
    (etc / "prometheus").mkdir(parents=True, exist_ok=True)
    (etc / "prometheus" / "prometheus.yml").write_text(yaml.safe_dump(render_prometheus(ctx), sort_keys=False))
    (etc / "prometheus" / "rules.yml").write_text(yaml.safe_dump(render_rules(), sort_keys=False))
    (etc / "alertmanager").mkdir(parents=True, exist_ok=True)
    (etc / "alertmanager" / "alertmanager.yml").write_text(yaml.safe_dump(render_alertmanager(ctx), sort_keys=False))
    if tls.enabled(ctx):
        users = {USER: _password_hash(ctx, etc / "prometheus" / "web.yml")}
        for server in SERVERS:
            config = web_config(tls.files(ctx, server), users)
            (etc / server / "web.yml").write_text(yaml.safe_dump(config, sort_keys=False))


def _password_hash(ctx: LabContext, earlier: Path) -> str:
    """The monitoring password's bcrypt hash: the one an earlier prepare wrote while it still matches (a lab
    brought up again rewrites its web configs unchanged), else a new one."""
    password = password_file(ctx).read_text().strip()
    try:
        hashed = str(yaml.safe_load(earlier.read_text())["basic_auth_users"][USER])
        if bcrypt.checkpw(password.encode(), hashed.encode()):
            return hashed
    except (OSError, ValueError, KeyError, TypeError, yaml.YAMLError):
        pass
    return hash_password(password)


def _web_flags(ctx: LabContext, server: Server) -> list[str]:
    return [f"--web.config.file={ctx.paths.etc / server / 'web.yml'}"] if tls.enabled(ctx) else []


def monitoring_services(ctx: LabContext) -> list[ServiceDef]:
    node = ctx.spec.monitoring.host.name
    address, prom_port, am_port = _mon(ctx)
    data = ctx.node_dir(node)
    etc = ctx.paths.etc
    prometheus = [
        "/usr/bin/prometheus",
        f"--config.file={etc / 'prometheus' / 'prometheus.yml'}",
        f"--storage.tsdb.path={data / 'prometheus-data'}",
        f"--web.listen-address={address}:{prom_port}",
        "--web.enable-lifecycle",
        *_web_flags(ctx, "prometheus"),
    ]
    alertmanager = [
        "/usr/bin/prometheus-alertmanager",
        f"--config.file={etc / 'alertmanager' / 'alertmanager.yml'}",
        f"--storage.path={data / 'alertmanager-data'}",
        f"--web.listen-address={address}:{am_port}",
        # Empty: otherwise it binds 0.0.0.0:9094 for clustering.
        "--cluster.listen-address=",
        *_web_flags(ctx, "alertmanager"),
    ]
    return [
        ServiceDef(node, "prometheus", prometheus, data / "log" / "prometheus.log"),
        ServiceDef(node, "alertmanager", alertmanager, data / "log" / "alertmanager.log"),
    ]
