"""The agent's configuration (YAML). Bad values are rejected at start, naming the field."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from ha_ops.health.thresholds import Thresholds
from ha_ops.security.tls import INSECURE_WITHOUT_TLS, Enrollment, TlsFiles
from ha_ops.util.models import ConfigModel
from ha_ops.util.names import BaseUrl, NodeName

# However large the fleet, an agent beats at least this often: one that beats less often is a silent one (the
# controller's remediation/heartbeats.py asks a large fleet for longer heartbeats, up to this).
MAX_HEARTBEAT_S = 600.0


class MetricsConfig(ConfigModel):
    address: str = "0.0.0.0"
    port: int = Field(9426, ge=0, le=65535, description="0 disables the metrics endpoint.")


class SlurmReporting(ConfigModel):
    enabled: bool = True
    auto_resume: bool = Field(True, description="Resume a node the agent drained once it is healthy again.")
    resume_after_healthy_sweeps: int = Field(3, ge=1, description="Consecutive healthy sweeps before resuming.")
    command_timeout_s: float = Field(5.0, gt=0)


class ControllerReporting(ConfigModel):
    urls: list[BaseUrl] = Field(
        default_factory=list,
        description="Report endpoints of the remediation controllers (leader and standby); when set, the agent "
        "reports instead of draining, to whichever controller leads.",
    )
    timeout_s: float = Field(2.0, gt=0)
    tls: TlsFiles | None = Field(
        None,
        description="Report over mutual TLS with this agent's certificate (CN: its node's name, O: ha-ops:agents); "
        "the controllers' URLs are then https://. Required when urls are set, unless `insecure` is true.",
    )
    insecure: bool = Field(
        False,
        description="Without tls: report over plain HTTP (a controller cannot tell this agent's reports from "
        "anyone's). Logged as a warning at every start; for a lab or a trial only.",
    )
    renew: bool = Field(
        False,
        description="Renew the certificate in `tls` through the controllers past two thirds of its life (they "
        "hold an issuing CA: `certificates` in their config), rather than wait for someone to replace the files.",
    )
    enroll: Enrollment | None = Field(
        None,
        description="With renew, on Kubernetes: get the first certificate (or one after an expiry) from the "
        "controllers' enrollment port with the pod's service account token.",
    )
    heartbeat_s: float = Field(10.0, gt=0, le=MAX_HEARTBEAT_S, description="Resend the current report this often, "
                               "or less often where the controller's answer asks (a large fleet).")  # fmt: skip
    fallback_after_s: float | None = Field(
        30.0,
        gt=0,
        description="When no controller has accepted a report for this long, an unhealthy node is drained in Slurm "
        "by the agent itself (the controller adopts the drain once it hears from it); null: never.",
    )

    @model_validator(mode="after")
    def _tls_rules(self) -> ControllerReporting:
        if self.tls is not None and (plain := [u for u in self.urls if not u.startswith("https://")]):
            raise ValueError(f"urls: with tls every URL is https:// ({plain[0]!r} is not)")
        if (self.renew or self.enroll is not None) and self.tls is None:
            raise ValueError("renew and enroll: need tls (the certificate files to keep fresh)")
        if self.enroll is not None and not self.renew:
            raise ValueError("enroll: needs renew (an enrolled certificate must be renewed too)")
        return self


class KubernetesCondition(ConfigModel):
    """On a Kubernetes node: the agent keeps the node's `GpuHealthy` condition in step with its verdict."""

    enabled: bool = False
    kubeconfig: Path | None = Field(None, description="None: the pod's service account (or $KUBECONFIG).")
    refresh_s: float = Field(60.0, gt=0, description="Write the condition again at least this often.")
    unhealthy_jitter_s: float = Field(
        2.0,
        ge=0,
        le=60,
        description="When a controller has accepted the report of an unhealthy verdict, the condition waits a "
        "random 0 to this many seconds: when a rack's agents all find a fault at once, the controller's cordons "
        "reach the API server first (the cordon keeps work off the node; the condition says why).",
    )


class AgentConfig(ConfigModel):
    node: NodeName
    backend: Literal["nvml", "fake"] = "nvml"
    fake_dir: Path | None = None
    sweep_interval_s: float = Field(5.0, gt=0, le=3600)
    event_poll_s: float = Field(0.2, gt=0, le=5, description="Longest wait inside one event poll.")
    metrics: MetricsConfig = MetricsConfig()
    thresholds: Thresholds = Thresholds()
    slurm: SlurmReporting = SlurmReporting()
    controller: ControllerReporting = ControllerReporting()
    kubernetes: KubernetesCondition = KubernetesCondition()
    state_file: Path | None = Field(None, description="Where the agent remembers that it drained the node.")


def load_agent_config(path: Path) -> AgentConfig:
    # Imported here: the YAML loader pulls in yaml and ha_ops.spec, which `ha-ops health check` without --config
    # (Slurm's HealthCheckProgram, run often) does not need at start-up.
    from ha_ops.errors import SpecError
    from ha_ops.util.yamlconfig import load_model

    config = load_model(path, AgentConfig)
    reporting = config.controller
    if reporting.urls and reporting.tls is None and not reporting.insecure:  # (secure by default: as the controller's)
        raise SpecError(str(path), [f"controller.tls: {INSECURE_WITHOUT_TLS}"])
    return config
