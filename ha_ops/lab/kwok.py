"""KWOK's settings for the lab's size: a kubelet's timing for a small lab, and for thousands of KWOK nodes (scale
benchmarks) leases renewed less often and more workers to renew them, so that the control plane on this 2-core
machine keeps up (issue 43: 25,000 nodes)."""

from __future__ import annotations

import math
from typing import Any

# Lab timing, as the controllers' LAB_LADDER: a node whose kubelet stopped is NotReady after 20 s, not the default
# 50 s. Kubelets and KWOK renew their node leases every 10 s (a quarter of 40 s), so two renewals must be missed.
NODE_MONITOR_GRACE_S = 20
LEASE_S = 40
# At most this many lease renewals a second in all: 25,000 nodes renewing every 10 s would be 2,500 writes a second,
# more than the whole machine serves.
MAX_RENEWALS_PER_S = 200
# KWOK's workers for leases and node stages: 4 each by default, about 50 API writes a second here, while 25,000
# nodes need 200 renewals a second.
NODES_PER_WORKER = 500


def lease_s(nodes: int) -> int:
    """KWOK's node lease duration (renewed every quarter of it): a kubelet's 40 s up to MAX_RENEWALS_PER_S nodes
    every 10 s; longer above (25,000 nodes: 500 s, renewed every 125 s)."""
    return max(LEASE_S, 4 * math.ceil(nodes / MAX_RENEWALS_PER_S))


def node_monitor_grace_s(nodes: int) -> int:
    """kube-controller-manager's grace: two missed renewals of the lab's longest node lease (KWOK's; a real
    kubelet's is 40 s)."""
    return max(NODE_MONITOR_GRACE_S, lease_s(nodes) // 2)


def configuration(nodes: int) -> dict[str, Any]:
    """KWOK's own configuration document: one worker for leases and one for node stages per NODES_PER_WORKER."""
    workers = max(4, math.ceil(nodes / NODES_PER_WORKER))
    # A document given replaces KWOK's defaults rather than adding to them (any worker count left out is 0, and KWOK
    # refuses to start): every one is set, the others at KWOK's own defaults.
    options = {"nodeLeaseParallelism": workers, "nodePlayStageParallelism": workers, "podPlayStageParallelism": 4,
               "podsOnNodeSyncParallelism": 1, "enablePodsOnNodeSyncListPager": True,
               "enablePodsOnNodeSyncStreamWatch": False}  # fmt: skip
    return {"apiVersion": "config.kwok.x-k8s.io/v1alpha1", "kind": "KwokConfiguration", "options": options}
