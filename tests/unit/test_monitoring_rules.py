"""The ha-ops alert rules (ha_ops.monitoring.rules): the file the monitoring role ships is exactly what
`ha-ops monitoring rules` renders, every cluster alert exists, and the lab keeps its own group. Where promtool is
installed, it checks the file and runs the rule unit tests beside it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from ha_ops.lab import monitoring as lab_monitoring
from ha_ops.monitoring.rules import CLUSTER_GROUP, LAB_GROUP, render_rules, rules_yaml
from tests.unit.cli_helpers import run_main

FILES = Path(__file__).resolve().parents[2] / "roles" / "monitoring" / "files"
SHIPPED = FILES / "ha-ops-rules.yml"
RULE_TESTS = FILES / "ha-ops-rules.test.yml"

CLUSTER_ALERTS = {
    "HaOpsGpuUnhealthy": "critical",
    "HaOpsNodeDown": "critical",
    "HaOpsSlurmControllerDown": "warning",
    "HaOpsSlurmNoController": "critical",
    "HaOpsRemediationControllerDown": "warning",
    "HaOpsNoRemediationLeader": "critical",
    "HaOpsFabricLinkDown": "warning",
    "HaOpsFabricBondDegraded": "warning",
}
LAB_ALERTS = [
    "HaOpsScrapeTargetDown", "HaOpsGpuNodeUnhealthy", "HaOpsStorageMasterDown", "HaOpsStorageUnderReplicated",
    "HaOpsStorageMissingChunks", "HaOpsRemediationBreakerOpen", "HaOpsNodeNeedsReplacement", "HaOpsGpuNodeDegraded",
]  # fmt: skip


def group(name: str) -> dict:
    return next(g for g in render_rules()["groups"] if g["name"] == name)


def test_the_role_ships_exactly_the_rendered_rules() -> None:
    text = SHIPPED.read_text()
    assert text == rules_yaml(), "regenerate: ha-ops monitoring rules --out roles/monitoring/files/ha-ops-rules.yml"
    assert yaml.safe_load(text) == render_rules()


def test_every_cluster_alert_exists_with_its_severity_and_a_hold_time() -> None:
    rules = {r["alert"]: r for r in group(CLUSTER_GROUP)["rules"]}
    assert set(rules) == set(CLUSTER_ALERTS)
    for name, severity in CLUSTER_ALERTS.items():
        assert rules[name]["labels"]["severity"] == severity, name
        assert rules[name]["for"] != "0s", f"{name}: a production alert rides out a lost scrape"
        assert rules[name]["annotations"]["summary"], name
    assert rules["HaOpsNodeDown"]["expr"] == 'up{job="ha-ops-agent"} == 0'
    assert rules["HaOpsRemediationControllerDown"]["expr"] == 'up{job="ha-ops-controller"} == 0'
    assert "absent(ha_ops_controller_leader)" in rules["HaOpsNoRemediationLeader"]["expr"]
    assert 'state="unhealthy"' in rules["HaOpsGpuUnhealthy"]["expr"]
    assert "ha_ops_slurm_controller_up" in rules["HaOpsSlurmNoController"]["expr"]


def test_the_lab_keeps_only_its_own_group_unchanged() -> None:
    lab = lab_monitoring.render_rules()
    assert [g["name"] for g in lab["groups"]] == [LAB_GROUP]
    assert [r["alert"] for r in lab["groups"][0]["rules"]] == LAB_ALERTS
    assert {r["for"] for r in lab["groups"][0]["rules"]} == {"0s"}
    assert lab["groups"][0] == group(LAB_GROUP)


def test_the_fabric_devices_can_be_chosen() -> None:
    rules = render_rules([CLUSTER_GROUP], fabric_devices="eth[12]")
    link = next(r for r in rules["groups"][0]["rules"] if r["alert"] == "HaOpsFabricLinkDown")
    assert link["expr"] == 'node_network_up{device=~"eth[12]"} == 0'
    with pytest.raises(ValueError, match="unknown rule group"):
        render_rules(["nope"])


def test_cli_renders_the_rules(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_main(monkeypatch, "monitoring", "rules") == 0
    assert capsys.readouterr().out == SHIPPED.read_text()


def test_cli_writes_a_file_and_picks_groups(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    out = tmp_path / "rules.yml"
    assert run_main(monkeypatch, "monitoring", "rules", "--group", CLUSTER_GROUP, "--out", str(out)) == 0
    assert [g["name"] for g in yaml.safe_load(out.read_text())["groups"]] == [CLUSTER_GROUP]
    assert run_main(monkeypatch, "monitoring", "rules", "--group", "nope") == 2


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian prometheus) is not installed")
def test_promtool_accepts_the_rules_and_their_unit_tests_pass() -> None:
    for args in (["check", "rules", SHIPPED.name], ["test", "rules", RULE_TESTS.name]):
        done = subprocess.run(["promtool", *args], cwd=FILES, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
