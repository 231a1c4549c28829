"""Heartbeats scaled to the fleet (issue 43: 25,000 nodes at 10 s are 2,500 reports a second, more than one
controller process serves): the controller asks its agents for at most `heartbeats.max_per_s` a second in all, in
its answer to each report; the windows that count on hearing every live agent grow with the heartbeat; an agent
adopts what it is told (never faster than its own), and a change still goes out at once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from ha_ops.health.agent import told_heartbeat
from ha_ops.health.config import MAX_HEARTBEAT_S
from ha_ops.remediation.config import ControllerConfig
from ha_ops.remediation.heartbeats import Heartbeats, fleet_size, heartbeat_s


def config(nodes: int, **fields: Any) -> ControllerConfig:
    pools = {"gpu": {"nodes": [f"gpu{i:05d}" for i in range(nodes)], "spares": ["spare1"]}}
    return ControllerConfig.model_validate({"id": "c", "state_dir": "/tmp/hb", "insecure": True, "pools": pools,
                                            **fields})  # fmt: skip


@pytest.mark.parametrize(("nodes", "beat"), [(8, 10.0), (1_500, 10.0), (4_999, 10.0), (10_000, 20.0),
                                             (25_000, 50.0), (10_000_000, MAX_HEARTBEAT_S)])  # fmt: skip
def test_the_heartbeat_grows_past_max_per_s_times_min_s_nodes(nodes: int, beat: float) -> None:
    assert heartbeat_s(nodes, Heartbeats()) == beat
    assert heartbeat_s(25_000, Heartbeats(max_per_s=2_500)) == 10.0  # a controller host that serves more


def test_small_fleets_keep_their_windows_and_large_ones_get_windows_for_their_heartbeat() -> None:
    small = config(1_500)
    assert (small.agent_heartbeat_s, small.blind_after_s, small.agent_silence_s) == (10.0, 15.0, 30.0)
    large = config(25_000 - 1)  # (and the spare: 25,000)
    assert fleet_size(large.pools) == 25_000
    assert (large.agent_heartbeat_s, large.blind_after_s, large.agent_silence_s) == (50.0, 75.0, 150.0)
    assert config(25_000 - 1, blind_after_s=100, agent_silence_s=300).blind_after_s == 100  # set: kept


@pytest.mark.parametrize("field", ["blind_after_s", "agent_silence_s"])
def test_a_window_set_shorter_than_the_fleets_heartbeat_is_refused_naming_it(field: str) -> None:
    with pytest.raises(ValidationError) as refused:
        config(24_999, **{field: 40})
    assert f"{field} (40) must be at least {75 if field == 'blind_after_s' else 150}: " in str(refused.value)
    assert "heartbeat is 50 s for 25000 nodes" in str(refused.value)
    config(1_500, **{field: 20 if field == "blind_after_s" else 40})  # fine for a small fleet


def test_an_agent_adopts_the_heartbeat_it_is_told_never_faster_than_its_own() -> None:
    assert told_heartbeat({"heartbeat_s": 50.0, "accepted": True}, 10.0) == 50.0
    assert told_heartbeat({"heartbeat_s": 2}, 10.0) == 10.0  # never faster than its own
    assert told_heartbeat({"heartbeat_s": 1e9}, 10.0) == MAX_HEARTBEAT_S
    for answer in ({}, None, {"heartbeat_s": "50"}, {"heartbeat_s": True}, {"heartbeat_s": float("nan")}, [50]):
        assert told_heartbeat(answer, 10.0) == 10.0, answer  # an older controller, or garbage: its own


def test_the_leaders_answer_to_a_report_names_the_heartbeat(tmp_path: Path) -> None:
    from tests.unit.test_remediation_controller import Clock, Rig, report

    rig = Rig(tmp_path, "ctl1", Clock())
    rig.c.lease_step()
    answer = rig.c.handle_report(report())
    assert answer["heartbeat_s"] == rig.c.config.agent_heartbeat_s == 10.0


def test_the_node_states_are_read_five_times_a_heartbeat_and_the_fence_keeps_its_pace() -> None:
    assert config(1_500).node_states_poll_s == 2.0  # node_poll_s
    large = config(24_999)
    assert (large.node_states_poll_s, large.node_poll_s) == (10.0, 2.0)  # (the Slurm fence pings at node_poll_s)
