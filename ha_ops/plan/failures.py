"""What fails, how often, and how the job gets back: the failure mix, fleet failure rates and recovery paths.

The default mix is the Llama 3 405B pre-training run's unexpected interruptions (Llama Team, "The Llama 3 Herd of
Models", arXiv 2407.21783, Table 5): 419 in 54 days on 16,384 H100 GPUs (2,048 nodes of 8), one every 3.1 h.
Each cause gets a kind (which detection applies: presets and game days give times per kind) and a recovery path
(what happens to the node, how long it is out, whether a spare can stand in). The mapping is ours, not the paper's:
the paper gives counts only; the reasons are beside each row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["gpu", "host", "network", "software"]
KINDS: tuple[Kind, ...] = ("gpu", "host", "network", "software")

DAY = 86400.0
HOUR = 3600.0


@dataclass(frozen=True)
class RecoveryPath:
    """What recovery does to the failed node. `node_out`: the node leaves the job's set for `repair_s` on average
    (exponentially distributed in the simulator): a free spare stands in, or the job waits for a spare or the
    repair. Otherwise the job restarts on the same nodes once the fault is handled."""

    name: str
    node_out: bool
    repair_s: float
    description: str


PATHS: dict[str, RecoveryPath] = {
    p.name: p
    for p in (
        # A GPU reset (nvidia-smi -r, or a driver reload) clears most uncorrectable memory errors and a hung GSP;
        # the node returns after its validation (a burn-in of minutes), meanwhile a spare stands in.
        RecoveryPath("gpu_reset", True, 15 * 60, "GPU reset and validation; a spare stands in"),
        # A reboot (unplanned host maintenance, a hung kernel): the node is out for the reboot and its checks.
        RecoveryPath("reboot", True, 30 * 60, "node reboot and validation; a spare stands in"),
        # A part swapped by a technician or the node sent back: days. The case spares are sized for.
        RecoveryPath("replace", True, 48 * HOUR, "hardware replaced (technician or RMA); a spare stands in"),
        # ECMP or the subnet manager routes around a switch or cable; the job restarts on the same nodes and the
        # cable is fixed later, without it.
        RecoveryPath("network_reroute", False, 0.0, "the fabric routes around the fault; the job restarts"),
        # A software bug or a watchdog: the job restarts from its checkpoint on the same nodes.
        RecoveryPath("software_restart", False, 0.0, "the job restarts from its checkpoint on the same nodes"),
    )
}


@dataclass(frozen=True)
class Cause:
    name: str
    count: int  # in the Llama 3 run (Table 5)
    kind: Kind
    path: str


# Llama 3 (arXiv 2407.21783), Table 5: root causes of the 419 unexpected interruptions in 54 days of pre-training.
LLAMA3_TABLE5: tuple[Cause, ...] = (
    Cause("Faulty GPU", 148, "gpu", "replace"),  # a GPU that keeps failing is swapped
    Cause("GPU HBM3 memory", 72, "gpu", "gpu_reset"),  # row remapping and containment take effect at a reset
    Cause("Software bug", 54, "software", "software_restart"),
    Cause("Network switch/cable", 35, "network", "network_reroute"),
    Cause("Host maintenance (unplanned)", 32, "host", "reboot"),
    Cause("GPU SRAM memory", 19, "gpu", "gpu_reset"),  # an uncorrectable SRAM error is cleared by a reset
    Cause("GPU system processor", 17, "gpu", "gpu_reset"),  # a hung GSP firmware: reset
    Cause("NIC", 7, "network", "replace"),  # seen on the fabric (link down), fixed by swapping the card
    Cause("NCCL watchdog timeouts", 7, "software", "software_restart"),
    Cause("Silent data corruption", 6, "gpu", "replace"),  # a GPU that computes wrong is pulled, not reset
    Cause("GPU thermal interface + sensor", 6, "gpu", "replace"),
    Cause("SSD", 3, "host", "replace"),
    Cause("Power supply", 3, "host", "replace"),
    Cause("Server chassis", 2, "host", "replace"),
    Cause("IO expansion board", 2, "host", "replace"),
    Cause("Dependency", 2, "software", "software_restart"),
    Cause("CPU", 2, "host", "replace"),
    Cause("System memory", 2, "host", "replace"),
)
LLAMA3_GPUS = 16_384
LLAMA3_DAYS = 54.0
LLAMA3_INTERRUPTIONS = sum(c.count for c in LLAMA3_TABLE5)  # 419


@dataclass(frozen=True)
class Fleet:
    """A fleet's failure rate: job-interrupting failures per node-day, for nodes of `gpus_per_node` GPUs."""

    name: str
    failures_per_node_day: float
    gpus_per_node: int
    source: str

    @property
    def per_gpu_s(self) -> float:
        """Failures per GPU-second: rates scale with the GPUs a job holds, whatever the node size."""
        return self.failures_per_node_day / self.gpus_per_node / DAY


FLEETS: dict[str, Fleet] = {
    f.name: f
    for f in (
        # 419 / (2,048 nodes x 54 days) = 3.79 per 1,000 node-days: a dedicated, burned-in H100 run.
        Fleet(
            "llama3",
            LLAMA3_INTERRUPTIONS / (LLAMA3_GPUS / 8 * LLAMA3_DAYS),
            8,
            "Llama 3 405B pre-training, arXiv 2407.21783 Table 5 (16,384 H100, 54 days, 419 interruptions)",
        ),
        # Kokolis et al., HPCA 2025 (arXiv 2410.21680): r_f of two multi-tenant A100 research clusters.
        Fleet("rsc1", 6.50e-3, 8, "Kokolis et al. 2025, RSC-1: 6.50 failures per 1,000 node-days (A100)"),
        Fleet("rsc2", 2.34e-3, 8, "Kokolis et al. 2025, RSC-2: 2.34 failures per 1,000 node-days (A100)"),
    )
}


def mtbf_s(gpus: int, fleet: Fleet) -> float:
    """The MTBF of a job on `gpus` GPUs: failures are independent, so their rates add (1 / (N * r))."""
    if gpus <= 0:
        raise ValueError(f"a job needs GPUs, not {gpus}")
    return 1.0 / (gpus * fleet.per_gpu_s)


@dataclass(frozen=True)
class CauseRate:
    cause: Cause
    per_gpu_s: float  # failures per GPU-second


def failure_mix(fleet: Fleet | None = None, causes: tuple[Cause, ...] = LLAMA3_TABLE5) -> tuple[CauseRate, ...]:
    """Each cause's rate per GPU-second: Table 5's proportions, scaled to `fleet`'s total rate (Llama 3's own by
    default, where it is exactly count / (16,384 GPUs x 54 days))."""
    total = sum(c.count for c in causes)
    per_gpu_s = (fleet or FLEETS["llama3"]).per_gpu_s
    return tuple(CauseRate(c, per_gpu_s * c.count / total) for c in causes)
