"""Chaos experiments run by chaostoolkit-lib against the lab, and cleanup after a killed runner."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ha_ops.chaos import faults
from ha_ops.chaos.probes import reachable as reachable_probe
from ha_ops.lab.cluster import Lab
from ha_ops.util.wait import wait_for
from tests.labkit import REPO, OverSsh, cluster, over_ssh, target

pytestmark = [pytest.mark.lab, pytest.mark.usefixtures("clean_lab")]

EXPERIMENTS = REPO / "chaos" / "experiments"


def chaos(lab: Lab, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "ha_ops", "chaos", *args, "--target", f"lab:{lab.spec.name}"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def reachable(source: str, dest: str, lab: Lab) -> bool:
    return reachable_probe(source, dest, target(lab))


def test_gpu_fault_experiment_passes_when_recovery_works(lab: Lab, tmp_path: Path) -> None:
    journal = tmp_path / "journal.json"
    result = chaos(lab, "run", str(EXPERIMENTS / "gpu-xid79.yaml"), "--journal", str(journal))
    assert result.returncode == 0, result.stdout + result.stderr
    data = json.loads(journal.read_text())
    assert data["status"] == "completed" and data["deviated"] is False
    outputs = {r["activity"]["name"]: r["output"] for r in data["run"]}
    assert outputs["the controller took the node out of service"].startswith("drained")
    assert faults.active(cluster(lab)) == []


def test_the_same_experiment_goes_red_when_recovery_is_broken(lab: Lab, tmp_path: Path) -> None:
    # A GPU that no reset or reboot repairs: the node is held for replacement and the fleet is not whole again.
    journal = tmp_path / "journal.json"
    result = chaos(
        lab, "run", str(EXPERIMENTS / "gpu-xid79.yaml"), "--var", "permanent=true", "--journal", str(journal)
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "hypothesis violated" in result.stdout
    assert json.loads(journal.read_text())["deviated"] is True
    assert faults.active(cluster(lab)) == []


def test_dry_run_injects_nothing_and_prints_the_commands_per_host(lab: Lab) -> None:
    result = chaos(lab, "run", str(EXPERIMENTS / "silent-link-drop.yaml"), "--dry-run")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "action: the link drops every frame" in result.stdout and "\nthe link carries frames again:" in result.stdout
    lines = result.stdout.splitlines()
    assert any("leaf1: nsenter --net=" in ln and "iptables -w -t raw -A HAO-SILENT -i to-spine2 -j DROP" in ln
               for ln in lines), result.stdout  # fmt: skip
    assert any(ln.strip().startswith("undo: leaf1:") and "-X HAO-SILENT" in ln for ln in lines), result.stdout
    assert reachable("gpu1", "gpu2", lab)
    held = chaos(lab, "run", str(EXPERIMENTS / "link-down-held.yaml"), "--dry-run")
    assert held.returncode == 0 and "action: the uplink goes down" in held.stdout
    assert "gpu2: lab " in held.stdout and "gpu2 eth0 down" in held.stdout
    assert reachable("gpu2", "gpu1", lab)
    assert faults.active(cluster(lab)) == []


def test_cleanup_restores_the_lab_after_the_runner_is_killed_mid_fault(lab: Lab) -> None:
    cmd = [sys.executable, "-m", "ha_ops", "chaos", "run", str(EXPERIMENTS / "link-down-held.yaml"), "--target",
           f"lab:{lab.spec.name}"]  # fmt: skip
    runner = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for("the fault injected", lambda: faults.active(cluster(lab)) and not reachable("gpu2", "gpu1", lab),
                 timeout=30, interval=0.2)  # fmt: skip
    finally:
        runner.kill()
        runner.wait(10)
    time.sleep(0.5)
    assert not reachable("gpu2", "gpu1", lab)  # the killed runner left the link down
    result = chaos(lab, "cleanup")
    assert result.returncode == 0 and "link:gpu2:eth0" in result.stdout
    assert reachable("gpu2", "gpu1", lab)
    assert faults.active(cluster(lab)) == []


@pytest.fixture(scope="module")
def ssh(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> OverSsh:
    return over_ssh(lab, tmp_path_factory.mktemp("over-ssh"))


def kill_runner_once(ssh: OverSsh, experiment: Path, injected: Callable[[], bool]) -> None:
    """`chaos run --inventory` killed with SIGKILL as soon as its fault is in."""
    cmd = [sys.executable, "-m", "ha_ops", "chaos", "run", str(experiment), "--inventory", str(ssh.inventory)]
    runner = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ssh.env)
    try:
        wait_for("the fault injected", injected, timeout=60, interval=0.2)
    finally:
        runner.kill()
        runner.wait(10)
    time.sleep(0.5)


def test_over_ssh_a_dry_run_prints_the_ssh_commands_per_host_and_changes_nothing(lab: Lab, ssh: OverSsh) -> None:
    result = ssh.ha_ops("chaos", "run", str(EXPERIMENTS / "silent-link-drop.yaml"), "--dry-run", "--inventory",
                        str(ssh.inventory), timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert any("leaf1: ssh root@169.254." in ln and "iptables -w -t raw -A HAO-SILENT -i to-spine2 -j DROP" in ln
               for ln in lines), result.stdout  # fmt: skip
    assert "nsenter" not in result.stdout
    assert reachable("gpu1", "gpu2", lab) and faults.active(cluster(lab)) == []


def test_over_ssh_cleanup_restores_a_link_and_a_frozen_service_after_the_runner_is_killed(
    lab: Lab, ssh: OverSsh
) -> None:
    # What the runner did and cleanup undoes goes over SSH; what the test checks is read through the lab itself.
    cleanup = ("chaos", "cleanup", "--inventory", str(ssh.inventory))
    kill_runner_once(ssh, EXPERIMENTS / "link-down-held.yaml", lambda: not reachable("gpu2", "gpu1", lab))
    assert not reachable("gpu2", "gpu1", lab)  # the killed runner left the link down
    result = ssh.ha_ops(*cleanup, timeout=120)
    assert result.returncode == 0 and "link:gpu2:eth0" in result.stdout, result.stdout + result.stderr
    assert reachable("gpu2", "gpu1", lab)  # the link up, and the default route back (the host's network manager)

    ctl1 = lab.node("ctl1")
    kill_runner_once(ssh, EXPERIMENTS / "slurm-primary-freeze.yaml", lambda: ctl1.is_frozen("slurmctld"))
    assert ctl1.is_frozen("slurmctld")
    result = ssh.ha_ops(*cleanup, timeout=180)
    assert result.returncode == 0 and "service:ctl1:slurmctld" in result.stdout, result.stdout + result.stderr
    assert ctl1.is_running("slurmctld") and not ctl1.is_frozen("slurmctld")
    assert lab.slurm_controllers() == {"ctl1": "UP", "ctl2": "UP"}
    again = ssh.ha_ops(*cleanup, timeout=60)
    assert again.returncode == 0 and "rolled back 0 fault(s)" in again.stdout, again.stdout + again.stderr


def test_targets_outside_the_spec_are_refused_and_nothing_is_journaled(lab: Lab) -> None:
    from ha_ops.chaos import actions
    from ha_ops.chaos.faults import FaultRefused

    conf = target(lab)
    for inject in (
        lambda: actions.node_loss("gpu9", configuration=conf),
        lambda: actions.link_down("gpu1", interface="eth7", configuration=conf),
        lambda: actions.gpu_fault("gpu1", gpu=8, configuration=conf),
        lambda: actions.kill_service("gpu1", "slurmctld", configuration=conf),
        lambda: actions.kill_service("host", "slurmd", configuration=conf),
        lambda: actions.partition(["gpu1"], ["db7"], configuration=conf),
    ):
        with pytest.raises(FaultRefused, match="refusing target"):
            inject()
    assert faults.active(cluster(lab)) == []
    assert not lab.slurm_problems()


def test_a_capability_the_node_lacks_is_refused_before_anything_is_journaled(lab: Lab) -> None:
    from ha_ops.chaos import actions
    from ha_ops.cluster.gpu import CapabilityMissing

    with pytest.raises(CapabilityMissing, match="gpu_faults"):
        actions.gpu_fault("ctl1", gpu=0, configuration=target(lab))  # a controller has no GPUs
    assert faults.active(cluster(lab)) == []


def test_a_fault_beyond_the_concurrency_limit_is_refused_before_it_is_injected(lab: Lab) -> None:
    from ha_ops.chaos import actions
    from ha_ops.chaos.faults import FaultRefused

    conf = target(lab)
    with faults.limit(1):
        actions.link_down("gpu2", configuration=conf)
        try:
            with pytest.raises(FaultRefused, match="limit is 1"):
                actions.link_down("gpu1", configuration=conf)
            assert reachable("gpu1", "gpu3", lab)  # the refused fault was not injected
            assert [f["key"] for f in faults.active(cluster(lab))] == ["link:gpu2:eth0"]
        finally:
            faults.cleanup(cluster(lab))
    assert reachable("gpu2", "gpu1", lab)


def test_max_faults_option_lets_a_second_fault_in(lab: Lab) -> None:
    from ha_ops.chaos import actions

    conf = target(lab)
    with faults.limit(2):
        actions.link_down("gpu2", configuration=conf)
        actions.link_down("gpu3", configuration=conf)
        assert len(faults.active(cluster(lab))) == 2
        faults.cleanup(cluster(lab))
    assert reachable("gpu2", "gpu3", lab)
