"""GPU fault injection on a node, for the nodes that can take it: through DCGM's error injection where DCGM is
installed (what DCGM's consumers, dcgm-exporter among them, then report), or through the fake backend's files on a
node that runs the fake backend (what the ha-ops agent then reads). Both render the commands they run on the node,
so `--dry-run` prints them."""

from __future__ import annotations

import shlex
from typing import Protocol

from ha_ops.cluster.commands import Command
from ha_ops.cluster.ops import GpuOp
from ha_ops.errors import HaOpsError

# DCGM field IDs (dcgm_fields.h) for each fault, and the values an injection writes.
DCGM_FI_DEV_GPU_TEMP = 150
DCGM_FI_DEV_XID_ERRORS = 230
DCGM_FI_DEV_ECC_DBE_VOL_TOTAL = 311
DCGM_FI_DEV_ROW_REMAP_FAILURE = 395
XID_FALLEN_OFF_BUS = 79
# What `clear` writes back: no XID, no double-bit error, no remap failure, a normal temperature. DCGM keeps an
# injected value until it samples the field again, so a clear is also what a reset would read.
DCGM_HEALTHY = ((DCGM_FI_DEV_XID_ERRORS, 0), (DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, 0), (DCGM_FI_DEV_ROW_REMAP_FAILURE, 0),
                (DCGM_FI_DEV_GPU_TEMP, 40))  # fmt: skip


class CapabilityMissing(HaOpsError):
    """The target cannot do what the experiment asks (no GPU fault injection, no BMC, a permanent DCGM fault)."""

    exit_code = 2


class GpuInjector(Protocol):
    def commands(self, op: GpuOp) -> list[Command]: ...

    def check(self, op: GpuOp, stdout: str) -> None:
        """Raise HaOpsError when a command's output says the injection did not take."""
        ...


class DcgmInjector:
    def __init__(self, gpus: int, dcgmi: str = "dcgmi") -> None:
        self.gpus = gpus
        self.dcgmi = dcgmi

    def fields(self, op: GpuOp) -> list[tuple[int, float]]:
        if op.permanent:
            raise CapabilityMissing("DCGM injection cannot make a fault permanent (it writes readings, not hardware)")
        if op.fault == "clear":
            return list(DCGM_HEALTHY)
        return {
            "xid": [(DCGM_FI_DEV_XID_ERRORS, op.xid)],
            "fallen_off_bus": [(DCGM_FI_DEV_XID_ERRORS, XID_FALLEN_OFF_BUS)],
            "double_bit_ecc": [(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, 1)],
            "row_remap_failure": [(DCGM_FI_DEV_ROW_REMAP_FAILURE, 1)],
            "overheat": [(DCGM_FI_DEV_GPU_TEMP, op.celsius)],
        }[op.fault]

    def commands(self, op: GpuOp) -> list[Command]:
        gpus = range(self.gpus) if op.gpu is None else [op.gpu]
        return [
            Command((self.dcgmi, "test", "--inject", "--gpuid", str(gpu), "-f", str(field), "-v", f"{value:g}"))
            for gpu in gpus
            for field, value in self.fields(op)
        ]

    def check(self, op: GpuOp, stdout: str) -> None:
        check_dcgmi_output(stdout)


def check_dcgmi_output(stdout: str) -> None:
    """dcgmi prints "Successfully injected field info." and may still exit 0 when it did not (an unknown field or
    GPU prints an "Error: ..." line): the output is what says it took."""
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    if any(line.lower().startswith("successfully injected") for line in lines):
        return
    error = next((line for line in lines if "error" in line.lower()), lines[-1] if lines else "no output")
    raise HaOpsError(f"DCGM did not inject the fault: {error}")


class FakeBackendInjector:
    """On a node whose agent reads the fake backend: `ha-ops gpu fake-fault` / `fake-clear` on the node itself."""

    def __init__(self, fake_dir: str, ha_ops: str = "ha-ops") -> None:
        self.fake_dir = fake_dir
        self.ha_ops = shlex.split(ha_ops)

    def commands(self, op: GpuOp) -> list[Command]:
        base = [*self.ha_ops, "gpu"]
        if op.fault == "clear":
            gpu = [] if op.gpu is None else ["--gpu", str(op.gpu)]
            return [Command((*base, "fake-clear", "--fake-dir", self.fake_dir, *gpu))]
        if op.gpu is None:
            raise HaOpsError("a GPU fault names its GPU")
        argv = [*base, "fake-fault", "--fake-dir", self.fake_dir, "--gpu", str(op.gpu), "--fault", op.fault]
        if op.fault == "xid":
            argv += ["--xid", str(op.xid)]
        if op.fault == "overheat":
            argv += ["--celsius", f"{op.celsius:g}"]
        return [Command((*argv, *(["--permanent"] if op.permanent else [])))]

    def check(self, op: GpuOp, stdout: str) -> None:
        return None  # the command's exit status says it all
