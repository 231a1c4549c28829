"""What a rollout's process needs to build its doors again (the inventory, the playbook, the node checks, the
remediation controllers to coordinate with), kept in its state: `rollout resume` rebuilds from it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ha_ops.rollout.ansible import DEFAULT_HEALTH_COMMAND, DEFAULT_VERSION_COMMAND
from ha_ops.security.tls import TlsFiles


class RolloutInputs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    spec: Path | None = None
    inventory: Path | None = None
    playbook: Path | None = None
    health_command: str = DEFAULT_HEALTH_COMMAND
    version_command: str = DEFAULT_VERSION_COMMAND
    controllers: list[str] = Field(default_factory=list)  # base URLs of the remediation controllers (none: alone)
    controller_cert: Path | None = None  # an operator certificate for https controllers
    controller_key: Path | None = None
    controller_ca: Path | None = None

    @field_validator("controllers", mode="before")
    @classmethod
    def _comma_separated(cls, value: Any) -> Any:
        # (a state written before issue 43 kept them as one comma-separated string)
        return [u for u in value.split(",") if u] if isinstance(value, str) else value

    def controller_tls(self) -> TlsFiles | None:
        """The operator certificate for the controllers, when all three files were given."""
        if self.controller_cert and self.controller_key and self.controller_ca:
            return TlsFiles(cert_file=self.controller_cert, key_file=self.controller_key, ca_file=self.controller_ca)
        return None
