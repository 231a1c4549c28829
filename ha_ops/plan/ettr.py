"""The closed forms of Kokolis et al., "Revisiting Reliability in Large-Scale Machine Learning Research Clusters",
HPCA 2025 (arXiv 2410.21680): a job's MTTF and its expected Effective Training Time Ratio (ETTR: the share of the
job's wall-clock time spent on training that is kept).

    MTTF = 1 / (N_nodes * r_f)
    ETTR ~ (1 - N_nodes * r_f * (u0 + dt / 2)) / (1 + w / dt)

r_f: failures per node per unit time; u0: the time from a failure to training again (detection, a spare in, the
restart, the checkpoint's load); dt: the checkpoint interval (compute between checkpoints); w: the checkpoint
write's blocking time. Each failure costs u0 plus, on average, half an interval of work since the last checkpoint;
each interval costs w. Their optimum, dt* = sqrt(2 w / (N_nodes r_f)), is Young's (checkpoint.young_interval).
"""

from __future__ import annotations

import math


def job_mttf_s(nodes: int, failures_per_node_s: float) -> float:
    """Kokolis et al.: 1 / (N_nodes r_f); failures of the job's nodes are independent and each ends the job."""
    if nodes <= 0 or not failures_per_node_s > 0:
        raise ValueError("a job needs nodes and a positive failure rate")
    return 1.0 / (nodes * failures_per_node_s)


def ettr_kokolis(nodes: int, failures_per_node_s: float, restart_s: float, interval_s: float, write_s: float) -> float:
    """Kokolis et al.'s closed-form ETTR, floored at 0 (past that failures come faster than the job recovers)."""
    if interval_s <= 0 or restart_s < 0 or write_s < 0:
        raise ValueError("the interval must be positive, the restart and the write not negative")
    lost = nodes * failures_per_node_s * (restart_s + interval_s / 2.0)
    return max(0.0, (1.0 - lost) / (1.0 + write_s / interval_s))


def optimal_interval_s(nodes: int, failures_per_node_s: float, write_s: float) -> float:
    """Kokolis et al.'s optimum of the ETTR above: sqrt(2 w / (N_nodes r_f)), Young's interval."""
    return math.sqrt(2.0 * write_s * job_mttf_s(nodes, failures_per_node_s))
