"""The installed `ha-ops` command, run as a user runs it (the console script in a subprocess, not CliRunner): every
command group answers --help, the commands that need no cluster work on the examples, and bad input exits 2 with
one line naming the field, never a traceback. No root and no lab: part of `make check`."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
HA_OPS = shutil.which("ha-ops", path=str(Path(sys.executable).parent)) or "ha-ops"
GROUPS = ["spec", "lab", "agent", "health", "gpu", "controller", "audit", "storage", "monitoring", "chaos",
          "gameday", "runbook", "rollout", "power", "pki", "k8s", "wheelhouse", "plan"]  # fmt: skip


def ha_ops(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([HA_OPS, *args], capture_output=True, text=True, timeout=60, cwd=REPO)


def test_the_console_script_lists_every_command_group() -> None:
    result = ha_ops("--help")
    assert result.returncode == 0, result.stderr
    listed = {line.split()[1] for line in result.stdout.splitlines() if line.startswith("│ ") and len(line.split()) > 1}
    assert listed >= {*GROUPS, "inventory"}, listed
    version = ha_ops("--version")
    assert version.returncode == 0 and version.stdout.startswith("ha-ops ")


@pytest.mark.parametrize("group", GROUPS)
def test_each_group_answers_help(group: str) -> None:
    result = ha_ops(group, "--help")
    assert result.returncode == 0, result.stderr
    assert "Usage: ha-ops " + group in result.stdout


def test_dash_h_is_help_and_the_help_offers_shell_completion() -> None:
    root = ha_ops("-h")
    assert root.returncode == 0, root.stderr
    assert (
        "Usage: ha-ops" in root.stdout and "--install-completion" in root.stdout and "--show-completion" in root.stdout
    )
    check = ha_ops("health", "check", "-h")
    assert check.returncode == 0, check.stderr
    assert "Usage: ha-ops health check" in check.stdout and "--json" in check.stdout


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_every_example_spec_validates_and_shows_its_layout(example: str) -> None:
    valid = ha_ops("spec", "validate", str(EXAMPLES / example))
    assert valid.returncode == 0, valid.stderr
    shown = ha_ops("spec", "show", str(EXAMPLES / example), "--json")
    assert shown.returncode == 0, shown.stderr
    layout = json.loads(shown.stdout)
    assert layout["spec"]["name"] and layout["layout"]["hosts"], sorted(layout)


def test_a_bad_spec_exits_2_naming_the_field_without_a_traceback(tmp_path: Path) -> None:
    spec = yaml.safe_load((EXAMPLES / "lab.yaml").read_text())
    spec["fabric"]["spines"] = 0
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(spec))
    result = ha_ops("spec", "validate", str(path))
    assert result.returncode == 2
    assert "fabric.spines" in result.stderr and "Traceback" not in result.stderr
    missing = ha_ops("spec", "validate", str(tmp_path / "missing.yaml"))
    assert missing.returncode == 2 and "Traceback" not in missing.stderr


def test_the_inventory_and_alert_rules_render_from_the_spec() -> None:
    inventory = ha_ops("inventory", "--spec", str(EXAMPLES / "lab.yaml"))
    assert inventory.returncode == 0, inventory.stderr
    hosts = yaml.safe_load(inventory.stdout)["all"]["hosts"]
    assert {"ctl1", "ctl2", "gpu1", "gpu4"} <= set(hosts)
    rules = ha_ops("monitoring", "rules")
    assert rules.returncode == 0, rules.stderr
    assert "alert: HaOpsGpuNodeUnhealthy" in rules.stdout


def test_a_rollout_plan_for_the_production_example_changes_nothing_and_covers_every_gpu_node() -> None:
    result = ha_ops("rollout", "plan", "driver", "--to", "580.65.06", "--spec", str(EXAMPLES / "production.yaml"),
                    "--json")  # fmt: skip
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["waves"], plan
    bad = ha_ops("rollout", "plan", "driver", "--to", "580.65.06", "--spec", str(EXAMPLES / "production.yaml"),
                 "--max-unavailable", "0")  # fmt: skip
    assert bad.returncode == 2 and "max-unavailable" in bad.stderr and "Traceback" not in bad.stderr
