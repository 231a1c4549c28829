"""`ha-ops agent run` and `ha-ops health check`: the node agent and its one-shot form; `ha-ops agent check-config`."""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import typer

from ha_ops.cli import output
from ha_ops.cli.gpu import Backend
from ha_ops.errors import SpecError
from ha_ops.gpu import NoGpuError, open_backend
from ha_ops.health.agent import Agent
from ha_ops.health.config import AgentConfig, load_agent_config
from ha_ops.health.model import HealthState, Verdict
from ha_ops.health.poster import HttpPoster
from ha_ops.schedulers.open import local_slurm
from ha_ops.security.tls import CertificateContext, ReloadingContext

agent_app = typer.Typer(help="The GPU health agent that runs on every GPU node.", no_args_is_help=True)
health_app = typer.Typer(help="One-shot GPU health checks.", no_args_is_help=True)

# `ha-ops health check` exit codes (Slurm's HealthCheckProgram ignores them; use --drain there).
EXIT_HEALTHY = 0  # healthy or degraded (warnings only)
EXIT_UNHEALTHY = 1
EXIT_UNKNOWN = 3  # no GPU here, or something could not be read


def _config(config: Path | None, backend: Backend | None, fake_dir: Path | None, node: str | None) -> AgentConfig:
    base = load_agent_config(config) if config else AgentConfig(node=node or socket.gethostname())
    changes: dict[str, object] = {}
    if backend:
        changes["backend"] = backend.value
    if fake_dir:
        changes["fake_dir"] = fake_dir
    if node:
        changes["node"] = node
    return AgentConfig.model_validate({**base.model_dump(), **changes}) if changes else base


ConfigOpt = typer.Option(None, "--config", "-c", help="Agent config (YAML).", envvar="HA_OPS_AGENT_CONFIG")
BackendOpt = typer.Option(None, "--backend", help="The GPU backend (overrides the config).")
FakeDirOpt = typer.Option(None, "--fake-dir", help="Folder of fake GPUs (fake backend).")
NodeOpt = typer.Option(None, "--node", help="Node name as the scheduler knows it (default: hostname).")


def _condition_writer(cfg: AgentConfig) -> Callable[[Verdict], None] | None:
    """On Kubernetes: the node's GpuHealthy condition from each verdict (healthy or degraded: True)."""
    if not cfg.kubernetes.enabled:
        return None
    from ha_ops.schedulers.kubernetes import client_from_kubeconfig, set_gpu_condition

    client = client_from_kubeconfig(cfg.kubernetes.kubeconfig, timeout_s=cfg.controller.timeout_s)
    statuses: dict[HealthState, Literal["True", "False", "Unknown"]] = {
        HealthState.HEALTHY: "True", HealthState.DEGRADED: "True", HealthState.UNHEALTHY: "False",
        HealthState.UNKNOWN: "Unknown"}  # fmt: skip

    def write(verdict: Verdict) -> None:
        set_gpu_condition(client, cfg.node, statuses[verdict.state], verdict.reason)

    return write


def _keep_certificate_fresh(cfg: AgentConfig) -> CertificateContext:
    """Renew (or first enroll) this agent's certificate through the controllers, in a thread of its own for as long
    as the agent runs. The agent does not wait for it: it watches its GPUs and keeps its node's condition meanwhile,
    and its reports wait for the certificate (the context raises until there is one)."""
    import threading

    from ha_ops.remediation.certificate_client import Renewer

    assert cfg.controller.tls is not None
    renewer = Renewer(cfg.controller.tls, cfg.controller.urls, cfg.controller.enroll)
    forever = threading.Event()

    def keep() -> None:
        renewer.ensure(forever)
        renewer.run(forever)

    threading.Thread(target=keep, name="certificate", daemon=True).start()
    return CertificateContext(cfg.controller.tls)


@agent_app.command("run")
def run(
    config: Path | None = ConfigOpt,
    backend: Backend | None = BackendOpt,
    fake_dir: Path | None = FakeDirOpt,
    node: str | None = NodeOpt,
) -> None:
    """Watch every GPU (events + periodic sweep), serve metrics, drain/resume in Slurm or report to the controller."""
    cfg = _config(config, backend, fake_dir, node)
    logging.getLogger("ha_ops").setLevel(logging.INFO)
    gpu = open_backend(cfg.backend, cfg.fake_dir)
    slurm = local_slurm(cfg.node, cfg.slurm.command_timeout_s) if cfg.slurm.enabled else None
    context: ReloadingContext | CertificateContext | None = None
    if cfg.controller.renew and cfg.controller.tls is not None:
        context = _keep_certificate_fresh(cfg)
    elif cfg.controller.tls is not None:
        context = ReloadingContext(cfg.controller.tls, server=False)
    poster = HttpPoster(cfg.controller.urls, cfg.controller.timeout_s, context) if cfg.controller.urls else None
    agent = Agent(cfg, gpu, slurm=slurm, poster=poster, condition=_condition_writer(cfg))
    output.info(
        f"agent on {cfg.node}: {gpu.device_count()} GPUs ({cfg.backend}), sweep every {cfg.sweep_interval_s:g} s, "
        f"metrics on {cfg.metrics.address}:{cfg.metrics.port}, "
        + (
            f"reporting to {', '.join(cfg.controller.urls)}"
            if poster
            else ("draining in Slurm" if slurm else "observe only")
        )
    )
    try:
        agent.run()
    finally:
        if poster is not None:
            poster.close()  # (its kept connections: the controller sees them end, not time out)


@agent_app.command("check-config")
def check_config(
    file: Path = typer.Argument(..., help="Agent config (YAML) to check, e.g. a candidate before it is installed."),
) -> None:
    """Check an agent config with the agent's own loader. Exit 0 if valid; 2 and one line per bad field if not."""
    cfg = load_agent_config(file)
    if cfg.backend == "fake" and cfg.fake_dir is None:
        # The model allows it (--fake-dir can come from the command line), but a service started from this file
        # alone would find no GPUs.
        raise SpecError(str(file), ["fake_dir: required when backend is fake"])
    output.result(
        f"{file}: ok (node {cfg.node}, backend {cfg.backend}, metrics "
        + (f"on {cfg.metrics.address}:{cfg.metrics.port}" if cfg.metrics.port else "off")
        + ")"
    )


@health_app.command("check")
def check(
    config: Path | None = ConfigOpt,
    backend: Backend | None = BackendOpt,
    fake_dir: Path | None = FakeDirOpt,
    node: str | None = NodeOpt,
    json_out: bool = typer.Option(False, "--json", help="The verdict and findings as JSON."),
    drain: bool = typer.Option(False, "--drain", help="Drain the node in Slurm when unhealthy (HealthCheckProgram)."),
) -> None:
    """Read every GPU once and judge it. Exit 0 healthy/degraded, 1 unhealthy, 3 unknown or no GPU."""
    cfg = _config(config, backend, fake_dir, node)
    try:
        gpu = open_backend(cfg.backend, cfg.fake_dir)
    except NoGpuError as exc:
        if json_out:
            output.emit_json({"node": cfg.node, "state": "unknown", "reason": str(exc), "findings": []})
        else:
            output.error(str(exc))
        raise typer.Exit(EXIT_UNKNOWN) from None
    slurm = local_slurm(cfg.node, cfg.slurm.command_timeout_s) if drain else None
    agent = Agent(cfg.model_copy(update={"slurm": cfg.slurm.model_copy(update={"enabled": drain})}), gpu, slurm=slurm)
    try:
        verdict = agent.sweep()
    finally:
        gpu.close()
    if json_out:
        output.emit_json(
            {
                "node": cfg.node,
                "state": verdict.state.value,
                "action": verdict.action.value,
                "reason": verdict.reason,
                "findings": [f.to_json() for f in verdict.findings],
                "unknown": list(verdict.unknown),
                "gpus": [s.to_json() for s in agent.samples],
            }
        )
    else:
        from rich.table import Table  # not at the top: `--json`, as Slurm runs it, starts faster without rich

        table = Table(title=f"{cfg.node}: {verdict.state.value} (action: {verdict.action.value})")
        for col in ("gpu", "check", "severity", "action", "message"):
            table.add_column(col)
        for f in verdict.findings:
            table.add_row(str(f.gpu), f.check, str(f.severity), f.action.value, f.message)
        output.result(table)
        for item in verdict.unknown:
            output.error(f"could not read {item}")
    code = {HealthState.UNHEALTHY: EXIT_UNHEALTHY, HealthState.UNKNOWN: EXIT_UNKNOWN}.get(verdict.state, EXIT_HEALTHY)
    raise typer.Exit(code)
