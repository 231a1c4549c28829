"""Spares: the fewest spare nodes that keep a pool at full capacity through repairs, with a target probability.

Each node alternates between running (failing at rate r per node) and being repaired (for R on average), so in the
long run it is in repair with probability p = rR / (1 + rR), whatever the repair time's distribution (an
alternating renewal process). With N nodes in use and S spares, a failed node is replaced by a spare and returns as
one once repaired, so the pool keeps full capacity while at most S of its N + S nodes are in repair at once. The
count in repair is Binomial(N + S, p) (nodes fail independently); the answer is the smallest S with
P(in repair <= S) >= target. (For small p this is the Poisson tail of an M/G/inf queue with mean (N + S) r R.)
Spares are counted as failing like the rest: an idle spare fails less, so the answer errs on the safe side.

The design's rule of thumb keeps 15-20% of a pool as spares (docs/architecture.md, `spare_fraction`); `compare`
states what that rule buys next to the model's answer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

RULE_LOW, RULE_HIGH = 0.15, 0.20


def in_repair_probability(failures_per_node_s: float, repair_s: float) -> float:
    load = failures_per_node_s * repair_s
    return load / (1.0 + load)


def full_capacity_probability(nodes: int, spares: int, p: float) -> float:
    """P(Binomial(nodes + spares, p) <= spares), summed in log space (n p can be large)."""
    n = nodes + spares
    if p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 0.0
    log_pmf = n * math.log1p(-p)  # k = 0
    log_ratio = math.log(p) - math.log1p(-p)
    terms = [log_pmf]
    for k in range(spares):
        log_pmf += math.log((n - k) / (k + 1)) + log_ratio
        terms.append(log_pmf)
    top = max(terms)
    return min(1.0, math.exp(top) * sum(math.exp(t - top) for t in terms))


@dataclass(frozen=True)
class SparesPlan:
    nodes: int
    failures_per_node_s: float
    repair_s: float
    target: float
    spares: int  # the model's answer
    probability: float  # P(full capacity) with that many spares
    mean_in_repair: float  # expected nodes in repair at any moment, with those spares
    rule_low: int  # the 15-20% rule's spares
    rule_high: int
    rule_low_probability: float

    @property
    def fraction(self) -> float:
        return self.spares / self.nodes


def plan_spares(nodes: int, failures_per_node_s: float, repair_s: float, target: float) -> SparesPlan:
    if nodes <= 0:
        raise ValueError(f"a pool needs nodes, not {nodes}")
    if not failures_per_node_s > 0 or not repair_s > 0:
        raise ValueError("the failure rate and the repair time must be positive")
    if not 0.0 < target < 1.0:
        raise ValueError(f"the target is a probability below 1, not {target}")
    p = in_repair_probability(failures_per_node_s, repair_s)
    spares = 0
    while (probability := full_capacity_probability(nodes, spares, p)) < target:
        spares += 1
        if spares > 10 * nodes:  # p near 1: no number of spares will do
            raise ValueError(f"nodes are in repair {p:.0%} of the time: no spare pool reaches {target}")
    low, high = math.ceil(RULE_LOW * nodes - 1e-9), math.ceil(RULE_HIGH * nodes - 1e-9)
    return SparesPlan(
        nodes=nodes,
        failures_per_node_s=failures_per_node_s,
        repair_s=repair_s,
        target=target,
        spares=spares,
        probability=probability,
        mean_in_repair=(nodes + spares) * p,
        rule_low=low,
        rule_high=high,
        rule_low_probability=full_capacity_probability(nodes, low, p),
    )
