"""What runs after a fault's undo operations (ha_ops.chaos.faults), by name from the journal: checks that the
cluster is whole again where undoing the operations alone does not make sure of it."""

from __future__ import annotations

import logging
import time

from ha_ops.cluster.base import Cluster
from ha_ops.cluster.ops import ServiceOp
from ha_ops.cluster.rollouts import driver_rollouts
from ha_ops.errors import CommandTimeout, TransportError

log = logging.getLogger(__name__)


def slurm_controllers_back(cluster: Cluster, timeout: float = 30.0, restarts: int = 3) -> None:
    """After a slurmctld fault the cluster is whole only when every slurmctld answers. Slurm 22.05's backup sometimes
    fails to return to standby when the primary takes control back (it logs "heartbeat file creation failed" from
    then on and answers no ping; shared/LAB-NOTES.md): restart it, as the runbook tells an operator to. Restarting
    one controller can knock the other out the same way, so this goes on round by round until both answer."""
    hosts = [n.name for n in cluster.layout.nodes_with_role("controller")]
    if hasattr(cluster, "plan_note"):  # a dry run: say what would happen, wait for nothing
        line = "wait until every slurmctld answers scontrol ping; restart any that does not"
        cluster.plan_note(", ".join(hosts), line)
        return
    for _ in range(restarts):
        down = _controllers_down(cluster, hosts, timeout)
        if not down:
            return
        for host in down:
            log.warning("slurmctld on %s did not answer after the primary returned; restarting it", host)
            cluster.node(host).apply(ServiceOp(host=host, unit="slurmctld", action="restart"))
    down = _controllers_down(cluster, hosts, timeout)
    if down:
        log.error("slurmctld on %s still does not answer after %d restarts", ", ".join(down), restarts)


def _controllers_down(cluster: Cluster, hosts: list[str], timeout: float) -> list[str]:
    """The controllers that do not answer `scontrol ping` within `timeout` seconds (an empty list once all do)."""
    deadline = time.time() + timeout
    down = hosts
    while True:
        try:
            answers = dict(cluster.slurm().controllers())
        except (CommandTimeout, TransportError):
            answers = {}
        down = [h for h in hosts if answers.get(h) != "UP"]
        if not down or time.time() >= deadline:
            return down
        time.sleep(1.0)


def end_driver_rollout(cluster: Cluster) -> None:
    """After a driver rollout fault: a rollout still open is aborted with every changed node rolled back (the
    remediation controllers ran throughout; the rollout's windows close as its nodes come back)."""
    rollouts = driver_rollouts(cluster)
    rollouts.end()
    rollouts.finish()
