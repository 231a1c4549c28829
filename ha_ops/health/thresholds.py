"""Health thresholds with documented defaults. Loaded from the agent's config; every field can be overridden."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Thresholds(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    temperature_slowdown_c: float = Field(
        89.0, description="Used when the GPU does not report its own slowdown threshold (H100/H200 report 89 C)."
    )
    temperature_shutdown_c: float = Field(
        95.0, description="Used when the GPU does not report its own shutdown threshold (H100/H200 report 95 C)."
    )
    app_xid_repeats: int = Field(
        3, ge=2, description="Application XIDs (13, 31, 43, 45, 68) on one GPU within the window that drain the node."
    )
    app_xid_window_s: float = Field(600.0, gt=0, description="Window for repeated application XIDs.")
    warning_xid_hold_s: float = Field(
        600.0, gt=0, description="How long a warning-level XID (63, 92, 94, 154, unknown) keeps the node degraded."
    )
    pcie_replays_per_minute: float = Field(
        100.0, gt=0, description="PCIe replay rate that marks a link degraded (a small nonzero count is normal)."
    )
    ecc_corrected_per_hour: float = Field(
        1000.0, gt=0, description="Correctable ECC error rate that marks a GPU degraded."
    )
    nvlink_errors_per_minute: float = Field(
        10.0, gt=0, description="NVLink replay + recovery + CRC error rate that marks a GPU degraded."
    )
