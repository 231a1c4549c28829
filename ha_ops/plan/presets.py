"""Detection and recovery times per kind of failure, and the scenarios `plan simulate --preset` names.

A failure's downtime in the simulator: detection (uniform between two bounds: a poll finds it anywhere in its
period), then `recover_s` (the node drained or evicted, a spare in or the route around, the job requeued), a wait
when a node must be replaced and no spare is free, then the job's restart (relaunch and checkpoint load, the same
for every preset: it is the training job's, not the cluster's). The figures below are the products' defaults, not
measurements; a game day's report (gameday_input) gives measured ones.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from ha_ops.plan.failures import Kind


@dataclass(frozen=True)
class KindTiming:
    detect_min_s: float
    detect_max_s: float
    recover_s: float
    source: str = ""

    @property
    def mean_detect_s(self) -> float:
        return (self.detect_min_s + self.detect_max_s) / 2.0


# The training job's own crash (a software bug, an NCCL error surfacing as an exception) is seen by its launcher
# within a minute, and requeued, whatever watches the nodes: the same in every preset, so that presets differ only
# in what the cluster's health checking changes.
SOFTWARE = KindTiming(0.0, 60.0, 30.0, "the job's launcher sees its exit; requeued (every preset)")


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    timing: Mapping[Kind, KindTiming]
    # The scenario's defaults, each overridden by its own CLI option.
    gpus: int = 16_384
    days: float = 54.0
    gpus_per_node: int = 8
    checkpoint_cost_s: float = 30.0
    restart_s: float = 180.0
    # Spare nodes as a share of the job's nodes, rounded up: 64 for the 2,048 nodes of the Llama 3 run, 4 for 128
    # (what `plan spares` asks for 0.99 at Llama 3's rate and 48 h repairs).
    spare_fraction: float = 1 / 32
    fleet: str = "llama3"
    notes: tuple[str, ...] = field(default_factory=tuple)

    def spares_for(self, gpus: int, gpus_per_node: int) -> int:
        nodes = -(-gpus // gpus_per_node)
        return math.ceil(nodes * self.spare_fraction - 1e-9)


NHC_5MIN = Preset(
    "nhc-5min",
    "Slurm with NHC polling every 5 minutes",
    {
        # NHC runs every 300 s: a GPU fault is found uniformly 0-300 s after it happens; Slurm then drains the
        # node, the job is requeued onto a spare (about 90 s).
        "gpu": KindTiming(0.0, 300.0, 90.0, "NHC every 300 s, Slurm drain and requeue"),
        # A dead node runs no NHC: slurmctld marks it DOWN after SlurmdTimeout (300 s by default).
        "host": KindTiming(300.0, 300.0, 90.0, "SlurmdTimeout 300 s, then requeue"),
        # NHC's InfiniBand port check, same period; the fabric has rerouted by then, the job is requeued.
        "network": KindTiming(0.0, 300.0, 30.0, "NHC's port check every 300 s, requeue"),
        "software": SOFTWARE,
    },
)

K8S_DEFAULT = Preset(
    "k8s-default",
    "Kubernetes defaults: about 6 minutes to eviction",
    {
        # node-monitor-grace-period 50 s, then the default not-ready/unreachable toleration of 300 s: the pod is
        # evicted 350 s after the node stops reporting, and rescheduled onto a spare (about 60 s with the image
        # cached). GPU and network faults that leave the kubelet reporting are treated alike: by default nothing
        # acts on them sooner.
        "gpu": KindTiming(350.0, 350.0, 60.0, "50 s node-monitor grace + 300 s toleration"),
        "host": KindTiming(350.0, 350.0, 60.0, "50 s node-monitor grace + 300 s toleration"),
        "network": KindTiming(350.0, 350.0, 60.0, "50 s node-monitor grace + 300 s toleration"),
        "software": SOFTWARE,
    },
)

HA_OPS = Preset(
    "ha-ops",
    "ha-ops: event-driven GPU health, remediation controllers, spares in seconds",
    {
        # The agent reads NVML events (an XID reaches Slurm's drain in tens of milliseconds in the lab) and sweeps
        # every few seconds; the controller cordons and brings a spare in (17-20 s measured in the labs).
        "gpu": KindTiming(0.0, 5.0, 20.0, "agent NVML events and sweeps; controller spare-in"),
        # A lost node: its heartbeat and lease expire, and the controller and the scheduler must agree.
        "host": KindTiming(10.0, 30.0, 20.0, "agent heartbeat and lease expiry; controller spare-in"),
        # BFD notices a link down in about a second; ECMP routes around it.
        "network": KindTiming(0.0, 3.0, 5.0, "BFD and ECMP reroute"),
        "software": SOFTWARE,
    },
)

LLAMA3_16K = Preset(
    "llama3-16k",
    "the Llama 3 405B run: 16,384 H100 GPUs for 54 days, Table 5's failure mix",
    HA_OPS.timing,
    notes=(
        "Llama 3 publishes no detection or restart times (its automation handled all but three interruptions): "
        "this preset takes ha-ops' timings, a 30 s checkpoint and a 3 min restart",
    ),
)

PRESETS: dict[str, Preset] = {p.name: p for p in (LLAMA3_16K, NHC_5MIN, K8S_DEFAULT, HA_OPS)}
