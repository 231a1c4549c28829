"""The ha-ops alert rules (ha_ops.monitoring.rules): the file the monitoring role ships is exactly what
`ha-ops monitoring rules` renders, every cluster alert exists, the lab keeps its own group, and every alert says what
it means and links the runbook for its failure. Where promtool is installed, it checks the file (also with another
runbook base) and runs the rule unit tests beside it."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from ha_ops.lab import monitoring as lab_monitoring
from ha_ops.monitoring.rules import (
    CLUSTER_GROUP,
    LAB_GROUP,
    RUNBOOK_BASE,
    RUNBOOKS,
    alert_names,
    render_rules,
    rules_yaml,
    runbook_url,
)
from ha_ops.remediation.server import AlertmanagerAlert
from ha_ops.runbooks.verify import load_runbook
from tests.unit.cli_helpers import run_main

REPO = Path(__file__).resolve().parents[2]
FILES = REPO / "roles" / "monitoring" / "files"
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
    "HaOpsRemediationBlocked", "HaOpsAuditLogNotIntact",
]  # fmt: skip


def group(name: str) -> dict:
    return next(g for g in render_rules()["groups"] if g["name"] == name)


def every_rule(rules: dict | None = None) -> list[dict]:
    return [r for g in (rules or render_rules())["groups"] for r in g["rules"]]


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


def test_the_blocked_alert_names_the_document_and_waits_for_nobody_leading() -> None:
    rule = next(r for r in group(LAB_GROUP)["rules"] if r["alert"] == "HaOpsRemediationBlocked")
    assert rule["expr"].startswith("ha_ops_controller_blocked == 1 unless on () (sum(ha_ops_controller_leader) > 0)")
    assert "{{ $labels.document }}" in rule["annotations"]["description"]
    assert RUNBOOKS["HaOpsRemediationBlocked"] == "remediation-controller-failure.md"


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


def test_every_alert_says_what_it_means_and_links_its_runbook() -> None:
    rules = every_rule()
    assert {r["alert"] for r in rules} == set(RUNBOOKS) == alert_names()
    for rule in rules:
        name, annotations = rule["alert"], rule["annotations"]
        assert set(annotations) == {"summary", "description", "runbook_url"}, name
        assert len(annotations["description"]) > len(annotations["summary"]), f"{name}: a description says more"
        assert annotations["description"].count("{{") == annotations["description"].count("}}"), name
        url = annotations["runbook_url"]
        assert url == f"{RUNBOOK_BASE}{RUNBOOKS[name]}" == f"runbooks/{RUNBOOKS[name]}", name
        runbook = REPO / url
        assert runbook.is_file(), f"{name}: {url} is not a file of runbooks/"
        assert load_runbook(runbook)[0].id == runbook.stem, f"{name}: {url} is not a runbook"


def test_every_alert_fits_the_controllers_webhook() -> None:
    """Alertmanager posts every alert, annotations and all, to the remediation controllers' webhook, which refuses
    the whole notification when one annotation is over its bound: each stays under it with every templated value
    as long as a host name and port may be, and a long runbook base."""
    long = "x" * 260
    for rule in every_rule(render_rules(runbook_base="https://" + "w" * 200 + "/runbooks/")):
        annotations = {k: re.sub(r"\{\{[^}]*\}\}", long, v) for k, v in rule["annotations"].items()}
        alert = {"status": "firing", "labels": {"alertname": rule["alert"]}, "annotations": annotations}
        assert AlertmanagerAlert.model_validate(alert).annotations == annotations, rule["alert"]


def test_the_runbook_base_can_be_chosen() -> None:
    base = "https://runbooks.example.org/ha-ops/runbooks"
    for given in (base, base + "/"):
        rules = every_rule(render_rules(runbook_base=given))
        assert {r["annotations"]["runbook_url"] for r in rules} == {f"{base}/{f}" for f in RUNBOOKS.values()}
    assert runbook_url("HaOpsGpuUnhealthy") == "runbooks/gpu-failure.md"
    assert runbook_url("HaOpsNodeDown", "") == "node-loss.md"
    # Only the links change.
    moved = every_rule(render_rules(runbook_base=base))
    for rule, before in zip(moved, every_rule(), strict=True):
        assert rule["annotations"].pop("runbook_url") != before["annotations"].pop("runbook_url")
        assert rule == before


def test_cli_takes_a_runbook_base(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    out = tmp_path / "rules.yml"
    base = "https://wiki.example.org/ha-ops/"
    assert run_main(monkeypatch, "monitoring", "rules", "--runbook-base", base, "--out", str(out)) == 0
    assert out.read_text() == rules_yaml(runbook_base=base)
    assert {r["annotations"]["runbook_url"] for r in every_rule(yaml.safe_load(out.read_text()))} == {
        base + f for f in RUNBOOKS.values()
    }


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian prometheus) is not installed")
def test_promtool_accepts_the_rules_and_their_unit_tests_pass() -> None:
    for args in (["check", "rules", SHIPPED.name], ["test", "rules", RULE_TESTS.name]):
        done = subprocess.run(["promtool", *args], cwd=FILES, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian prometheus) is not installed")
def test_promtool_accepts_the_rules_with_another_runbook_base(tmp_path: Path) -> None:
    rendered = tmp_path / "rules.yml"
    rendered.write_text(rules_yaml(runbook_base="https://wiki.example.org/ha-ops/runbooks/"))
    done = subprocess.run(["promtool", "check", "rules", str(rendered)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(RUNBOOKS)} rules found" in done.stdout, done.stdout
