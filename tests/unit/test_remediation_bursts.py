"""Bursts of application XIDs across nodes (remediation/bursts.py and its hooks in the policy and the controller):
one job's fault is one finding and no drains; anything else is acted on as before. Pure, injected times."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ha_ops.health.report import AgentReport, ReportFinding
from ha_ops.remediation import policy
from ha_ops.remediation.bursts import BurstTracker, application_xids, only_application, pick_job
from ha_ops.remediation.config import Bursts, ControllerConfig, PoolConfig, Safety
from ha_ops.remediation.model import MAX_BURSTS, BurstRecord, ControllerState, NodePhase
from ha_ops.schedulers.base import SchedulerJob
from tests.unit.test_remediation_controller import Rig

NODES = [f"n{i:02d}" for i in range(50)]
T0 = 10_000.0


def make_config(**bursts: Any) -> ControllerConfig:
    return ControllerConfig(
        id="c1",
        state_dir=Path("unused"),
        pools={"p": PoolConfig(nodes=NODES, spares=["s1"])},
        safety=Safety(breaker_max_nodes=100, breaker_max_fraction=1.0, min_healthy_fraction=0.0),
        bursts=Bursts(**bursts),
    )


def finding(check: str, severity: str, action: str, xid: int, gpu: int) -> ReportFinding:
    return ReportFinding(check=check, severity=severity, action=action, message=f"XID {xid}", gpu=gpu, xid=xid)


def report(node: str, kind: str = "info", xid: int = 13, seq: int = 1, gpu: int = 3) -> AgentReport:
    """What an agent sends: `info` (one application XID), `escalated` (repeats), `fatal` (XID 79 beside them),
    `healthy`."""
    findings: list[ReportFinding] = []
    state, action, reason = "healthy", "none", "healthy"
    if kind == "info":
        findings.append(finding("xid", "info", "none", xid, gpu))
        reason = f"GPU{gpu} xid: XID {xid} x1"
    elif kind in ("escalated", "fatal"):
        findings.append(finding("xid_repeated", "critical", "drain", xid, gpu))
        state, action, reason = "unhealthy", "drain", f"GPU{gpu} xid_repeated: XID {xid} x3"
        if kind == "fatal":
            findings.append(finding("xid", "critical", "reboot_node", 79, 0))
            action, reason = "reboot_node", "GPU0 xid: XID 79"
    return AgentReport(
        node=node,
        seq=seq,
        agent_id=f"a-{node}",
        sent_at=0.0,
        state=state,
        action=action,
        reason=reason,
        findings=findings,
    )


class Sim:
    def __init__(self, config: ControllerConfig | None = None) -> None:
        self.config = config or make_config()
        self.state = ControllerState()
        self.now = T0
        self.seq: dict[str, int] = {}
        self.drains: list[str] = []
        policy.init_state(self.state, self.config, self.now)

    def report(self, node: str, kind: str = "info", xid: int = 13) -> policy.Outcome:
        self.seq[node] = self.seq.get(node, 0) + 1
        out = policy.on_report(self.state, report(node, kind, xid, self.seq[node]), self.config, self.now, 1)
        self.drains += [i.node for i in out.intents if i.kind == "drain"]
        return out

    def tick(self, seconds: float = 0.0) -> policy.Outcome:
        self.now += seconds
        out = policy.on_tick(self.state, {}, self.config, self.now, 1)
        self.drains += [i.node for i in out.intents if i.kind == "drain"]
        return out


def job_crash(sim: Sim, nodes: list[str], spread_s: float = 5.0) -> None:
    """Each node reports its first XID 13, then (0.5 s later) its escalated repeats; onsets over `spread_s`."""
    start = sim.now
    timeline = []
    for i, node in enumerate(nodes):
        at = start + spread_s * i / max(1, len(nodes) - 1)
        timeline += [(at, node, "info"), (at + 0.5, node, "escalated")]
    for at, node, kind in sorted(timeline):
        sim.now = at
        sim.report(node, kind)


# --- pure pieces ------------------------------------------------------------------------------------------------
def test_application_findings() -> None:
    assert application_xids(report("n00", "info").findings) == [13]
    assert application_xids(report("n00", "fatal").findings) == [13]
    assert application_xids(report("n00", "healthy").findings) == []
    assert only_application(report("n00", "escalated").findings)
    assert not only_application(report("n00", "fatal").findings)  # XID 79 beside it: never spared
    assert not only_application(report("n00", "info").findings)  # nothing critical


def test_the_window_counts_onsets_of_distinct_nodes() -> None:
    tracker = BurstTracker()

    def see(node: str, at: float, xids: tuple[int, ...] = (13,)) -> Any:
        return tracker.observe(node, xids, at, min_nodes=3, window_s=10, hold_s=60, max_events=100)

    assert see("a", 0) is None and see("a", 1) is None and see("a", 2) is None  # one node's heartbeats: one onset
    assert see("b", 5) is None
    assert see("c", 11) is None  # "a" is out of the window by now
    see("b", 11.5, ())  # "b" has none any more...
    assert see("b", 12) is None  # ...and again: a new onset (but still only "b" and "c")
    burst = see("d", 13, (31,))
    assert burst is not None and burst.nodes == {"b", "c", "d"}
    assert burst.message() == "XIDs 13, 31 on 3 nodes within 2 s: one job's fault"
    assert see("e", 20) is None and tracker.burst is burst and "e" in burst.nodes  # joins while it lasts
    assert burst.message().startswith("XIDs 13, 31 on 4 nodes within 9 s")
    assert tracker.member("c", 79, 60) and not tracker.member("c", 81, 60)  # 60 s after its last report: over


def test_the_window_is_bounded() -> None:
    tracker = BurstTracker()
    for i in range(1000):
        tracker.observe(f"n{i}", (13,), 0.0, min_nodes=5000, window_s=10, hold_s=60, max_events=64)
    assert len(tracker.window) <= 64 and len(tracker.onset_at) <= 64


def test_pick_job_names_the_job_on_most_of_the_nodes() -> None:
    jobs = [
        SchedulerJob("1", "RUNNING", ("n00", "x9"), "small"),
        SchedulerJob("2", "COMPLETING", ("n00", "n01", "n02"), "train"),
        SchedulerJob("3", "RUNNING", ("n01", "n02"), ""),
    ]
    assert pick_job(["n00", "n01", "n02", "n03"], jobs) == "job 2 train"
    assert pick_job(["n01", "n02"], jobs[2:]) == "job 3"
    assert pick_job(["n07"], jobs) is None


# --- the policy -------------------------------------------------------------------------------------------------
def test_a_job_crash_on_50_nodes_is_one_finding_and_no_drain() -> None:
    sim = Sim()
    job_crash(sim, NODES)
    for _ in range(100):  # 20 s of ticks: nothing held is released
        sim.tick(0.2)
    assert sim.drains == [] and sim.state.intents == []
    [burst] = sim.state.bursts
    assert burst.message == "XID 13 on 50 nodes within 5 s: one job's fault"
    assert (burst.nodes, burst.xids, burst.spared, len(burst.sample)) == (50, [13], 50, 16)
    assert all(sim.state.nodes[n].phase == NodePhase.SUSPECT for n in NODES)
    assert "spared: XID 13 on" in sim.state.nodes["n00"].reason
    assert sim.state.breaker.open is False


def test_the_burst_is_noted_once() -> None:
    sim = Sim()
    notes: list[str] = []
    for i, node in enumerate(NODES):
        sim.now = T0 + i * 0.1
        out = sim.report(node)
        notes += out.notes
        assert (out.burst is not None) == (i == 7)  # the 8th node (min_nodes) makes it
    assert [n for n in notes if n.startswith("burst:")] == [
        "burst: XID 13 on 8 nodes within 1 s: one job's fault; its nodes are not taken out of service for "
        "application XIDs"
    ]


def test_a_non_application_fault_during_a_burst_is_acted_on() -> None:
    sim = Sim()
    job_crash(sim, NODES)
    sim.now += 1
    out = sim.report("n05", "fatal")
    assert (out.intents[0].kind, out.intents[0].node) == ("drain", "n05")
    assert sim.state.nodes["n05"].phase == NodePhase.CORDONED


def test_an_escalation_on_one_node_waits_for_a_burst_then_drains() -> None:
    sim = Sim()
    out = sim.report("n01", "escalated")
    assert out.intents == [] and out.notes == ["n01: application XIDs only; waiting 10 s for a burst before acting"]
    assert sim.report("n01", "escalated").notes == []  # (noted once)
    sim.tick(9.9)
    assert sim.drains == []
    sim.tick(0.2)
    assert sim.drains == ["n01"]
    assert sim.state.nodes["n01"].reason == "GPU3 xid_repeated: XID 13 x3"


def test_a_held_node_that_recovers_is_not_drained() -> None:
    sim = Sim()
    sim.report("n01", "escalated")
    sim.now += 5
    sim.report("n01", "healthy")
    sim.tick(10)
    assert sim.drains == []


def test_escalations_held_while_the_burst_forms_are_spared_when_it_does() -> None:
    sim = Sim()
    for i, node in enumerate(NODES[:8]):
        sim.now = T0 + i
        sim.report(node, "escalated")  # each escalated at once: held, until the 8th makes the burst
    sim.tick(30)
    assert sim.drains == [] and len(sim.state.bursts) == 1


def test_too_few_nodes_is_no_burst_and_the_escalations_are_acted_on() -> None:
    sim = Sim()
    job_crash(sim, NODES[:7])
    sim.tick(11)
    assert sim.state.bursts == [] and sorted(sim.drains) == NODES[:7]


def test_after_the_burst_an_escalation_is_acted_on_again() -> None:
    sim = Sim()
    job_crash(sim, NODES[:10])
    sim.now += sim.config.bursts.hold_s + 1  # no application XID reported for hold_s: the burst is over
    sim.report("n02", "escalated")
    sim.tick(11)
    assert sim.drains == ["n02"]


def test_disabled_bursts_drain_at_once_as_before() -> None:
    sim = Sim(make_config(enabled=False))
    job_crash(sim, NODES[:10])
    assert sorted(sim.drains) == NODES[:10] and sim.state.bursts == []


def test_a_new_leader_first_learns_which_nodes_already_report_them() -> None:
    sim = Sim()
    sim.state.leading_since = T0  # every node's heartbeat would look like an onset
    for i, node in enumerate(NODES):
        sim.now = T0 + i * 0.1
        sim.report(node)
    assert sim.state.bursts == []
    sim.now = T0 + 40  # heartbeats after the learning time: still no onsets
    for node in NODES:
        sim.report(node)
    assert sim.state.bursts == []


def test_the_state_keeps_the_latest_bursts_only() -> None:
    sim = Sim(make_config(min_nodes=2, window_s=1, hold_s=1))
    for _ in range(MAX_BURSTS + 5):
        for node in ("n00", "n01"):
            sim.now += 0.1
            sim.report(node)
        for node in ("n00", "n01"):
            sim.report(node, "healthy")
        sim.now += 5
    assert len(sim.state.bursts) == MAX_BURSTS
    assert len({b.id for b in sim.state.bursts}) == MAX_BURSTS


def test_name_burst_job_once() -> None:
    sim = Sim()
    job_crash(sim, NODES[:8])
    [record] = sim.state.bursts
    jobs = [SchedulerJob("77", "RUNNING", tuple(NODES[:8]), "llm")]
    assert policy.name_burst_job(sim.state, record.id, jobs) == (
        "burst: XID 13 on 8 nodes within 5 s: one job's fault (job 77 llm)"
    )
    assert sim.state.bursts[0].job == "job 77 llm"
    assert policy.name_burst_job(sim.state, record.id, jobs) is None  # named already
    assert policy.name_burst_job(sim.state, "burst-0-0", jobs) is None  # not the burst under way


def test_old_state_and_config_without_bursts_still_load() -> None:
    state = ControllerState.model_validate({"version": 1, "nodes": {}})
    assert state.bursts == [] and state.burst_tracker.burst is None
    assert "_burst_tracker" not in state.model_dump() and "bursts" in state.model_dump()
    config = ControllerConfig.model_validate({"id": "c", "state_dir": "/x", "pools": {"p": {"nodes": ["a"]}}})
    assert config.bursts == Bursts() and (Bursts().min_nodes, Bursts().window_s) == (8, 10.0)
    with pytest.raises(ValueError):
        Bursts(min_nodes=1)
    BurstRecord(id="b", started_at=0, last_at=0, nodes=1, message="m")


# --- the controller: the job named once per burst ---------------------------------------------------------------
def test_the_controller_names_the_burst_job_asking_the_scheduler_once(tmp_path: Path) -> None:
    nodes = tuple(f"n{i}" for i in range(1, 9))
    rig = Rig(tmp_path, nodes=nodes)
    rig.c.lease_step()
    rig.step(1.0, ticks=40)  # past the new leader's learning time (report_fresh_s)
    asked = []
    real_jobs = rig.executor.scheduler.jobs

    def jobs() -> Any:
        asked.append(rig.clock.now)
        return real_jobs()

    rig.executor.scheduler.jobs = jobs  # type: ignore[method-assign]
    rig.executor.scheduler.running = {n: ["4242"] for n in nodes[:6]} | {"n8": ["9"]}
    for node in nodes:
        rig.step(0.5)
        rig.c.handle_report(report(node, "info"))
        rig.c.handle_report(report(node, "escalated", seq=2))
    assert len(asked) == 1
    [burst] = rig.state().bursts
    assert burst.message == "XID 13 on 8 nodes within 4 s: one job's fault (job 4242)"
    assert rig.executor.calls == [] and rig.state().intents == []
    assert rig.c.describe()["state"]["bursts"][0]["job"] == "job 4242"
