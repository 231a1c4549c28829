"""The full lab (examples/lab-storage.yaml: MooseFS, both remediation controllers) reached as a real cluster is:
over SSH with the inventory `ha-ops lab inventory --ssh` writes (the lab's sshd and host keys on its management
network, its Redfish BMC, systemctl on each node), no nsenter and no lab PIDs. The standard game day end to end, red
when recovery is broken, and every runbook verified. The game day's reports are kept as a CI artifact under
$HA_OPS_ARTIFACTS (default: artifacts/ in the checkout)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from ha_ops.chaos import faults
from ha_ops.lab.cluster import Lab
from ha_ops.lab.paths import LabPaths
from ha_ops.spec import load_spec
from tests.labkit import REPO, OverSsh, audit_entries, cluster, over_ssh, reset_remediation, running_lab
from tests.pagecheck import assert_text_apart, screenshot

pytestmark = pytest.mark.lab

LAB_NAME = "itfull"  # the lab this module builds: the suite checks nothing of it is left (conftest)
STANDARD = REPO / "chaos" / "gamedays" / "standard.yaml"
ARTIFACTS = Path(os.environ.get("HA_OPS_ARTIFACTS", REPO / "artifacts"))


@pytest.fixture(scope="module")
def flab() -> Iterator[Lab]:
    spec = load_spec(REPO / "examples" / "lab-storage.yaml").model_copy(update={"name": LAB_NAME})
    with running_lab(Lab(spec, LabPaths.for_lab(LAB_NAME))) as lab:
        yield lab
        faults.cleanup(cluster(lab))


@pytest.fixture(scope="module")
def ssh(flab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OverSsh]:
    reached = over_ssh(flab, tmp_path_factory.mktemp("over-ssh"))
    yield reached
    left = reached.ha_ops("chaos", "cleanup", "--inventory", str(reached.inventory))
    assert left.returncode == 0, left.stdout + left.stderr


def what_the_cluster_did(lab: Lab) -> str:
    """For a failed check: the controllers' last actions and Slurm's node states, so that CI's log tells why."""
    actions = [f"{e['what']} {e['node'] or ''}: {str(e['after'])[:80]}" for e in audit_entries(lab)[-12:]]
    sinfo = lab.node("gpu1").run(["sinfo", "-N", "-h", "-o", "%N %T %E"], check=False, timeout=15).stdout
    return "audit: " + " | ".join(actions) + "\nsinfo: " + " | ".join(sinfo.strip().splitlines())


def gameday(ssh: OverSsh, plan: Path, reports: Path, *extra: str) -> subprocess.CompletedProcess:
    return ssh.ha_ops("gameday", "run", str(plan), "--inventory", str(ssh.inventory), "--report-dir", str(reports),
                      "--json", *extra)  # fmt: skip


def test_the_standard_game_day_passes_end_to_end_over_ssh_within_10_minutes(flab: Lab, ssh: OverSsh) -> None:
    reports = ARTIFACTS / "gameday-standard"
    started = time.monotonic()
    result = gameday(ssh, STANDARD, reports)
    elapsed = time.monotonic() - started
    report = json.loads((reports / "latest" / "gameday.json").read_text())
    lines = [f"standard game day: {elapsed:.0f} s, {'passed' if report['passed'] else 'FAILED'}"]
    for f in report["faults"]:
        jobs = f["jobs"] or {}
        lines.append(f"  {f['name']:36} {f['verdict']:7} detect {f['time_to_detect_s'] or -1:5.1f} s  recover "
                     f"{f['time_to_recover_s'] or -1:5.1f} s  jobs lost {len(jobs.get('lost', []))} twice "
                     f"{len(jobs.get('ran_twice', []))}  {f['why']}")  # fmt: skip
    (reports / "summary.txt").write_text("\n".join(lines) + "\n")
    print("\n" + "\n".join(lines))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert report["passed"] is True and len(report["faults"]) == 9
    for f in report["faults"]:
        assert f["verdict"] == "passed", f
        assert 0 <= f["time_to_detect_s"] <= f["time_to_recover_s"]
        assert f["jobs"]["ok"] and f["jobs"]["jobs"] == 3 and not f["jobs"]["lost"] and not f["jobs"]["ran_twice"]
    # The GPU fault and the node loss each hit a running job: it was requeued, resumed and completed once.
    hit = {f["name"]: f["jobs"]["restarted"] for f in report["faults"]}
    assert hit["GPU XID 79"] and hit["node loss"], hit
    assert elapsed < 600
    run = reports / "latest"
    assert {p.name for p in run.iterdir()} >= {"gameday.json", "gameday.junit.xml", "gameday.html", "journals"}
    assert len(list((run / "journals").glob("*.json"))) == 9  # each fault's Chaos Toolkit journal
    # The real report and the history page as a person sees them: no timeline label overlapping another
    # (screenshots kept beside the reports, in the CI artifacts).
    for page in (run / "gameday.html", reports / "index.html"):
        assert_text_apart(page)
        screenshot(page, reports / f"{page.stem}.png")
    assert faults.active(cluster(flab)) == []


def test_the_game_day_goes_red_naming_the_fault_when_the_slurm_backup_is_disabled(
    flab: Lab, ssh: OverSsh, tmp_path: Path
) -> None:
    plan = yaml.safe_load(STANDARD.read_text())
    # The plan's steady state would refuse to start without the backup; here the backup is the broken recovery.
    plan["steady"] = [c for c in plan["steady"] if c["probe"] != "slurm_controller_status"]
    for fault in plan["faults"]:
        fault["experiment"] = str((STANDARD.parent / fault["experiment"]).resolve())
        if fault["name"] == "Slurm primary kill":  # (it recovers in 6-7 s when it can; without the backup, never)
            fault["timeout_s"], fault["recover"]["arguments"]["timeout_s"] = 20, 15
    path = tmp_path / "standard-no-backup.yaml"
    path.write_text(yaml.safe_dump(plan))
    reset_remediation(flab)  # fresh controllers: the breaker's window still counts the standard run's cordons
    flab.node("ctl2").stop("slurmctld")
    try:
        result = gameday(ssh, path, tmp_path / "reports", "--only", "Slurm primary kill", "--only", "GPU XID 79")
    finally:
        flab.node("ctl2").start("slurmctld")
        faults.cleanup(cluster(flab))
    assert result.returncode == 1, result.stdout + result.stderr
    report = json.loads((tmp_path / "reports" / "latest" / "gameday.json").read_text())
    verdicts = {f["name"]: (f["verdict"], f["why"]) for f in report["faults"]}
    assert report["passed"] is False
    assert verdicts["GPU XID 79"][0] == "passed", verdicts  # the rest of the cluster still recovers
    assert verdicts["Slurm primary kill"][0] == "failed" and "not recovered" in verdicts["Slurm primary kill"][1]
    junit = (tmp_path / "reports" / "latest" / "gameday.junit.xml").read_text()
    assert 'failures="1"' in junit and "Slurm primary kill" in junit


def test_the_gpu_game_day_goes_red_with_both_remediation_controllers_stopped(
    flab: Lab, ssh: OverSsh, tmp_path: Path
) -> None:
    gpu = REPO / "chaos" / "gamedays" / "gpu.yaml"
    plan = yaml.safe_load(gpu.read_text())
    [fault] = plan["faults"]
    fault["experiment"] = str((gpu.parent / fault["experiment"]).resolve())
    fault["timeout_s"] = 15  # (detected within 1 s when a controller runs; here never)
    path = tmp_path / "gpu-no-controllers.yaml"
    path.write_text(yaml.safe_dump(plan))
    reset_remediation(flab)
    for node in ("ctl1", "ctl2"):
        flab.node(node).stop("controller")
    try:
        result = gameday(ssh, path, tmp_path / "reports")
    finally:
        faults.cleanup(cluster(flab))
        reset_remediation(flab)  # controllers started again, the GPU and the node back in service
    assert result.returncode == 1, result.stdout + result.stderr
    report = json.loads((tmp_path / "reports" / "latest" / "gameday.json").read_text())
    [fault] = report["faults"]
    assert report["passed"] is False and fault["verdict"] == "failed" and "not detected" in fault["why"], fault


def test_every_runbook_is_verified_over_ssh_and_the_driver_rollout_also_through_the_labs_own_path(
    flab: Lab, ssh: OverSsh
) -> None:
    # The lab set up as a real site is before a rollout game day: its package source has the build to roll out (one
    # that fails validation) and the fleet runs a driver from the gpu_driver role.
    lab_cli = [sys.executable, "-m", "ha_ops", "lab"]
    for step in (["driver-build", "575.51.02", "--broken"], ["driver-install", "550.90.07"]):
        done = subprocess.run([*lab_cli, *step, "--name", LAB_NAME], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
    reset_remediation(flab)
    result = ssh.ha_ops("runbook", "verify", "--all", "--inventory", str(ssh.inventory), "--json", timeout=1800)
    reports = json.loads(result.stdout) if result.stdout.strip().startswith("[") else []
    stale = {r["runbook"]: [s for s in r["steps"] if not s["ok"]] for r in reports if r["stale"]}
    if result.returncode != 0 or stale:  # printed whole (an assertion's message is cut short in CI's log)
        for runbook, steps in stale.items():
            for step in steps:
                print(f"STALE {runbook}: {step['name']}: {step['detail'][-600:]}")
        print(result.stderr[-3000:], what_the_cluster_did(flab), sep="\n")
    assert result.returncode == 0 and not stale, sorted(stale)
    assert {r["runbook"] for r in reports if not r["unverifiable"]} == {
        "driver-rollout-failure", "gpu-failure", "node-loss", "fabric-link-failure", "silent-link-failure",
        "slurm-primary-failure", "remediation-controller-failure", "storage-master-failure", "storage-node-failure",
        "monitoring-outage",
    }  # fmt: skip
    assert all(r["manual"] and r["as_written"] == r["manual"] for r in reports), reports
    assert faults.active(cluster(flab)) == []

    # The same rollout runbook through the lab's namespaces, where the lab builds the drivers itself.
    reset_remediation(flab)
    cmd = [sys.executable, "-m", "ha_ops", "runbook", "verify", str(REPO / "runbooks" / "driver-rollout-failure.md"),
           "--lab", LAB_NAME, "--json"]  # fmt: skip
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    reports = json.loads(result.stdout) if result.stdout.strip().startswith("[") else []
    stale = {r["runbook"]: [s for s in r["steps"] if not s["ok"]] for r in reports if r["stale"]}
    assert result.returncode == 0 and not stale and len(reports) == 1, (stale, result.stderr[-3000:])
    assert faults.active(cluster(flab)) == []
