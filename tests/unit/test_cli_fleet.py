"""`ha-ops fleet history` (issue 22): the controller's reliability history read from the shared state, one node or
all, as a table or JSON; bad input exits 2 naming the field."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ha_ops.cli.main import app
from ha_ops.remediation import history
from ha_ops.remediation.model import ControllerState, NodePhase, NodeRecord, Rung
from ha_ops.remediation.store import state_text
from tests.unit.cli_helpers import run_main

DAY = history.DAY_S


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    """A state whose gpu1 is a lemon held for replacement, gpu2 had one incident, gpu3 none."""
    now = time.time()
    state = ControllerState(history_since=now - 60 * DAY)
    lemon = NodeRecord(name="gpu1", pool="gpu", phase=NodePhase.AWAITING_REPAIR, rung=Rung.REPLACE, episode=3,
                       reason="lemon: 3 incidents in 30 days (xid-memory, thermal, lost)")  # fmt: skip
    for n, (cause, days_ago) in enumerate([("xid-memory", 20), ("thermal", 10), ("lost", 1)]):
        lemon.incidents.append(history.Incident(cause=cause, at=now - days_ago * DAY, episode=n + 1,
                                                actions=["drain", "reset_gpu", "resume"], outcome="returned",
                                                reason=f"fault {n}"))  # fmt: skip
    lemon.incidents[-1].outcome = "held for replacement (lemon)"
    once = NodeRecord(name="gpu2", pool="gpu", episode=1, tier="standard")
    once.incidents.append(history.Incident(cause="ecc", at=now - 5 * DAY, episode=1, outcome="returned"))
    state.nodes = {r.name: r for r in (lemon, once, NodeRecord(name="gpu3", pool="gpu"))}
    (tmp_path / "state.json").write_text(state_text(state))
    return tmp_path


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, ["fleet", "history", *args], catch_exceptions=False)


def test_history_as_json_names_each_nodes_incidents_mtbi_tier_and_lemon_status(state_dir: Path) -> None:
    done = invoke("--state-dir", str(state_dir), "--json")
    assert done.exit_code == 0, done.output
    data = json.loads(done.output)
    gpu1, gpu2, gpu3 = (data["nodes"][n] for n in ("gpu1", "gpu2", "gpu3"))
    assert [i["cause"] for i in gpu1["incidents"]] == ["xid-memory", "thermal", "lost"]
    assert gpu1["incidents"][0]["actions"] == ["drain", "reset_gpu", "resume"]
    assert gpu1["lemon"]["held"] and gpu1["lemon"]["reason"].startswith("lemon: 3 incidents in 30 days")
    assert gpu1["tier"] == "suspect" and gpu2["tier"] == "standard" and gpu3["tier"] == "reliable"
    assert gpu1["mtbi_s"] == pytest.approx(20 * DAY, rel=1e-3)  # 60 days observed, 3 incidents
    assert gpu2["mtbi_s"] == pytest.approx(60 * DAY, rel=1e-3) and gpu3["mtbi_s"] is None
    assert gpu2["published_tier"] == "standard" and gpu3["published_tier"] is None
    assert data["pools"]["gpu"]["incidents"] == 4
    assert data["pools"]["gpu"]["mtbi_s"] == pytest.approx(180 * DAY / 4, rel=1e-3)


def test_history_of_one_node_as_a_table_says_why_it_is_held(state_dir: Path) -> None:
    done = invoke("gpu1", "--state-dir", str(state_dir))
    assert done.exit_code == 0, done.output
    said = "gpu1: held for replacement: lemon: 3 incidents in 30 days (xid-memory, thermal, lost)"
    assert said in done.output, done.output
    assert "gpu1: incidents" in done.output and "xid-memory" in done.output and "(lemon)" in done.output
    assert "gpu2" not in done.output and "pools" not in done.output


def test_the_whole_fleet_as_a_table(state_dir: Path) -> None:
    done = invoke("--state-dir", str(state_dir))
    assert done.exit_code == 0, done.output
    assert all(n in done.output for n in ("gpu1", "gpu2", "gpu3", "pools"))


@pytest.mark.parametrize(
    ("node", "said"),
    [("GPU_1;rm", "NODE: 'GPU_1;rm' is not a node name"), ("gpu9", "NODE: no node 'gpu9' in the controller's state")],
)
def test_bad_input_exits_2_naming_the_field(
    state_dir: Path, node: str, said: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_main(monkeypatch, "fleet", "history", node, "--state-dir", str(state_dir)) == 2
    assert said in capsys.readouterr().err


def test_a_standby_is_named_and_the_leader_to_ask(monkeypatch: pytest.MonkeyPatch) -> None:
    from ha_ops.cli import fleet

    monkeypatch.setattr(fleet, "call", lambda url, files=None: {"id": "ctl2", "leader_name": "ctl1"})
    code = run_main(monkeypatch, "fleet", "history", "--url", "http://ctl2:8800")
    assert code == 4


def test_from_a_controllers_api(state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ha_ops.cli import fleet

    described = {"id": "ctl1", "state": json.loads((state_dir / "state.json").read_text())}
    monkeypatch.setattr(fleet, "call", lambda url, files=None: described)
    done = invoke("gpu2", "--url", "http://ctl1:8800", "--json")
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["nodes"]["gpu2"]["incidents"][0]["cause"] == "ecc"
