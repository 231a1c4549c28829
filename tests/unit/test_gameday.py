"""Game-day plans, reports and schedules (no lab)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from ha_ops.chaos.gameday import FaultResult
from ha_ops.chaos.plan import load_plan
from ha_ops.chaos.report import report_html, report_json, report_junit
from ha_ops.errors import SpecError

PLAN = Path(__file__).resolve().parents[2] / "chaos" / "gamedays" / "gpu.yaml"
STANDARD = PLAN.parent / "standard.yaml"


def results() -> list[FaultResult]:
    ok = FaultResult("gpu", "passed", "", 100.0, 101.0, 101.2, 103.5, 110.0, "completed", False)
    ok.timeline = [(100.0, "started"), (101.0, "fault injected"), (101.2, "detected"), (103.5, "recovered")]
    bad = FaultResult("link", "failed", "not recovered within 40 s", 200.0, 200.5, 201.0, None, 240.0)
    return [ok, bad]


def test_the_shipped_plan_loads_with_experiments_relative_to_it() -> None:
    plan = load_plan(PLAN)
    assert plan.faults[0].experiment.exists()
    assert plan.faults[0].detect[0].negate is True


def test_a_plan_naming_a_missing_experiment_or_an_unknown_key_is_refused(tmp_path: Path) -> None:
    data = yaml.safe_load(PLAN.read_text())
    data["faults"][0]["experiment"] = "nope.yaml"
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError, match="does not exist"):
        load_plan(tmp_path / "p.yaml")
    data = yaml.safe_load(PLAN.read_text())
    data["blast_radius"] = 3
    (tmp_path / "q.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError) as info:
        load_plan(tmp_path / "q.yaml")
    assert any(p.startswith("blast_radius") for p in info.value.problems)


def test_reports_carry_the_measurements() -> None:
    plan = load_plan(PLAN)
    report = report_json(plan, results())
    assert report["passed"] is False
    first, second = report["faults"]
    assert first["time_to_detect_s"] == pytest.approx(0.2) and first["time_to_recover_s"] == pytest.approx(2.5)
    assert second["time_to_recover_s"] is None
    junit = report_junit(plan, results())
    assert 'tests="2"' in junit and 'failures="1"' in junit and "not recovered within 40 s" in junit
    page = report_html(plan, results())
    assert page.count("<svg") == 2 and "FAILED" in page and "<script" not in page


def test_a_systemd_schedule_runs_the_installed_ha_ops_with_the_inventory_a_time_limit_and_a_folder_per_run(
    tmp_path: Path,
) -> None:
    from ha_ops.chaos.schedule import Schedule, render_systemd

    inventory = tmp_path / "hosts.yml"
    files = render_systemd(Schedule(PLAN, "Mon 03:00", 1800, inventory), Path("/opt/ha-ops/bin/ha-ops"))
    assert "OnCalendar=Mon 03:00" in files["ha-ops-gameday.timer"]
    service = files["ha-ops-gameday.service"]
    (exec_line,) = [line for line in service.splitlines() if line.startswith("ExecStart=")]
    assert exec_line.startswith("ExecStart=/bin/sh -c 'exec /opt/ha-ops/bin/ha-ops gameday run ")
    assert f"--inventory {inventory.resolve()}" in exec_line and str(PLAN.resolve()) in exec_line
    # One reports root: each run makes its own folder there (chaos/report.py write_run).
    assert exec_line.endswith(" --report-dir /var/lib/ha-ops/gamedays'")
    assert "TimeoutStartSec=1800" in service
    with pytest.raises(SpecError, match="not an absolute path"):
        render_systemd(Schedule(PLAN, "daily", inventory=inventory), Path("ha-ops"))


def test_a_cronjob_schedule_pins_its_image_and_mounts_the_inventory_from_a_secret(tmp_path: Path) -> None:
    from pathlib import PurePosixPath

    from ha_ops.chaos.schedule import Schedule, render_cronjob

    image = "registry.example/ha-ops@sha256:" + "ab" * 32
    wanted = Schedule(PLAN, "0 3 * * 1", 900, tmp_path / "hosts.yml")
    cron = yaml.safe_load(render_cronjob(wanted, image, "ha-ops-cluster", "reports", PurePosixPath("/opt/p.yaml")))
    assert cron["kind"] == "CronJob" and cron["spec"]["schedule"] == "0 3 * * 1"
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    job = cron["spec"]["jobTemplate"]["spec"]
    assert job["activeDeadlineSeconds"] == 900 and job["backoffLimit"] == 0
    pod = job["template"]["spec"]
    [container] = pod["containers"]
    assert container["image"] == image
    command = container["command"][2]
    assert "ha-ops gameday run /opt/p.yaml --inventory /etc/ha-ops/cluster/hosts.yml" in command
    assert command.endswith(" --report-dir /reports")
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["cluster"]["secret"]["secretName"] == "ha-ops-cluster"
    assert volumes["reports"]["persistentVolumeClaim"]["claimName"] == "reports"
    assert {"name": "cluster", "mountPath": "/etc/ha-ops/cluster", "readOnly": True} in container["volumeMounts"]
    with pytest.raises(SpecError, match="not pinned by digest"):
        render_cronjob(wanted, "registry.example/ha-ops:latest", "s", "r", PurePosixPath("/opt/p.yaml"))


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"every": "Mon 03:00\nOnCalendar=minutely"}, "--every: control characters are not allowed"),
        ({"every": "0 3 * * 1\n  - name: evil"}, "--every: control characters are not allowed"),
        ({"every": "  "}, "--every: give when to run"),
        ({"plan": Path("plan\nExecStartPre=/bin/rm.yaml")}, "PLAN: control characters are not allowed"),
        ({"timeout_s": 0}, "--timeout-s: must be positive"),
    ],
)
def test_a_schedule_that_would_inject_lines_into_a_unit_or_manifest_is_refused(
    tmp_path: Path, change: dict, words: str
) -> None:
    from ha_ops.chaos.schedule import Schedule

    fields = {"plan": PLAN, "every": "Mon 03:00", "timeout_s": 900, "inventory": tmp_path / "hosts.yml"} | change
    with pytest.raises(SpecError, match=re.escape(words)):
        Schedule(**fields)


def test_a_production_spec_or_inventory_needs_the_confirmation_flag(tmp_path: Path) -> None:
    from ha_ops.chaos.runner import guard_production
    from ha_ops.cluster.inventory import Inventory, InventoryHost
    from ha_ops.cluster.lab import LabCluster
    from ha_ops.cluster.ssh import SshCluster
    from ha_ops.lab.cluster import Lab
    from ha_ops.lab.paths import LabPaths
    from ha_ops.spec import load_spec

    spec = load_spec(PLAN.parents[2] / "examples" / "production.yaml")
    lab = LabCluster(Lab(spec, LabPaths.for_lab(spec.name, Path("/nonexistent"))))
    with pytest.raises(SpecError, match="--confirm-production"):
        guard_production(lab, confirmed=False)
    guard_production(lab, confirmed=True)
    # A spec that says nothing, but an inventory that says production: the same confirmation.
    plain = load_spec(PLAN.parents[2] / "examples" / "lab.yaml")
    hosts = {"gpu1": InventoryHost(name="gpu1", address="10.0.0.1", production=True)}
    cluster = SshCluster(plain, Inventory(source=tmp_path / "hosts.yml", hosts=hosts), journal_dir=tmp_path)
    with pytest.raises(SpecError, match="--confirm-production"):
        guard_production(cluster, confirmed=False)
    test = LabCluster(Lab(spec.model_copy(update={"production": False}), LabPaths.for_lab(spec.name, Path("/x"))))
    guard_production(test, confirmed=False)


def test_only_selects_faults_and_refuses_unknown_names() -> None:
    from ha_ops.chaos.plan import select

    plan = load_plan(STANDARD)
    assert [f.name for f in select(plan, ["Slurm primary kill"]).faults] == ["Slurm primary kill"]
    with pytest.raises(SpecError, match="no fault named 'nope'"):
        select(plan, ["nope"])


def test_the_standard_plan_covers_every_named_failure() -> None:
    plan = load_plan(STANDARD)
    assert [f.name for f in plan.faults] == [
        "GPU XID 79", "node loss", "leaf-spine link down", "silent link drop", "Slurm primary kill",
        "Slurm primary freeze", "remediation controller leader kill", "storage chunkserver loss", "monitoring outage",
    ]  # fmt: skip
    assert plan.workload is not None and plan.workload.jobs > 0


def test_conditions_name_unknown_probes_and_compare_changes() -> None:
    from ha_ops.chaos.plan import Condition

    with pytest.raises(ValidationError, match="not_a_probe"):
        Condition(probe="not_a_probe")
    changed = Condition(probe="remediation_leader", changed=True)
    assert "changed" in changed.describe()
