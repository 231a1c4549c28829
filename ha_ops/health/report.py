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
from ha_ops.util.bounded import Line, Token
from ha_ops.util.models import ConfigModel
from ha_ops.util.names import NodeName

SCHEMA = "ha-ops/agent-report"
VERSION = 1
MAX_SEQ = 2**53  # a report per millisecond for 285,000 years; JSON's integers stay exact below it
MAX_GPUS = 256  # per node
MAX_FINDINGS = 1024  # per report: four per GPU of the largest node


class ReportFinding(ConfigModel):
    check: Token
    severity: Literal["info", "warning", "critical"]
    action: Action
    message: Line
    gpu: int | None = Field(None, ge=0, lt=MAX_GPUS)
    uuid: Token | None = None
    xid: int | None = Field(None, ge=0, le=2**31)


class ReportGpu(ConfigModel):
    index: int = Field(ge=0, lt=MAX_GPUS)
    uuid: Token | None = None
    state: HealthState


class AgentReport(ConfigModel):
    schema_: Literal["ha-ops/agent-report"] = Field(SCHEMA, alias="schema")
    version: Literal[1] = VERSION
    node: NodeName
    seq: int = Field(ge=0, le=MAX_SEQ)
    agent_id: Token = Field(min_length=1)
    sent_at: float
    state: HealthState
    action: Action
    reason: Line
    driver_version: Token | None = None
    findings: list[ReportFinding] = Field(default_factory=list, max_length=MAX_FINDINGS)
    unknown: list[Line] = Field(default_factory=list, max_length=MAX_FINDINGS)
    gpus: list[ReportGpu] = Field(default_factory=list, max_length=MAX_GPUS)

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, allow_inf_nan=False)

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
