"""Replicated storage in the lab (examples/lab-storage.yaml): lose a storage node, lose no data."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from ha_ops.lab import storage, storage_ops
from ha_ops.lab.cluster import Lab
from ha_ops.lab.http import http_get
from ha_ops.lab.paths import LabPaths
from ha_ops.remediation.audit import verify
from ha_ops.spec import load_spec
from ha_ops.util.wait import wait_for
from tests.labkit import REPO, running_lab, target

pytestmark = pytest.mark.lab

LAB_NAME = "itstor"  # the lab this module builds: the suite checks nothing of it is left (conftest)


@pytest.fixture(scope="module")
def slab() -> Iterator[Lab]:
    spec = load_spec(REPO / "examples" / "lab-storage.yaml").model_copy(update={"name": LAB_NAME})
    with running_lab(Lab(spec, LabPaths.for_lab(LAB_NAME))) as lab:
        yield lab


def test_slurm_state_and_checkpoints_live_on_moosefs_with_the_spec_replicas(slab: Lab) -> None:
    node = slab.node("ctl2")
    assert node.run(["stat", "-f", "-c", "%T", str(storage.MOUNT)]).stdout.strip().startswith("fuse")
    # Right after `up` slurmctld may still be writing its first heartbeat (heartbeat.new, then renamed).
    wait_for("Slurm's state saved on MooseFS",
             lambda: {"node_state", "heartbeat"} & set(node.run(["ls", str(storage.slurm_state_dir())]).stdout.split()),
             timeout=30, interval=0.2)  # fmt: skip
    goal = node.run(["mfsgetgoal", str(storage.checkpoint_dir())]).stdout
    assert goal.strip().endswith(": 2")
    health = storage_ops.moosefs(slab).health()
    assert health.master_up and sorted(health.chunkservers) == ["cs1", "cs2", "cs3"] and health.metaloggers == 1
    # Each chunkserver reports its own small capacity (tmpfs), not the host disk's.
    assert health.total_bytes == 3 * 512 * 2**20


def test_kill_a_chunkserver_every_file_readable_and_back_to_two_copies(slab: Lab) -> None:
    manifest = storage_ops.write_files(slab, 20, 1, folder="cs-kill")
    slab.node("cs2").kill("chunkserver")
    try:
        assert storage_ops.unreadable_files(slab, manifest) == []
        wait_for("every chunk at 2 copies again", lambda: not storage_ops.under_replicated(slab, list(manifest)),
                 timeout=30, interval=0.2)  # fmt: skip
    finally:
        slab.node("cs2").start("chunkserver")
    assert storage_ops.unreadable_files(slab, manifest, node="gpu3") == []


def test_cut_a_chunkserver_link_files_stay_readable(slab: Lab) -> None:
    manifest = storage_ops.write_files(slab, 10, 1, folder="cs-link")
    slab.node("cs3").link_down()
    try:
        assert storage_ops.unreadable_files(slab, manifest) == []
    finally:
        slab.node("cs3").link_up()
    want = len(storage.chunkservers(slab.ctx))
    wait_for("cs3 reconnected", lambda: len(storage_ops.moosefs(slab).health().chunkservers) == want, timeout=60,
             interval=0.5)  # fmt: skip


def test_the_chaos_probe_sees_the_storage_through_the_adapter(slab: Lab) -> None:
    from ha_ops.chaos.probes import storage_health

    health = storage_health(target(slab))
    assert health["healthy"] is True and health["master_up"] is True
    assert sorted(health["chunkservers"]) == ["cs1", "cs2", "cs3"]


def test_storage_metrics_and_alert_rules(slab: Lab) -> None:
    mon = slab.ctx.layout.node("mon1")

    def all_chunkservers() -> str | None:
        """The exporter's figures once they count all 3 chunkservers: a lab just up may still have one registering
        with the master (seen once in CI)."""
        url = f"http://{mon.address}:{storage.EXPORTER_PORT}/metrics"
        text = http_get(slab.ctx.netns("mon1"), url)[1].decode()
        return text if "ha_ops_storage_chunkservers 3.0" in text else None

    text = wait_for("all 3 chunkservers in the exporter's figures", all_chunkservers, timeout=30, interval=0.5)
    assert "ha_ops_storage_master_up 1.0" in text
    from ha_ops.lab import monitoring

    _, rules = monitoring.request(slab.ctx, "prometheus", "/api/v1/rules")
    names = {r["name"] for g in json.loads(rules)["data"]["groups"] for r in g["rules"]}
    assert {"HaOpsStorageMasterDown", "HaOpsStorageUnderReplicated", "HaOpsStorageMissingChunks"} <= names


def test_a_killed_master_is_replaced_without_a_human_no_file_lost_and_slurm_keeps_its_state(slab: Lab) -> None:
    manifest = storage_ops.write_files(slab, 20, 1, folder="master-loss")
    job = slab.node("gpu1").run(["sbatch", "--parsable", "-o", "/dev/null", "--wrap", "sleep 600"]).stdout.strip()
    wait_for("job known", lambda: job in slab.node("gpu1").run(["squeue", "-h", "-o", "%i"]).stdout, timeout=10)
    client = storage_ops.client(slab)
    served = ["sh", "-c", f"cat {next(iter(manifest))} >/dev/null && echo ok > {storage.MOUNT}/after-master-loss"]
    slab.node("mfsm").kill("mfsmaster")
    killed = time.monotonic()
    # Nobody promotes anything here: the storage watcher on the metalogger's node fences the master and promotes.
    # A request stuck in the mount's retry back-off is given up after 2 s and a new one sent: the figure is when a new
    # request is served (a 10 s limit once measured 14.5 s: a request sent just before the master came back).
    wait_for("a client reads and writes again", lambda: client.run(served, check=False, timeout=2).ok, timeout=60,
             interval=0.1)  # fmt: skip
    print(f"master killed -> reads and writes served again after {time.monotonic() - killed:.1f} s, no human")
    assert slab.state().storage_master == "mfsml"
    audit = storage.watcher_state_dir(slab.ctx) / "audit.jsonl"
    # The promotion is audited once `mfsmaster -a` returned, which waits for every chunkserver: clients may be
    # served a moment before that.
    entries = wait_for("the promotion audited", lambda: len(lines := audit.read_text().splitlines()) >= 2 and lines,
                       timeout=30, interval=0.1)  # fmt: skip
    entries = [json.loads(line) for line in entries]
    assert [(e["what"], e["node"]) for e in entries] == [("fence_storage_master", "mfsm"),
                                                         ("promote_metalogger", "mfsm")], entries  # fmt: skip
    assert entries[0]["after"].startswith("fenced over ssh") and verify(audit) == []
    assert storage_ops.unreadable_files(slab, manifest) == []  # checksums: no data lost
    assert storage_ops.unreadable_files(slab, manifest, node="ctl2") == []  # clients kept their mounts
    assert job in slab.node("gpu1").run(["squeue", "-h", "-o", "%i"], timeout=30).stdout
    # Slurm writes its state to the promoted master: a new job is accepted and recorded.
    new = (
        slab.node("gpu1").run(["sbatch", "--parsable", "-o", "/dev/null", "--wrap", "true"], timeout=30).stdout.strip()
    )
    assert int(new) > int(job)
    # `up` repairs around the promoted master; it never restarts the fenced (masked) one, nor does a power cycle,
    # and the watcher, restarted, promotes nothing twice.
    slab.node("mfsml").stop("storage-watch")
    slab.up()
    assert slab.state().services["mfsm/mfsmaster"].masked and not slab.node("mfsm").is_running("mfsmaster")
    mfsm = slab.node("mfsm")
    mfsm.power_cycle()
    # (Named when it fails: stop 55's CI once found the node not powered on right after its power cycle, and two runs
    # of the module after it passed.)
    stopped = [s for s in mfsm.services() if not mfsm.is_masked(s) and not mfsm.is_running(s)]
    assert not mfsm.is_running("mfsmaster") and mfsm.powered_on(), f"not running: {stopped}, links down: " + str(
        mfsm.links_down()
    )
    assert storage_ops.unreadable_files(slab, manifest) == []
    assert len(audit.read_text().splitlines()) == 2
