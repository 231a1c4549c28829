"""The base of every configuration model: unknown keys are errors, values are immutable once loaded, and no number
is NaN or infinite (`temperature_shutdown_c: .nan` once passed and silently disabled the thermal check: every
comparison with NaN is false)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class ConfigModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
