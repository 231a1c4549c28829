"""The base of every configuration model: unknown keys are errors, values are immutable once loaded."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class ConfigModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
