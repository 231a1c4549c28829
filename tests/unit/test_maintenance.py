"""Maintenance windows (issue 22, rollouts and remediation coordinated): a rollout announces its batch; the controller
records those nodes' reports but remediates nothing on them, counts them out of service for the safety limits,
audits each window, closes it on request or when it expires, and answers over its API (operators only)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ha_ops.remediation import safety
from tests.unit.test_remediation_controller import Rig, report
from tests.unit.test_remediation_server import make_controller, report_body, serving


@pytest.fixture
def rig(tmp_path: Path) -> Rig:
    rig = Rig(tmp_path, spares=(), min_healthy_fraction=0.5)  # no spare to stand in: the minimum is what counts
    rig.c.lease_step()
    return rig


def test_a_node_in_a_window_is_not_remediated_but_counted_out_of_service(rig: Rig) -> None:
    assert safety.summary(rig.c.state, rig.config.safety)["pools"] == {"p": {"size": 4, "in_service": 4, "minimum": 2}}
    answer = rig.c.start_maintenance(["n1", "n2"], "driver rollout r1: canary", 600, by="operator ops")
    assert answer["notes"] == ["maintenance window on n1, n2 for 600 s: driver rollout r1: canary"]
    got = rig.c.handle_report(report("n1"))  # the GPUs gone while the driver changes: expected, not a fault
    assert not got["accepted"] and "maintenance window" in got["ignored"] and got["intents"] == []
    assert rig.state().nodes["n1"].last_report is not None  # recorded, for status and history
    summary = safety.summary(rig.c.state, rig.config.safety)
    assert summary["pools"]["p"]["in_service"] == 2
    # A real fault elsewhere would leave 1 of 4 in service, under the minimum of 2: refused, as for any outage.
    refused = rig.c.handle_report(report("n3"))
    assert refused["intents"] == [] and "below min_healthy_fraction" in refused["ignored"]
    entries = [e for e in rig.audit() if e["what"].startswith("maintenance")]
    assert [(e["what"], e["node"]) for e in entries] == [("maintenance_start", "n1"), ("maintenance_start", "n2")]
    assert "by operator ops" in entries[0]["why"] and entries[0]["before"] == "none"


def test_after_the_window_the_node_is_remediated_as_usual(rig: Rig) -> None:
    rig.c.start_maintenance(["n1"], "rollout", 600)
    rig.c.start_maintenance(["n1"], "rollout: validating", 600)  # extended by the next step: audited once
    assert rig.c.end_maintenance(["n1", "n4"])["notes"] == ["maintenance window ended on n1"]
    assert rig.c.handle_report(report("n1", seq=2))["intents"][0] == "drain n1"
    assert [e["what"] for e in rig.audit() if e["node"] == "n1"][:2] == ["maintenance_start", "maintenance_end"]


def test_a_window_expires_on_the_tick_and_is_audited(rig: Rig) -> None:
    rig.c.start_maintenance(["n2"], "rollout", 5)
    rig.step(seconds=6)
    assert rig.state().nodes["n2"].maintenance is None
    last = [e for e in rig.audit() if e["node"] == "n2"][-1]
    assert last["what"] == "maintenance_end" and last["why"] == "expired"


def test_no_window_on_a_node_ha_ops_is_repairing_or_an_unknown_one(rig: Rig) -> None:
    rig.c.handle_report(report("n1"))
    with pytest.raises(ValueError, match="n1 is cordoned by ha-ops"):
        rig.c.start_maintenance(["n2", "n1"], "rollout", 60)
    with pytest.raises(ValueError, match="unknown node 'n9'"):
        rig.c.start_maintenance(["n9"], "rollout", 60)
    assert rig.state().nodes["n2"].maintenance is None  # all or nothing


def call(api: Any, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    status, answer, _ = api.call(path, body)
    return status, answer


def test_the_api_opens_and_ends_windows_and_refuses_bad_ones(tmp_path: Path) -> None:
    from tests.unit.test_remediation_server import Clock

    controller = make_controller(tmp_path / "shared", "ctl1", Clock())
    controller.lease_step()
    with serving(controller) as api:
        status, answer = call(api, "/v1/maintenance", {"nodes": ["n1"], "reason": "rollout r1", "ttl_s": 600})
        assert status == 200 and answer["accepted"], answer
        status, answer = call(api, "/v1/reports", report_body())
        assert status == 200 and "maintenance window" in answer["ignored"]
        _, described, _ = api.call("/v1/state")
        assert described["state"]["nodes"]["n1"]["maintenance"]["reason"] == "rollout r1"
        assert described["safety"]["breaker_open"] is False and "in_service" in described["safety"]["pools"]["p"]
        for body, words in [
            ({"nodes": [], "reason": "x"}, "nodes"),
            ({"nodes": ["n1"], "reason": "x", "ttl_s": -1}, "ttl_s"),
            ({"nodes": ["n1;rm -rf /"], "reason": "x"}, "nodes"),
            ({"nodes": ["n9"], "reason": "x"}, "unknown node 'n9'"),
        ]:
            status, answer = call(api, "/v1/maintenance", body)
            assert status == 400 and words in answer["error"], answer
        status, answer = call(api, "/v1/maintenance/end", {"nodes": ["n1"]})
        assert status == 200 and answer["notes"] == ["maintenance window ended on n1"]


def test_a_spare_in_a_window_does_not_stand_in(tmp_path: Path) -> None:
    rig = Rig(tmp_path)  # spare s1; no minimum
    rig.c.lease_step()
    rig.c.start_maintenance(["s1"], "driver rollout r1: canary", 600)
    assert rig.c.handle_report(report("n1"))["intents"][:1] == ["drain n1"]
    rig.step(ticks=8)
    assert ("spare_in", "s1") not in rig.executor.calls  # it is being upgraded, drained: not a replacement


def test_an_operator_opens_and_ends_a_window_with_the_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    # What a person runs for a node a driver rollout left for them (its window lasts a week), once it is right.
    from tests.unit.cli_helpers import run_main
    from tests.unit.test_remediation_server import Clock

    def answer(*args: str) -> Any:  # (the controller's answer, printed as JSON)
        assert run_main(monkeypatch, "controller", "maintenance", *args, "--url", api.base) == 0
        return json.loads(capsys.readouterr().out)

    controller = make_controller(tmp_path / "shared", "ctl1", Clock())
    controller.lease_step()
    with serving(controller) as api:
        opened = answer("start", "n1", "n2", "--reason", "reseating GPU 3", "--ttl-s", "600")
        assert opened["notes"] == ["maintenance window on n1, n2 for 600 s: reseating GPU 3"]
        assert controller.state is not None and controller.state.nodes["n1"].maintenance is not None
        ended = answer("end", "n1")
        assert ended["notes"] == ["maintenance window ended on n1"]
        assert controller.state.nodes["n1"].maintenance is None and controller.state.nodes["n2"].maintenance
        assert run_main(monkeypatch, "controller", "maintenance", "end", "n1;reboot", "--url", api.base) == 2
        assert "n1;reboot" in capsys.readouterr().err
        # A refusal by the controller (an unknown node) is an error naming it, not a traceback.
        assert run_main(monkeypatch, "controller", "maintenance", "start", "n9", "--reason", "x", "--url",
                        api.base) != 0  # fmt: skip
        err = capsys.readouterr().err
        assert "unknown node 'n9'" in err and "Traceback" not in err
