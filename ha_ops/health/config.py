"""The agent's configuration (YAML). Bad values are rejected at start, naming the field."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ha_ops.errors import SpecError
from ha_ops.health.thresholds import Thresholds
from ha_ops.spec.load import validation_problems


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MetricsConfig(_Strict):
    address: str = "0.0.0.0"
    port: int = Field(9400, ge=0, le=65535, description="0 disables the metrics endpoint.")


class SlurmReporting(_Strict):
    enabled: bool = True
    auto_resume: bool = Field(True, description="Resume a node the agent drained once it is healthy again.")
    resume_after_healthy_sweeps: int = Field(3, ge=1, description="Consecutive healthy sweeps before resuming.")
    command_timeout_s: float = Field(5.0, gt=0)


class ControllerReporting(_Strict):
    url: str | None = Field(None, description="Remediation controller endpoint; when set, report instead of draining.")
    timeout_s: float = Field(2.0, gt=0)
    heartbeat_s: float = Field(10.0, gt=0, description="Resend the current report at least this often.")


class AgentConfig(_Strict):
    node: str
    backend: Literal["nvml", "fake"] = "nvml"
    fake_dir: Path | None = None
    sweep_interval_s: float = Field(5.0, gt=0, le=3600)
    event_poll_s: float = Field(0.2, gt=0, le=5, description="Longest wait inside one event poll.")
    metrics: MetricsConfig = MetricsConfig()
    thresholds: Thresholds = Thresholds()
    slurm: SlurmReporting = SlurmReporting()
    controller: ControllerReporting = ControllerReporting()
    state_file: Path | None = Field(None, description="Where the agent remembers that it drained the node.")


def load_agent_config(path: Path) -> AgentConfig:
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except OSError as exc:
        raise SpecError(str(path), [f"cannot read: {exc.strerror}"]) from None
    except yaml.YAMLError as exc:
        raise SpecError(str(path), [f"not valid YAML ({exc})"]) from None
    if not isinstance(data, dict):
        raise SpecError(str(path), ["the top level must be a mapping"])
    try:
        return AgentConfig.model_validate(data)
    except ValidationError as exc:
        raise SpecError(str(path), validation_problems(exc)) from None
