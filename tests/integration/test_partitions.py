"""Recovery that survives partitions (issue 18), in the session's lab: a Slurm primary cut off from the network but
alive is fenced through its BMC (the lab's Redfish service, reached over the management network), and only then is
the backup told to take control; jobs run again."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from ha_ops.chaos.rollbacks import slurm_controllers_back
from ha_ops.lab.cluster import Lab
from ha_ops.util.wait import wait_for
from tests.labkit import audit_entries, cluster, leader, reset_remediation

pytestmark = pytest.mark.lab


def srun_works(lab: Lab) -> bool:
    result = lab.node("gpu1").run(["srun", "-N1", "-t", "1", "true"], timeout=15, check=False)
    return result.ok


def lead_from(lab: Lab, node: str) -> None:
    """Make `node`'s remediation controller the leader (the other one restarted, so it is the standby)."""
    other = next(n for n in ("ctl1", "ctl2") if n != node)
    if leader(lab) != node:
        lab.node(other).stop("controller", grace=1.0)
        wait_for(f"{node} leads", lambda: leader(lab) == node, timeout=20, interval=0.2)
        lab.node(other).start("controller")


@pytest.fixture
def cut_primary(lab: Lab) -> Iterator[Lab]:
    reset_remediation(lab)
    yield lab
    ctl1 = lab.node("ctl1")
    ctl1.link_up("eth0")
    if not ctl1.power_is_on():
        ctl1.power_cycle()  # as the runbook says: power it on once its network is mended
    slurm_controllers_back(cluster(lab), timeout=60)
    reset_remediation(lab)


def test_a_slurm_primary_cut_off_but_alive_is_fenced_through_its_bmc_and_the_backup_takes_over(
    cut_primary: Lab,
) -> None:
    lab = cut_primary
    lead_from(lab, "ctl2")  # the remediation leader is on the side that still sees the cluster
    assert srun_works(lab)
    cut = time.time()
    lab.node("ctl1").link_down("eth0")
    wait_for("jobs run again", lambda: srun_works(lab), timeout=90, interval=1.0)
    seconds = time.time() - cut
    assert not lab.node("ctl1").power_is_on()  # fenced: its BMC reports it off
    entries = audit_entries(lab)
    fence = [e for e in entries if e["what"] == "fence_slurmctld" and e["node"] == "ctl1"]
    assert fence and "powered off through its BMC" in fence[-1]["after"], fence
    takeover = [e for e in entries if e["what"] == "slurm_takeover"]
    assert takeover and takeover[-1]["node"] == "ctl2" and takeover[-1]["seq"] > fence[-1]["seq"], entries
    print(
        f"Slurm primary cut off: fenced through its BMC after {fence[-1]['at'] - cut:.1f} s, the backup told to "
        f"take control after {takeover[-1]['at'] - cut:.1f} s, jobs run again after {seconds:.1f} s"
    )
    gpu_nodes = {n.name for n in lab.ctx.layout.nodes_with_role("gpu")}
    touched = [e for e in entries if e["node"] in gpu_nodes]
    print("GPU node entries:", [(e["what"], e["node"], e.get("why")) for e in touched])
