"""The lab's central audit sink: rsyslog on the monitoring node, receiving the controllers' audit entries over
syslog-over-TLS (RFC 5425, GnuTLS, each peer's certificate from the lab's CA and named: only the controllers may
ship) and appending each entry's line to one file, as a SIEM or a central log host would keep it. On with the lab's
mutual TLS (`remediation.tls`); `ha-ops audit verify --shipped` checks the controllers' log against that file.
Its config comes from ha_ops.remediation.audit_collector, which the ha_ops_audit_sink role's template mirrors."""

from __future__ import annotations

from pathlib import Path

from ha_ops.lab import tls
from ha_ops.lab.context import LabContext, ServiceDef
from ha_ops.remediation.audit_collector import PORT, render_rsyslog_config

SERVER_IDENTITY = "audit-sink"


def enabled(ctx: LabContext) -> bool:
    return tls.enabled(ctx) and ctx.spec.remediation is not None


def node(ctx: LabContext) -> str:
    return ctx.spec.monitoring.host.name


def address(ctx: LabContext) -> str:
    return str(ctx.layout.node(node(ctx)).address)


def shipped_log(ctx: LabContext) -> Path:
    """The sink's copy of the audit log: every entry shipped, in the order received (duplicates possible)."""
    return ctx.node_dir(node(ctx)) / "audit-sink" / "audit.jsonl"


def marker_file(ctx: LabContext, controller: str) -> Path:
    """The last entry the controller shipped, on its own disk (ha_ops.remediation.audit_sink)."""
    return ctx.node_dir(controller) / "audit-shipped"


def controller_config(ctx: LabContext, controller: str) -> dict:
    """The controller config's `audit_sink` section."""
    return {
        "address": address(ctx),
        "port": PORT,
        "tls": tls.config_block(ctx, f"controller-{controller}"),
        "marker_file": str(marker_file(ctx, controller)),
    }


def render_config(ctx: LabContext) -> str:
    """rsyslog's config, from the one renderer the ha_ops_audit_sink role's template mirrors."""
    files = tls.files(ctx, SERVER_IDENTITY)
    names = [n.name for n in ctx.layout.nodes_with_role("controller")]
    if ctx.spec.kubernetes is not None:  # the Kubernetes layer's controller pods (its default namespace)
        from ha_ops.iac.k8s_manifests import K8sLayerConfig, service_names

        names.append(service_names(K8sLayerConfig())[2])  # their own certificates name their Service
    return render_rsyslog_config(
        header="The lab's audit sink (ha_ops.lab.audit_sink): written by ha-ops lab up.",
        work_dir=ctx.node_dir(node(ctx)) / "rsyslog",
        ca_file=files.ca_file,
        cert_file=files.cert_file,
        key_file=files.key_file,
        permitted_peers=names,
        output_file=shipped_log(ctx),
        address=address(ctx),
        port=PORT,
    )


def config_path(ctx: LabContext) -> Path:
    return ctx.paths.etc / "rsyslog" / "audit-sink.conf"


def prepare(ctx: LabContext) -> None:
    if not enabled(ctx):
        return
    config_path(ctx).parent.mkdir(parents=True, exist_ok=True)
    config_path(ctx).write_text(render_config(ctx))
    for folder in (shipped_log(ctx).parent, ctx.node_dir(node(ctx)) / "rsyslog"):
        folder.mkdir(parents=True, exist_ok=True)


def services(ctx: LabContext) -> list[ServiceDef]:
    if not enabled(ctx):
        return []
    data = ctx.node_dir(node(ctx))
    argv = ["/usr/sbin/rsyslogd", "-n", "-f", str(config_path(ctx)), "-i", str(data / "rsyslogd.pid")]
    return [ServiceDef(node(ctx), "audit-sink", argv, data / "log" / "audit-sink.log")]
