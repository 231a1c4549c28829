"""The vocabulary of health: severities, recommended actions, findings and the node verdict."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import IntEnum, StrEnum
from typing import Any


class Severity(IntEnum):
    INFO = 0
    WARNING = 1
    CRITICAL = 2

    def __str__(self) -> str:
        return self.name.lower()


class Action(StrEnum):
    """Recommended action, in escalating order."""

    NONE = "none"
    WATCH = "watch"
    DRAIN = "drain"
    RESET_GPU = "reset_gpu"
    REBOOT_NODE = "reboot_node"
    REPLACE = "replace"

    @property
    def rank(self) -> int:
        return list(Action).index(self)

    @property
    def takes_node_out(self) -> bool:
        return self.rank >= Action.DRAIN.rank


class HealthState(StrEnum):
    HEALTHY = "healthy"
    DEGRADED = "degraded"  # warnings only: keep running, watch
    UNHEALTHY = "unhealthy"  # a finding that takes the node out of service
    UNKNOWN = "unknown"  # the agent could not read something it needs; never a reason to drain


@dataclass(frozen=True)
class Finding:
    check: str
    severity: Severity
    action: Action
    message: str
    gpu: int | None = None
    uuid: str | None = None
    xid: int | None = None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["severity"] = str(self.severity)
        data["action"] = str(self.action)
        return data


@dataclass(frozen=True)
class Verdict:
    state: HealthState
    action: Action
    findings: tuple[Finding, ...] = field(default=())
    unknown: tuple[str, ...] = field(default=())  # what could not be read

    @property
    def reason(self) -> str:
        """One line for a Slurm drain reason: the worst finding, naming GPU and fault."""
        # On a tie the XID wins: it names the fault most precisely.
        worst = max(self.findings, key=lambda f: (f.severity, f.action.rank, f.xid is not None), default=None)
        if worst is None:
            return self.state.value
        where = f"GPU{worst.gpu} " if worst.gpu is not None else ""
        more = f" (+{len(self.findings) - 1} more)" if len(self.findings) > 1 else ""
        return f"{where}{worst.check}: {worst.message}{more}"
