"""The ha-ops agent on every lab GPU node, reading that node's fake GPUs."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from ha_ops.gpu.fake import FakeGpus
from ha_ops.lab import tls
from ha_ops.lab.context import LabContext, ServiceDef
from ha_ops.lab.controllers import LAB_HEARTBEAT_S, base_urls

LAB_SWEEP_INTERVAL_S = 0.5


def gpu_dir(ctx: LabContext, node: str) -> Path:
    return ctx.node_dir(node) / "gpus"


def config_path(ctx: LabContext, node: str) -> Path:
    return ctx.node_dir(node) / "agent.yaml"


def render_config(ctx: LabContext, node: str, report_to_controllers: bool = True) -> dict:
    """With a remediation controller in the spec the agent reports to it; otherwise it drains in Slurm itself."""
    layout = ctx.layout.node(node)
    urls = [f"{u}/v1/reports" for u in base_urls(ctx)] if report_to_controllers else []
    return {
        "node": node,
        "backend": "fake",
        "fake_dir": str(gpu_dir(ctx, node)),
        "sweep_interval_s": LAB_SWEEP_INTERVAL_S,
        "metrics": {"address": str(layout.address), "port": ctx.spec.monitoring.agent_port},
        "slurm": {"enabled": True, "auto_resume": True, "resume_after_healthy_sweeps": 2},
        "controller": {
            "urls": urls,
            "heartbeat_s": LAB_HEARTBEAT_S,
            "timeout_s": 1.0,
            "fallback_after_s": 5.0,
            **(
                ({"tls": tls.config_block(ctx, f"agent-{node}")} if tls.enabled(ctx) else {"insecure": True})
                if urls
                else {}
            ),
        },
        "state_file": str(ctx.node_dir(node) / "agent-state.json"),
    }


def write_configs(ctx: LabContext, report_to_controllers: bool = True) -> None:
    for node in ctx.layout.nodes_with_role("gpu"):
        config = render_config(ctx, node.name, report_to_controllers)
        config_path(ctx, node.name).write_text(yaml.safe_dump(config, sort_keys=False))


def prepare(ctx: LabContext) -> None:
    for node in ctx.layout.nodes_with_role("gpu"):
        directory = gpu_dir(ctx, node.name)
        if not (directory / "gpu0.json").exists():
            FakeGpus.create(directory, node.name, node.gpus, model=node.gpu_model)
    write_configs(ctx)


def agent_services(ctx: LabContext) -> list[ServiceDef]:
    return [
        ServiceDef(
            n.name,
            "agent",
            [sys.executable, "-m", "ha_ops", "agent", "run", "--config", str(config_path(ctx, n.name))],
            ctx.node_dir(n.name) / "log" / "agent.log",
        )
        for n in ctx.layout.nodes_with_role("gpu")
    ]
