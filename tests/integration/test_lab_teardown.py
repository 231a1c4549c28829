"""`lab down` removes everything, also from a half-built lab and without a state file."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from ha_ops.lab.paths import LabPaths
from tests.labkit import REPO, leftovers, make_lab

pytestmark = pytest.mark.lab

LAB_NAME = "ttear"  # the lab this module builds: the suite checks nothing of it is left (conftest)


def test_down_after_up_was_killed_half_way() -> None:
    make_lab(LAB_NAME).down()
    script = "import sys; sys.path.insert(0, sys.argv[1]);from tests.labkit import make_lab; make_lab(sys.argv[2]).up()"
    proc = subprocess.Popen([sys.executable, "-c", script, str(REPO), LAB_NAME])
    state = LabPaths.for_lab(LAB_NAME).state_file
    # Kill it while it is starting daemons: after the state exists and some services are recorded.
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (not state.exists() or "zebra" not in state.read_text()):
        time.sleep(0.05)
    proc.kill()
    proc.wait(10)
    assert leftovers(LAB_NAME), "the killed up should have left something to clean"
    make_lab(LAB_NAME).down()
    assert leftovers(LAB_NAME) == []


def test_down_without_state_sweeps_by_name() -> None:
    lab = make_lab(LAB_NAME)
    lab.up()
    lab.paths.state_file.unlink()
    start = time.monotonic()
    lab.down()
    assert time.monotonic() - start < 10
    assert leftovers(LAB_NAME) == []
