"""The lab's persisted state: what was created (namespaces, holders, services with PIDs). Written atomically
after every change, so `down` and `status` work after a crash or on a half-built lab."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from ha_ops.errors import LabError
from ha_ops.util.atomic import write_atomic

STATE_VERSION = 1


class NodeState(BaseModel):
    name: str
    kind: Literal["host", "switch"]
    netns: str
    holder_pid: int | None = None
    address: str | None = None


class ServiceState(BaseModel):
    node: str  # a node name, or "host" for daemons in the root namespace (munged)
    service: str
    argv: list[str]
    log: str
    pid: int | None = None
    masked: bool = False  # `systemctl mask`: nothing starts it (a fenced storage master must never serve again)

    @property
    def key(self) -> str:
        return service_key(self.node, self.service)


def service_key(node: str, service: str) -> str:
    return f"{node}/{service}"


class LabState(BaseModel):
    version: int = STATE_VERSION
    lab: str
    root: str
    spec_digest: str
    spec: dict[str, Any]
    phase: Literal["building", "up", "failed"] = "building"
    nodes: dict[str, NodeState] = Field(default_factory=dict)
    services: dict[str, ServiceState] = Field(default_factory=dict)
    storage_master: str | None = None  # the node running the MooseFS master (changes when the metalogger is promoted)

    def save(self, path: Path) -> None:
        write_atomic(path, self.model_dump_json(indent=2), mode=0o600)

    @classmethod
    def load(cls, path: Path) -> LabState:
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise LabError(f"no lab state at {path}: is the lab up?") from None
        except (OSError, ValueError) as exc:
            raise LabError(f"lab state {path} is unreadable ({exc}); run 'ha-ops lab down --force'") from None
        if not isinstance(data, dict):
            raise LabError(f"lab state {path} is unreadable (not a JSON object); run 'ha-ops lab down --force'")
        if data.get("version") != STATE_VERSION:
            raise LabError(f"lab state {path} has version {data.get('version')}, this ha-ops reads {STATE_VERSION}")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, err['loc'])) or '<top>'}: {err['msg']}" for err in exc.errors(include_url=False)
            )
            raise LabError(f"lab state {path} is unreadable ({problems}); run 'ha-ops lab down --force'") from None
