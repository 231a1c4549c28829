"""The agent's report to the remediation controller: versioned JSON, validated on both ends.

Schema `ha-ops/agent-report` version 1:
    schema, version, node, seq (increases per agent run), agent_id (changes when the agent restarts), sent_at,
    state (healthy|degraded|unhealthy|unknown), action (none..replace), reason, driver_version,
    findings[{check, severity, action, message, gpu, uuid, xid}], unknown[str], gpus[{index, uuid, state}].
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from ha_ops.gpu.types import GpuSample
from ha_ops.health.model import Action, HealthState, Severity, Verdict
from ha_ops.util.models import ConfigModel

SCHEMA = "ha-ops/agent-report"
VERSION = 1


class ReportFinding(ConfigModel):
    check: str
    severity: Literal["info", "warning", "critical"]
    action: Action
    message: str
    gpu: int | None = None
    uuid: str | None = None
    xid: int | None = None


class ReportGpu(ConfigModel):
    index: int = Field(ge=0)
    uuid: str | None = None
    state: HealthState


class AgentReport(ConfigModel):
    schema_: Literal["ha-ops/agent-report"] = Field(SCHEMA, alias="schema")
    version: Literal[1] = VERSION
    node: str = Field(min_length=1)
    seq: int = Field(ge=0)
    agent_id: str = Field(min_length=1)
    sent_at: float
    state: HealthState
    action: Action
    reason: str
    driver_version: str | None = None
    findings: list[ReportFinding] = Field(default_factory=list)
    unknown: list[str] = Field(default_factory=list)
    gpus: list[ReportGpu] = Field(default_factory=list)

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    def to_json(self) -> dict:
        return self.model_dump(mode="json", by_alias=True)


def gpu_states(samples: list[GpuSample], verdict: Verdict) -> list[ReportGpu]:
    out = []
    for sample in samples:
        mine = [f for f in verdict.findings if f.gpu == sample.index]
        unknown = any(u.startswith(f"GPU{sample.index} ") for u in verdict.unknown)
        if any(f.severity == Severity.CRITICAL for f in mine):
            state = HealthState.UNHEALTHY
        elif any(f.severity == Severity.WARNING for f in mine):
            state = HealthState.DEGRADED
        elif unknown:
            state = HealthState.UNKNOWN
        else:
            state = HealthState.HEALTHY
        out.append(
            ReportGpu(index=sample.index, uuid=sample.uuid if isinstance(sample.uuid, str) else None, state=state)
        )
    return out


def build_report(
    node: str, seq: int, agent_id: str, now: float, verdict: Verdict, samples: list[GpuSample], driver: str | None
) -> AgentReport:
    return AgentReport(
        node=node,
        seq=seq,
        agent_id=agent_id,
        sent_at=now,
        state=verdict.state,
        action=verdict.action,
        reason=verdict.reason,
        driver_version=driver,
        findings=[ReportFinding(**f.to_json()) for f in verdict.findings],
        unknown=list(verdict.unknown),
        gpus=gpu_states(samples, verdict),
    )
