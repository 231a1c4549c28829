"""The fault journal and dry runs over the cluster port, against an SSH cluster whose transports record what they
are asked to run (pure logic: what is journaled when, what each host is sent, what cleanup keeps)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from ha_ops.chaos import actions, faults, target
from ha_ops.chaos.dryrun import plan_commands
from ha_ops.chaos.faults import FaultRefused
from ha_ops.chaos.runner import load_experiment
from ha_ops.cluster.gpu import CapabilityMissing
from ha_ops.cluster.inventory import Inventory, InventoryHost
from ha_ops.cluster.ssh import SshCluster, SshNode
from ha_ops.errors import TransportError
from ha_ops.spec import load_spec
from ha_ops.util.proc import CommandResult

REPO = Path(__file__).resolve().parents[2]
EXPERIMENTS = REPO / "chaos" / "experiments"


class Host:
    """A recording transport: what each host was sent, and a switch that makes it unreachable."""

    def __init__(self, name: str, log: list[tuple[str, list[str]]]) -> None:
        self.name = name
        self.log = log
        self.reachable = True
        self.lost_before: list[str] | None = None  # the connection drops before a command that starts so

    def run(self, argv: Sequence[str], *, timeout: float = 30.0, check: bool = True, input: str | None = None,
            env: object = None, privileged: bool = True) -> CommandResult:  # fmt: skip
        if not self.reachable or (self.lost_before and list(argv[: len(self.lost_before)]) == self.lost_before):
            raise TransportError(f"{self.name}: cannot reach {self.name}:22: [Errno 113] No route to host")
        self.log.append((self.name, list(argv)))
        if argv[:3] == ["ip", "-o", "link"]:
            return CommandResult(list(argv), 0, "1: lo: <LOOPBACK>\n2: eth0@if9: <UP>\n3: mgmt0: <UP>\n", "")
        if argv[:2] == ["systemctl", "show"]:
            return CommandResult(list(argv), 0, "loaded\n", "")
        return CommandResult(list(argv), 0, "", "")

    def close(self) -> None:
        return None


@pytest.fixture
def ssh_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # -> Iterator[tuple[SshCluster, list, dict]]
    spec = load_spec(REPO / "examples" / "lab.yaml")
    names = ["ctl1", "ctl2", "mon1", "gpu1", "gpu2", "gpu3", "gpu4"]
    hosts = {n: InventoryHost(name=n, address=f"10.99.0.{i + 10}", ha_ops_command="ha-ops",
                              gpu_injection="fake" if n.startswith("gpu") else "none",
                              fake_gpu_dir="/var/lib/ha-ops/fake-gpus" if n.startswith("gpu") else None)
             for i, n in enumerate(names)}  # fmt: skip
    cluster = SshCluster(spec, Inventory(source=tmp_path / "hosts.yml", hosts=hosts), journal_dir=tmp_path / "j")
    log: list[tuple[str, list[str]]] = []
    transports = {n: Host(n, log) for n in names}
    monkeypatch.setattr(cluster, "node", lambda name: SshNode(cluster.inventory.host(name), transports[name], 8))
    configuration = target.configuration_for(inventory=tmp_path / "hosts.yml")
    with target.using(cluster, configuration):  # type: ignore[arg-type]
        yield cluster, log, transports, configuration


def test_a_fault_is_journaled_with_its_undo_before_it_is_sent(ssh_cluster) -> None:  # type: ignore[no-untyped-def]
    cluster, log, _, conf = ssh_cluster
    journaled_first: list[bool] = []
    original = faults.journal_path

    def spy(c):  # type: ignore[no-untyped-def]
        journaled_first.append(not any(argv[:2] == ["systemctl", "kill"] for _, argv in log))
        return original(c)

    faults.journal_path = spy  # type: ignore[assignment]
    try:
        actions.freeze_service("ctl1", "slurmctld", configuration=conf)
    finally:
        faults.journal_path = original  # type: ignore[assignment]
    assert journaled_first and journaled_first[0]  # the entry first; a later write marks the fault in place
    assert ("ctl1", ["systemctl", "kill", "--signal=SIGSTOP", "slurmctld"]) in log
    [entry] = faults.active(cluster)
    assert entry["key"] == "service:ctl1:slurmctld" and entry["after"] == "slurm_controllers_back"
    assert [op.action for op in faults.undo_ops(entry)] == ["thaw", "start"]
    assert entry["in_at"] >= entry["at"] and faults.injected_at([entry]) == entry["in_at"]  # in place: measured


def test_a_fault_that_did_not_go_in_has_no_time_it_was_in_place(ssh_cluster) -> None:  # type: ignore[no-untyped-def]
    cluster, _, transports, conf = ssh_cluster
    transports["gpu2"].lost_before = ["ip", "link", "set"]  # the fault's own command is lost (after journaling)
    with pytest.raises(TransportError):
        actions.link_down("gpu2", interface="eth0", configuration=conf)
    [entry] = faults.active(cluster)
    assert "in_at" not in entry and faults.injected_at([entry]) is None
    transports["gpu2"].lost_before = None
    faults.cleanup(cluster)


def test_cleanup_keeps_what_an_unreachable_host_could_not_undo_until_it_answers(ssh_cluster) -> None:  # type: ignore[no-untyped-def]
    cluster, log, transports, conf = ssh_cluster
    with faults.limit(2):
        actions.link_down("gpu2", configuration=conf)
        actions.gpu_fault("gpu3", gpu=1, configuration=conf)
    assert ("gpu3", ["ha-ops", "gpu", "fake-fault", "--fake-dir", "/var/lib/ha-ops/fake-gpus", "--gpu", "1",
                     "--fault", "xid", "--xid", "79"]) in log  # fmt: skip
    transports["gpu2"].reachable = False
    undone = faults.cleanup(cluster)
    assert undone[0] == "gpu:gpu3:1"  # newest first: the GPU fault is undone ...
    assert undone[1].startswith("link:gpu2:eth0 (kept: gpu2: cannot reach")  # ... the link is kept
    assert ("gpu3", ["ha-ops", "gpu", "fake-clear", "--fake-dir", "/var/lib/ha-ops/fake-gpus", "--gpu", "1"]) in log
    assert [e["key"] for e in faults.active(cluster)] == ["link:gpu2:eth0"]
    transports["gpu2"].reachable = True  # it answers again: the next cleanup finishes the job
    assert faults.cleanup(cluster) == ["link:gpu2:eth0"]
    assert log[-1] == ("gpu2", ["ip", "link", "set", "dev", "eth0", "up"])
    assert faults.active(cluster) == []


def test_bad_targets_and_missing_capabilities_journal_nothing_and_send_nothing(ssh_cluster) -> None:  # type: ignore[no-untyped-def]
    cluster, log, _, conf = ssh_cluster
    with pytest.raises(FaultRefused, match="refusing target 'gpu9': not a host of cluster 'lab'"):
        actions.link_down("gpu9", configuration=conf)
    with pytest.raises(FaultRefused, match="refusing target gpu1/eth7: gpu1 has eth0, mgmt0"):
        actions.link_down("gpu1", interface="eth7", configuration=conf)
    with pytest.raises(CapabilityMissing, match="ctl1 lacks power for 'power off ctl1' \\(no ha_ops_bmc"):
        actions.node_loss("ctl1", configuration=conf)  # no ha_ops_bmc in the inventory
    with pytest.raises(CapabilityMissing, match="mon1 lacks gpu_faults"):
        actions.gpu_fault("mon1", gpu=0, configuration=conf)
    gpu4 = cluster.inventory.hosts["gpu4"]
    cluster.inventory.hosts["gpu4"] = gpu4.model_copy(update={"gpu_injection": "none", "fake_gpu_dir": None})
    with pytest.raises(CapabilityMissing, match="gpu4 lacks gpu_faults"):
        actions.gpu_fault("gpu4", gpu=0, configuration=conf)
    assert faults.active(cluster) == []
    assert not [argv for _, argv in log if argv[0] in ("ip",) and "set" in argv]  # nothing was changed anywhere


def test_a_dry_run_prints_each_hosts_commands_and_undo_and_sends_no_change(ssh_cluster) -> None:  # type: ignore[no-untyped-def]
    cluster, log, _, conf = ssh_cluster
    experiment = load_experiment(EXPERIMENTS / "slurm-primary-freeze.yaml", conf)
    planned = plan_commands(experiment, cluster)
    lines = [(p.activity, p.host, p.undo, p.line) for p in planned]
    assert ("the primary slurmctld is frozen", "ctl1", False,
            "ssh root@10.99.0.10: systemctl kill --signal=SIGSTOP slurmctld") in lines  # fmt: skip
    assert ("the primary slurmctld is frozen", "ctl1", True, "ssh root@10.99.0.10: systemctl start slurmctld") in lines
    assert (
        "the primary starts again",
        "ctl1",
        True,
        "ssh root@10.99.0.10: systemctl kill --signal=SIGCONT slurmctld",
    ) in lines
    assert ("hold the fault", "-", False, "hold the fault") in lines
    # After the primary is back the rollback waits for both controllers: planned, not waited for.
    assert any(host == "ctl1, ctl2" and "every slurmctld answers" in line for _, host, _, line in lines), lines
    assert not [argv for _, argv in log if argv[0] == "scontrol"]
    assert not [argv for _, argv in log if argv[0] == "systemctl" and argv[1] != "show"]  # only read-only questions
    assert faults.active(cluster) == []


def test_an_isolation_is_undone_with_its_network_and_a_slurm_controllers_wait(ssh_cluster) -> None:  # type: ignore[no-untyped-def]
    cluster, log, _, conf = ssh_cluster
    assert actions.isolate_node("ctl1", configuration=conf) == "ctl1 cut off from the network"
    assert ("ctl1", ["ip", "link", "set", "dev", "eth0", "down"]) in log
    [entry] = faults.active(cluster)
    assert entry["key"] == "isolated:ctl1" and entry["after"] == "slurm_controllers_back"
    # No BMC in this inventory: nothing to power on, so the undo only mends the link.
    assert [op.kind for op in faults.undo_ops(entry)] == ["link"]
    faults.forget(cluster, "isolated:ctl1")
    actions.isolate_node("gpu2", configuration=conf)
    assert "after" not in faults.active(cluster)[0]
