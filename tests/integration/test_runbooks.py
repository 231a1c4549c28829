"""Runbooks verified in the lab: every claim and manual command holds, and a stale step is named."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ha_ops.lab.cluster import Lab
from tests.labkit import REPO

pytestmark = [pytest.mark.lab, pytest.mark.usefixtures("clean_lab")]

RUNBOOK = REPO / "runbooks" / "gpu-failure.md"


def verify(lab: Lab, path: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "ha_ops", "runbook", "verify", str(path), "--lab", lab.spec.name, "--json"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def test_the_gpu_failure_runbook_is_up_to_date(lab: Lab) -> None:
    result = verify(lab, RUNBOOK)
    assert result.returncode == 0, result.stdout + result.stderr
    [report] = json.loads(result.stdout)
    assert report["stale"] == 0
    assert [s["kind"] for s in report["steps"]] == ["check"] * 4 + ["manual"] * 2


def test_a_stale_claim_and_a_stale_command_are_named(lab: Lab, tmp_path: Path) -> None:
    text = RUNBOOK.read_text()
    text = text.replace("experiment: ../chaos/", f"experiment: {REPO}/chaos/")
    # A claim the system no longer meets (a healthy node is never "replaced" in 5 s) and a renamed command.
    text = text.replace("    equals: drained\n", "    equals: replaced\n")
    text = text.replace("{on:ctl1} audit verify", "{on:ctl1} audit check-chain")
    path = tmp_path / "stale.md"
    path.write_text(text)
    result = verify(lab, path)
    assert result.returncode == 1
    [report] = json.loads(result.stdout)
    stale = [s["name"] for s in report["steps"] if not s["ok"]]
    assert stale == ["Slurm no longer schedules onto the node (drained) within 5 s", "check the audit log is intact"]
