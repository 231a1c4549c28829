"""The remediation policy (ha_ops.remediation.policy) as a pure function of reports, alerts, Slurm's view and time:
taking a node out, the drain -> repair ladder -> return path, flapping, spares, alerts and compaction."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ha_ops.health.report import AgentReport, ReportFinding
from ha_ops.remediation import policy
from ha_ops.remediation.config import ControllerConfig, Ladder, PoolConfig, Safety
from ha_ops.remediation.model import ControllerState, Intent, NodePhase, Rung
from ha_ops.remediation.policy import NodeView, Outcome

TOKEN = 7
NODES = [f"n{i}" for i in range(1, 7)]


def make_config(spares: tuple[str, ...] = ("s1",), **safety: Any) -> ControllerConfig:
    # Generous safety limits: the gate is tested in test_remediation_safety.py.
    limits: dict[str, Any] = {"breaker_max_nodes": 10, "breaker_max_fraction": 1.0, "min_healthy_fraction": 0.0}
    limits.update(safety)
    return ControllerConfig(
        id="c1",
        state_dir=Path("unused"),
        pools={"p": PoolConfig(nodes=NODES, spares=list(spares))},
        safety=Safety(**limits),
        ladder=Ladder(validate_timeout_s=5, probation_s=10, max_flaps=2, flap_window_s=100, drain_timeout_s=3),
        report_fresh_s=30,
    )


def report(
    node: str = "n1",
    state: str = "unhealthy",
    action: str = "reset_gpu",
    seq: int = 1,
    agent: str = "agent-a",
    gpus: tuple[int, ...] = (2, 5),
) -> AgentReport:
    findings = []
    if state == "unhealthy":
        findings = [
            ReportFinding(check="xid", severity="critical", action=action, message="XID 79", gpu=g) for g in gpus
        ]
        findings.append(ReportFinding(check="temp", severity="warning", action="watch", message="hot", gpu=7))
    return AgentReport(
        node=node,
        seq=seq,
        agent_id=agent,
        sent_at=0.0,
        state=state,
        action=action if state == "unhealthy" else "none",
        reason=f"GPU2 xid: XID 79 ({state})",
        findings=findings,
    )


def alert(node: str = "n1", name: str = "HaOpsGpuNodeUnhealthy", status: str = "firing") -> dict[str, Any]:
    return {"status": status, "labels": {"alertname": name, "node": node}, "annotations": {"summary": "GPU down"}}


def kinds(out: Outcome) -> list[tuple[str, str]]:
    return [(i.kind, i.node) for i in out.intents]


class Sim:
    """The policy plus a pretend executor: `finish` marks pending intents done as the controller would."""

    def __init__(self, config: ControllerConfig | None = None) -> None:
        self.config = config or make_config()
        self.state = ControllerState()
        self.now = 1000.0
        policy.init_state(self.state, self.config, self.now)
        # The leader has seen the whole fleet for a while (observers.py): silence counts from then.
        self.now -= 100
        self.tick({n: NodeView(state="idle", heard_at=self.now) for n in self.state.nodes})
        self.now += 100

    def node(self, name: str = "n1") -> Any:
        return self.state.nodes[name]

    def report(self, r: AgentReport) -> Outcome:
        return policy.on_report(self.state, r, self.config, self.now, TOKEN)

    def alert(self, a: dict[str, Any]) -> Outcome:
        return policy.on_alert(self.state, a, self.config, self.now, TOKEN)

    def tick(self, views: dict[str, NodeView] | None = None, whole: bool = True) -> Outcome:
        """One tick. A poll (`views` with states) is of the whole fleet: the nodes it does not name are idle and
        their agents heard just now, unless `whole` is False (then the views are all there is)."""
        views = dict(views or {})
        if whole and any(v.state for v in views.values()):
            polled_at = max(v.polled_at for v in views.values())
            for name in self.state.nodes:
                views.setdefault(name, NodeView(state="idle", heard_at=self.now, polled_at=polled_at))
        return policy.on_tick(self.state, views, self.config, self.now, TOKEN)

    def finish(self, validate: str = "pass", status: str = "done", nodes: tuple[str, ...] = ()) -> list[Intent]:
        done = [i for i in self.state.pending() if not nodes or i.node in nodes]
        for intent in done:
            intent.status = status  # type: ignore[assignment]
            intent.result = validate if intent.kind == "validate" else "ok"
        return done

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def take_out(self, r: AgentReport | None = None) -> Outcome:
        out = self.report(r or report())
        self.finish()
        return out

    def to_repair(self, r: AgentReport | None = None) -> Outcome:
        """Report, run drain/spare/requeue, tick into the ladder; returns the ladder's intents."""
        self.take_out(r)
        return self.tick()

    def through_return(self, r: AgentReport | None = None) -> None:
        """A full episode that ends with the node returned (on probation)."""
        self.to_repair(r)
        self.finish("pass")
        self.tick()  # -> resume
        self.finish()
        self.tick()  # -> returned
        assert self.node().phase == NodePhase.RETURNED


# --- taking a node out ------------------------------------------------------------------------------------------
def test_unhealthy_report_cordons_brings_in_a_spare_and_requeues() -> None:
    sim = Sim()
    out = sim.report(report())
    n1, s1 = sim.node("n1"), sim.node("s1")
    assert n1.phase == NodePhase.CORDONED
    assert n1.episode == 1 and n1.rung == Rung.RESET_GPU
    assert n1.reason.startswith("GPU2 xid")
    assert kinds(out) == [("drain", "n1"), ("spare_in", "s1"), ("requeue_jobs", "n1")]
    assert out.intents[1].args["replaces"] == "n1"
    assert all(i.token == TOKEN and i.status == "pending" for i in out.intents)
    assert [i.args["episode"] for i in out.intents] == [1, 0, 1]  # the spare's intent carries the spare's episode
    assert [i.id for i in sim.state.intents] == [i.id for i in out.intents]  # persisted in the state, in order
    assert len({i.id for i in out.intents}) == 3
    assert s1.in_main and s1.spare_for == "n1"
    assert sim.node("n1").last_report is not None and sim.node("n1").last_report.gpus == [2, 5]
    assert sim.state.breaker.cordons == [(sim.now, "n1")]


def test_a_second_identical_report_adds_nothing() -> None:
    sim = Sim()
    sim.report(report(seq=1))
    before = sim.state.model_dump()
    for seq in (1, 2):
        again = sim.report(report(seq=seq))
        assert again.intents == [] and not again.ignored
    assert len(sim.state.intents) == 3
    assert sim.state.breaker.cordons == before["breaker"]["cordons"]
    assert sim.node("n1").episode == 1


@pytest.mark.parametrize("state", ["degraded", "unknown"])
def test_degraded_or_unknown_only_marks_suspect(state: str) -> None:
    sim = Sim()
    out = sim.report(report(state=state))
    assert out.intents == []
    assert sim.node().phase == NodePhase.SUSPECT
    assert sim.state.intents == [] and sim.state.breaker.cordons == []
    out = sim.report(report(state="healthy", seq=2))
    assert out.intents == [] and sim.node().phase == NodePhase.HEALTHY


def test_stale_report_from_the_same_agent_is_ignored() -> None:
    sim = Sim()
    sim.report(report(state="healthy", seq=5))
    out = sim.report(report(state="unhealthy", seq=4))
    assert "stale" in out.ignored and out.intents == []
    assert sim.node().phase == NodePhase.HEALTHY
    assert sim.node().last_report is not None and sim.node().last_report.seq == 5
    # A restarted agent (new agent_id) starts its seq again: not stale.
    out = sim.report(report(state="unhealthy", seq=1, agent="agent-b"))
    assert not out.ignored and sim.node().phase == NodePhase.CORDONED


def test_unknown_node_is_ignored() -> None:
    sim = Sim()
    before = sim.state.model_dump()
    out = sim.report(report(node="nope"))
    assert "unknown node" in out.ignored and out.intents == []
    assert sim.state.model_dump() == before


# --- the path back ----------------------------------------------------------------------------------------------
def test_full_episode_drain_repair_validate_return_probation() -> None:
    sim = Sim()
    sim.report(report())
    assert sim.tick().intents == []  # drain still pending
    assert sim.node().phase == NodePhase.CORDONED
    sim.finish()
    out = sim.tick()
    n1 = sim.node()
    assert n1.phase == NodePhase.AWAITING_REPAIR and n1.rung == Rung.RESET_GPU
    assert kinds(out) == [("reset_gpu", "n1"), ("validate", "n1")]
    assert out.intents[0].args["gpus"] == [2, 5]  # the critical findings' GPUs, not the warning's
    assert out.intents[1].args["rung"] == "reset_gpu"
    assert sim.tick().intents == []  # validation pending, not timed out
    sim.finish("pass")
    out = sim.tick()
    assert kinds(out) == [("resume", "n1")]
    assert sim.tick().intents == []  # resume not yet done: not twice
    sim.finish()
    out = sim.tick()
    assert n1.phase == NodePhase.RETURNED and n1.returns == [sim.now]
    assert kinds(out) == [("spare_out", "s1")]  # the node it stood in for is back
    assert not sim.node("s1").in_main and sim.node("s1").spare_for is None
    sim.finish()
    sim.advance(9)
    sim.tick()
    assert n1.phase == NodePhase.RETURNED
    sim.advance(1)
    sim.tick()
    assert n1.phase == NodePhase.HEALTHY


def test_drained_waits_for_jobs_then_the_drain_timeout() -> None:
    sim = Sim()
    sim.take_out()
    busy = {"n1": NodeView(state="MIXED+DRAIN", jobs=("42",))}
    assert sim.tick(busy).intents == []
    assert sim.node().phase == NodePhase.DRAINING
    sim.advance(2.9)
    assert sim.tick(busy).intents == []
    assert sim.node().phase == NodePhase.DRAINING
    sim.advance(0.1)  # drain_timeout_s 3 passed: repair although the job is still there
    assert kinds(sim.tick(busy)) == [("reset_gpu", "n1"), ("validate", "n1")]


def test_drained_as_soon_as_jobs_are_gone() -> None:
    sim = Sim()
    sim.take_out()
    sim.tick({"n1": NodeView(jobs=("42",))})
    assert sim.node().phase == NodePhase.DRAINING
    sim.advance(1)
    assert kinds(sim.tick({"n2": NodeView(jobs=("43",))})) == [("reset_gpu", "n1"), ("validate", "n1")]


def test_requeue_must_finish_before_drained() -> None:
    sim = Sim()
    sim.report(report())
    drain = sim.state.node_intents("n1", "drain")[0]
    drain.status = "done"
    sim.tick()
    assert sim.node().phase == NodePhase.DRAINING  # requeue_jobs still pending
    sim.advance(10)
    assert sim.tick().intents == []
    assert sim.node().phase == NodePhase.DRAINING


def test_gpu_zero_when_no_critical_gpu_is_known() -> None:
    sim = Sim()
    out = sim.to_repair(report(gpus=()))
    assert out.intents[0].args["gpus"] == [0]


@pytest.mark.parametrize("how", ["fail", "failed", "timeout"])
def test_failed_or_late_validation_climbs_the_ladder(how: str) -> None:
    sim = Sim()
    sim.to_repair()
    if how == "fail":
        sim.finish("fail: xid again")
    elif how == "failed":
        sim.finish("ssh: connection refused", status="failed")
    else:
        sim.advance(5.01)  # validate_timeout_s 5, intents still pending
    out = sim.tick()
    assert sim.node().rung == Rung.REBOOT_NODE
    assert kinds(out) == [("reboot_node", "n1"), ("validate", "n1")]
    assert out.intents[1].args["rung"] == "reboot_node"
    assert any("climbing the ladder" in n for n in out.notes)
    sim.finish("fail: still broken")
    out = sim.tick()
    assert sim.node().rung == Rung.REPLACE
    assert sim.node().phase == NodePhase.AWAITING_REPAIR
    assert out.intents == [] and any("needs replacement" in n for n in out.notes)
    sim.advance(1000)
    assert sim.tick().intents == []  # held until a person says it is repaired
    assert sim.node().phase == NodePhase.AWAITING_REPAIR


def test_repaired_validates_at_the_reboot_rung_then_resumes() -> None:
    sim = Sim()
    out = sim.to_repair(report(action="replace"))
    assert out.intents == [] and sim.node().rung == Rung.REPLACE
    assert "not awaiting repair" in policy.repaired(sim.state, "n2", sim.now, TOKEN).ignored
    assert "unknown node" in policy.repaired(sim.state, "zz", sim.now, TOKEN).ignored
    sim.advance(50)
    out = policy.repaired(sim.state, "n1", sim.now, TOKEN)
    assert kinds(out) == [("validate", "n1")] and out.intents[0].args["rung"] == "reboot_node"
    assert sim.node().rung == Rung.REBOOT_NODE and sim.node().returns == []
    sim.finish("pass")
    assert kinds(sim.tick()) == [("resume", "n1")]
    sim.finish()
    sim.tick()
    assert sim.node().phase == NodePhase.RETURNED


@pytest.mark.parametrize(
    ("action", "rung", "first"),
    [("drain", Rung.RESET_GPU, "reset_gpu"), ("reset_gpu", Rung.RESET_GPU, "reset_gpu"),
     ("reboot_node", Rung.REBOOT_NODE, "reboot_node"), ("replace", Rung.REPLACE, None)],
)  # fmt: skip
def test_starting_rung_follows_the_reported_action(action: str, rung: Rung, first: str | None) -> None:
    sim = Sim()
    sim.take_out(report(action=action))
    assert sim.node().rung == rung
    out = sim.tick()
    assert sim.node().phase == NodePhase.AWAITING_REPAIR
    assert [i.kind for i in out.intents] == ([first, "validate"] if first else [])


# --- flapping ---------------------------------------------------------------------------------------------------
def test_fault_on_probation_starts_one_rung_higher_and_max_flaps_means_replace() -> None:
    sim = Sim()
    sim.through_return()
    assert sim.node().returns == [sim.now]
    sim.advance(1)  # on probation
    sim.report(report(seq=2))
    assert sim.node().phase == NodePhase.CORDONED and sim.node().rung == Rung.REBOOT_NODE
    assert sim.node().episode == 2
    sim.finish()
    assert [i.kind for i in sim.tick().intents] == ["reboot_node", "validate"]
    sim.finish("pass")
    sim.tick()
    sim.finish()
    sim.tick()
    assert sim.node().phase == NodePhase.RETURNED and len(sim.node().returns) == 2
    sim.advance(20)
    sim.tick()
    assert sim.node().phase == NodePhase.HEALTHY  # probation over, still within the flap window
    sim.report(report(seq=3))
    assert sim.node().rung == Rung.REPLACE  # max_flaps (2) returns within the flap window


def test_max_flaps_alone_means_replace() -> None:
    config = make_config()
    config = config.model_copy(update={"ladder": config.ladder.model_copy(update={"max_flaps": 1})})
    sim = Sim(config)
    sim.through_return()  # one return at the reset rung
    sim.advance(20)
    sim.tick()
    assert sim.node().phase == NodePhase.HEALTHY
    sim.report(report(seq=2))
    assert sim.node().rung == Rung.REPLACE  # not just one rung higher (reboot)


@pytest.mark.parametrize(
    ("returns_ago", "rung", "phase", "action", "expected"),
    [
        ((), None, NodePhase.HEALTHY, "reset_gpu", Rung.RESET_GPU),
        ((), Rung.RESET_GPU, NodePhase.HEALTHY, "reset_gpu", Rung.RESET_GPU),  # an old episode, no recent return
        ((5,), Rung.RESET_GPU, NodePhase.HEALTHY, "reset_gpu", Rung.REBOOT_NODE),
        ((5,), Rung.RESET_GPU, NodePhase.HEALTHY, "replace", Rung.REPLACE),  # never lower than asked
        ((), Rung.RESET_GPU, NodePhase.RETURNED, "drain", Rung.REBOOT_NODE),  # on probation
        ((5, 3), Rung.RESET_GPU, NodePhase.HEALTHY, "reset_gpu", Rung.REPLACE),  # max_flaps 2
        ((150, 120), Rung.REBOOT_NODE, NodePhase.HEALTHY, "reset_gpu", Rung.RESET_GPU),  # outside flap_window_s
    ],
)
def test_starting_rung(
    returns_ago: tuple[float, ...], rung: Rung | None, phase: NodePhase, action: str, expected: Rung
) -> None:
    sim = Sim()
    rec = sim.node()
    rec.returns, rec.rung, rec.phase = [sim.now - ago for ago in returns_ago], rung, phase
    assert policy.starting_rung(rec, action, sim.config, sim.now) == expected


def test_a_return_within_the_flap_window_climbs_after_probation() -> None:
    sim = Sim()
    sim.through_return()
    sim.advance(50)
    sim.tick()
    assert sim.node().phase == NodePhase.HEALTHY
    sim.report(report(seq=2))
    assert sim.node().rung == Rung.REBOOT_NODE


def test_returns_outside_the_flap_window_are_forgotten() -> None:
    sim = Sim()
    sim.through_return()
    sim.advance(101)
    sim.tick()
    sim.report(report(seq=2))
    assert sim.node().rung == Rung.RESET_GPU


# --- spares -----------------------------------------------------------------------------------------------------
def test_spare_stays_while_it_runs_jobs() -> None:
    sim2 = Sim()
    sim2.to_repair()
    sim2.finish("pass")
    sim2.tick()
    sim2.finish()
    out = sim2.tick({"s1": NodeView(jobs=("77",))})
    assert sim2.node().phase == NodePhase.RETURNED
    assert out.intents == [] and sim2.node("s1").in_main  # still running a job
    assert sim2.tick({"s1": NodeView(jobs=("77",))}).intents == []
    out = sim2.tick({"n1": NodeView(jobs=("78",))})
    assert kinds(out) == [("spare_out", "s1")]
    assert sim2.tick().intents == []  # not twice


def test_spare_not_released_while_its_node_is_out() -> None:
    sim = Sim()
    sim.to_repair()
    sim.finish("pass")
    for _ in range(3):
        assert not [i for i in sim.tick().intents if i.kind == "spare_out"]
    assert sim.node("s1").in_main


def test_no_free_spare_then_one_comes_in_when_freed() -> None:
    sim = Sim()
    sim.take_out(report("n1"))
    sim.tick()  # n1 repairing
    out = sim.report(report("n2"))
    assert kinds(out) == [("drain", "n2"), ("requeue_jobs", "n2")]  # s1 is busy standing in for n1
    assert sim.node("s1").spare_for == "n1"
    sim.finish("pass")
    sim.tick()  # n1 -> resume; n2 -> reset + validate
    sim.finish("fail: again")
    out = sim.tick()  # n1 returned: the spare leaves it and, free again, stands in for n2
    assert sim.node("n1").phase == NodePhase.RETURNED
    assert sim.node("n2").phase == NodePhase.AWAITING_REPAIR
    assert ("spare_out", "s1") in kinds(out) and ("spare_in", "s1") in kinds(out)
    assert sim.node("s1").in_main and sim.node("s1").spare_for == "n2"


def test_a_failing_spare_stands_in_for_nobody_and_another_comes_in() -> None:
    sim = Sim(make_config(spares=("s1", "s2")))
    sim.take_out(report("n1"))
    assert sim.node("s1").spare_for == "n1" and sim.node("s1").in_main
    out = sim.report(report("s1"))
    s1, s2, n1 = sim.node("s1"), sim.node("s2"), sim.node("n1")
    assert s1.phase == NodePhase.CORDONED and s1.spare_for is None
    assert ("spare_in", "s2") in kinds(out)
    assert s2.in_main and s2.spare_for == "n1"  # s2 stands in for the node s1 covered, not for the spare
    sim.finish()
    sim.tick()  # both repairing
    sim.finish("pass")
    sim.tick()  # both resume
    sim.finish()
    out = sim.tick()
    assert s1.phase == NodePhase.RETURNED and n1.phase == NodePhase.RETURNED
    assert sorted(kinds(out)) == [("spare_out", "s1"), ("spare_out", "s2")]
    assert not s1.in_main and not s2.in_main and s2.spare_for is None


def test_spare_covering_a_spare_is_released_when_the_node_returns() -> None:
    sim = Sim(make_config(spares=("s1", "s2")))
    sim.take_out(report("n1"))
    sim.take_out(report("s1"))
    sim.tick()  # both repairing
    sim.finish("pass", nodes=("n1",))
    sim.finish("fail: no", nodes=("s1",))
    sim.tick()  # n1 resumes, s1 climbs
    sim.finish(nodes=("n1",))
    out = sim.tick()  # n1 is back while s1 is still out: nobody needs s2 any more
    assert sim.node("n1").phase == NodePhase.RETURNED
    assert sim.node("s1").phase == NodePhase.AWAITING_REPAIR
    assert ("spare_out", "s2") in kinds(out)
    assert not sim.node("s2").in_main


def test_a_failing_spare_keeps_the_covered_node_covered_while_both_are_out() -> None:
    sim = Sim(make_config(spares=("s1", "s2")))
    sim.take_out(report("n1"))
    sim.take_out(report("s1"))
    sim.tick()  # both repairing
    sim.finish("pass", nodes=("s1",))
    sim.finish("fail: no", nodes=("n1",))
    sim.tick()  # s1 resumes, n1 climbs
    sim.finish(nodes=("s1",))
    out = sim.tick()  # s1 is back while n1 is still out: s1 leaves the partition, s2 keeps covering n1
    assert sim.node("s1").phase == NodePhase.RETURNED
    assert ("spare_out", "s1") in kinds(out) and ("spare_out", "s2") not in kinds(out)
    assert sim.node("s2").in_main and sim.node("s2").spare_for == "n1"


def test_an_idle_spare_failing_gets_no_stand_in() -> None:
    sim = Sim(make_config(spares=("s1", "s2")))
    out = sim.report(report("s1"))
    assert kinds(out) == [("drain", "s1"), ("requeue_jobs", "s1")]
    assert not sim.node("s2").in_main


# --- alerts -----------------------------------------------------------------------------------------------------
def test_node_unhealthy_alert_takes_the_node_out() -> None:
    sim = Sim()
    out = sim.alert(alert())
    assert kinds(out) == [("drain", "n1"), ("spare_in", "s1"), ("requeue_jobs", "n1")]
    assert sim.node().phase == NodePhase.CORDONED and sim.node().reason == "alert: GPU down"


def test_a_new_leader_waits_for_the_agents_before_acting_on_alerts() -> None:
    sim = Sim()
    sim.state.leading_since = sim.now - 29
    out = sim.alert(alert())
    assert out.intents == [] and "the leader is new" in out.ignored
    assert sim.node().phase == NodePhase.HEALTHY
    assert kinds(sim.report(report("n2")))[0] == ("drain", "n2")  # reports are acted on at once
    sim.advance(1)  # report_fresh_s 30 since it took over
    assert kinds(sim.alert(alert()))[0] == ("drain", "n1")


def test_alert_names_the_node_through_instance() -> None:
    sim = Sim()
    a = {"status": "firing", "labels": {"alertname": "HaOpsGpuNodeUnhealthy", "instance": "n3:9426"}}
    sim.alert(a)
    assert sim.node("n3").phase == NodePhase.CORDONED


@pytest.mark.parametrize("state", ["healthy", "degraded", "unknown"])
def test_fresh_report_outranks_the_alert(state: str) -> None:
    sim = Sim()
    sim.report(report(state=state))
    sim.advance(29)
    out = sim.alert(alert())
    assert out.intents == [] and "reported" in out.ignored
    assert not sim.node().phase.out_of_service
    sim.advance(1)  # report_fresh_s 30: no longer fresh
    assert kinds(sim.alert(alert()))[0] == ("drain", "n1")


def test_alert_after_a_fresh_unhealthy_report_does_not_cordon_twice() -> None:
    sim = Sim()
    sim.report(report())
    assert sim.alert(alert()).intents == []
    assert len(sim.state.intents) == 3


@pytest.mark.parametrize(
    "a",
    [alert(status="resolved"), alert(name="HaOpsAgentDown"), alert(name="HaOpsGpuHot"),
     alert(name="HaOpsGpuNodeUnhealthy", status="resolved")],
)  # fmt: skip
def test_other_or_resolved_alerts_never_cordon(a: dict[str, Any]) -> None:
    sim = Sim()
    out = sim.alert(a)
    assert out.intents == [] and sim.state.intents == []
    assert sim.node().phase in (NodePhase.HEALTHY, NodePhase.SUSPECT)
    if a["status"] == "firing":
        assert sim.node().phase == NodePhase.SUSPECT


def test_alert_for_an_unknown_node_is_ignored() -> None:
    sim = Sim()
    out = sim.alert(alert(node="gpu99"))
    assert "no known node" in out.ignored and sim.state.intents == []


# --- compaction -------------------------------------------------------------------------------------------------
def test_compact_keeps_pending_and_active_episodes() -> None:
    sim = Sim()
    sim.through_return()
    sim.finish()  # spare_out done
    sim.advance(20)
    sim.tick()
    assert sim.node().phase == NodePhase.HEALTHY
    finished_episode = {i.id for i in sim.state.intents}
    sim.report(report("n2"))  # active episode: drain done, requeue pending
    sim.state.node_intents("n2", "drain")[0].status = "done"
    pending_n3 = policy.on_report(sim.state, report("n3"), sim.config, sim.now, TOKEN).intents
    policy.compact(sim.state, keep_finished=0)
    left = {i.id for i in sim.state.intents}
    assert not left & finished_episode
    assert {i.id for i in sim.state.node_intents("n2")} <= left
    assert sim.state.node_intents("n2", "drain")[0].status == "done"  # finished, but its episode is active
    assert {i.id for i in pending_n3} <= left


def test_compact_keeps_the_latest_finished() -> None:
    sim = Sim()
    sim.through_return()
    sim.finish()
    sim.advance(20)
    sim.tick()
    ids = [i.id for i in sim.state.intents]
    policy.compact(sim.state, keep_finished=2)
    assert [i.id for i in sim.state.intents] == ids[-2:]
    policy.compact(sim.state)
    assert [i.id for i in sim.state.intents] == ids[-2:]


def test_storage_alerts_are_recorded_and_never_cordon() -> None:
    from ha_ops.remediation.config import ControllerConfig, PoolConfig
    from ha_ops.remediation.model import ControllerState

    config = ControllerConfig(id="c", state_dir=Path("/nonexistent"), pools={"p": PoolConfig(nodes=["n1", "n2"])})
    state = ControllerState()
    policy.init_state(state, config, 0.0)
    firing = {"status": "firing", "labels": {"alertname": "HaOpsStorageMasterDown"}}
    out = policy.on_alert(state, firing, config, 100.0, 1)
    assert not out.intents and state.storage_alerts == {"HaOpsStorageMasterDown": 100.0}
    assert all(r.phase.value == "healthy" for r in state.nodes.values())
    policy.on_alert(state, {**firing, "status": "resolved"}, config, 110.0, 1)
    assert state.storage_alerts == {}


# --- lost nodes (Slurm DOWN) ------------------------------------------------------------------------------------


def test_a_lost_node_is_marked_down_fenced_and_its_jobs_released_then_only_validated() -> None:
    sim = Sim()
    sim.tick({"n1": NodeView(state="idle")})
    out = sim.tick({"n1": NodeView(state="down*", jobs=("41", "42"))})
    # DOWN (Slurm ends its jobs at once), a spare, a power cycle as the fence, then the requeued jobs released.
    assert kinds(out) == [("drain", "n1"), ("spare_in", "s1"), ("reboot_node", "n1"), ("requeue_jobs", "n1")]
    assert out.intents[0].args["lost"] is True
    assert out.intents[3].args["release"] == ["41", "42"] and out.intents[3].args["fence"] == out.intents[2].id
    assert sim.node().phase == NodePhase.CORDONED and sim.node().rung == Rung.REBOOT_NODE
    assert "down*" in sim.node().reason
    sim.finish()
    ladder = sim.tick()
    assert kinds(ladder) == [("validate", "n1")]  # the fence was the reboot


def test_a_lost_nodes_jobs_that_slurm_requeued_before_the_read_are_released_too() -> None:
    """Slurm requeues a lost node's jobs in the moment it reports it down: the read that finds it down may find job
    43 pending already, no longer on the node; the read before saw it there, and it is released all the same."""
    sim = Sim()
    sim.tick({"n1": NodeView(state="idle")})
    out = sim.tick({"n1": NodeView(state="down*", jobs=("41",), jobs_before=("41", "43"))})
    requeue = next(i for i in out.intents if i.kind == "requeue_jobs")
    assert requeue.args["release"] == ["41", "43"]


def test_a_down_node_is_acted_on_once_not_on_every_poll() -> None:
    sim = Sim(make_config(breaker_max_nodes=1, breaker_max_fraction=0.1))
    sim.tick({"n2": NodeView(state="idle")})
    sim.take_out()  # n1 uses the breaker's only cordon
    first = sim.tick({"n2": NodeView(state="down")})
    assert all(i.node != "n2" for i in first.intents) and any("n2 not cordoned" in n for n in first.notes)
    again = sim.tick({"n2": NodeView(state="down")})
    assert all(i.node != "n2" for i in again.intents) and not any("n2" in n for n in again.notes)


def test_ticks_without_fresh_node_states_change_nothing() -> None:
    sim = Sim()
    sim.tick({"n1": NodeView(state="down")})
    assert sim.node().phase == NodePhase.CORDONED
    sim.finish()
    sim.tick({"n1": NodeView(jobs=())})  # jobs only: no state read this tick
    assert sim.node().slurm_state == "down"


@pytest.mark.parametrize("state", ["idle", "allocated", "mixed", "drained", "completing"])
def test_states_other_than_down_are_not_lost(state: str) -> None:
    sim = Sim()
    assert sim.tick({"n1": NodeView(state=state)}).intents == []
    assert sim.node().phase == NodePhase.HEALTHY


def test_not_responding_is_lost_only_once_the_agent_is_silent_too() -> None:
    sim = Sim()
    sim.report(report(state="healthy"))
    assert sim.tick({"n1": NodeView(state="idle*")}).intents == []  # the agent just reported: a missed ping
    sim.advance(sim.config.agent_silence_s + 1)
    out = sim.tick({"n1": NodeView(state="idle*")})
    assert ("drain", "n1") in kinds(out) and "agent is silent" in sim.node().reason


def test_a_new_leader_finds_a_node_lost_only_after_listening_for_the_silence_itself() -> None:
    # Seen in the lab: controllers restarted with a fresh state, the new leader had heard nothing from a node yet
    # (its agent's last report went to the controller now restarted) and took it out the moment Slurm said idle*.
    sim = Sim()
    sim.advance(100)
    sim.state.leading_since = sim.now
    sim.advance(1)
    assert sim.tick({"n1": NodeView(state="idle*")}).intents == []  # never heard, but only listening for 1 s
    assert not sim.node().lost
    sim.advance(sim.config.agent_silence_s)
    out = sim.tick({"n1": NodeView(state="idle*")})
    assert ("drain", "n1") in kinds(out) and "agent is silent" in sim.node().reason


@pytest.mark.parametrize("slurm_state", ["down", "down*", "idle*"])
def test_a_node_whose_agent_still_reports_through_the_other_controller_is_not_lost(slurm_state: str) -> None:
    # A Slurm primary cut off from the network finds every node not responding: Slurm alone never decides a loss.
    sim = Sim()
    sim.report(report(state="healthy"))
    sim.advance(sim.config.agent_silence_s + 1)  # this controller has not heard n1 for a while...
    heard = NodeView(state=slurm_state, heard_at=sim.now - 1)  # ...but the standby has, a second ago
    assert sim.tick({"n1": heard}).intents == []
    assert sim.node().phase == NodePhase.HEALTHY and not sim.node().lost
    out = sim.tick({"n1": NodeView(state=slurm_state, heard_at=sim.now - sim.config.agent_silence_s - 1)})
    assert ("drain", "n1") in kinds(out)  # silent to both now: lost


def test_a_drain_its_agent_made_is_adopted_into_the_ladder() -> None:
    sim = Sim()
    sim.advance(5)
    drained = NodeView(state="drained", reason="ha-ops: agent: GPU1 xid: XID 79", polled_at=sim.now, heard_at=sim.now)
    out = sim.tick({"n1": drained})
    assert kinds(out) == [("drain", "n1"), ("spare_in", "s1"), ("requeue_jobs", "n1")]
    assert sim.node().phase == NodePhase.CORDONED and "adopted the drain its agent made: GPU1 xid" in sim.node().reason
    sim.finish()
    ladder = sim.tick()
    assert kinds(ladder) == [("reset_gpu", "n1"), ("validate", "n1")]  # repaired and returned as usual
    assert ladder.intents[0].args["gpus"] == [1]  # the GPU the agent's reason names


@pytest.mark.parametrize(
    "reason",
    ["ha-ops: GPU1 xid: XID 79", "operator maintenance", ""],  # the controller's own drain; a person's
)
def test_other_drains_are_not_adopted(reason: str) -> None:
    sim = Sim()
    assert (
        sim.tick({"n1": NodeView(state="drained", reason=reason, polled_at=sim.now + 1, heard_at=sim.now)}).intents
        == []
    )
    assert sim.node().phase == NodePhase.HEALTHY


def test_a_poll_older_than_the_nodes_last_change_adopts_nothing() -> None:
    # The controller resumed n1 after the poll began: the poll's "drained" predates that resume.
    sim = Sim()
    sim.through_return()
    stale = NodeView(
        state="drained", reason="ha-ops: agent: GPU1 xid", polled_at=sim.node().since - 0.1, heard_at=sim.now
    )
    assert sim.tick({"n1": stale}).intents == []
    assert sim.node().phase == NodePhase.RETURNED


def test_a_report_of_an_earlier_agent_run_is_stale_by_when_it_was_sent() -> None:
    # Issue 44, finding 10: a report replayed from an earlier agent run (another agent_id, sent in 1970) drained a
    # returned node again. Across runs the seq cannot order reports; the time they were sent can, within the skew.
    sim = Sim()
    skew = sim.config.report_clock_skew_s
    sim.report(report(state="healthy", seq=9).model_copy(update={"sent_at": sim.now}))
    for sent_at, agent in ((0.0, "agent-old"), (sim.now - skew - 1, "agent-old"), (sim.now - skew - 1, "agent-a")):
        out = sim.report(report(state="unhealthy", seq=50, agent=agent).model_copy(update={"sent_at": sent_at}))
        assert "stale report sent" in out.ignored and out.intents == [], (sent_at, agent)
        assert sim.node().phase == NodePhase.HEALTHY
    # From the future (past the skew): refused, and it moves nothing a later genuine report is judged by.
    out = sim.report(report(state="unhealthy", agent="agent-x").model_copy(update={"sent_at": sim.now + skew + 1}))
    assert "in the future" in out.ignored and sim.node().phase == NodePhase.HEALTHY
    # Within the skew, and a restarted agent's first report sent now: taken.
    out = sim.report(report(state="healthy", seq=10).model_copy(update={"sent_at": sim.now - skew + 1}))
    assert not out.ignored
    out = sim.report(report(state="unhealthy", seq=1, agent="agent-new").model_copy(update={"sent_at": sim.now + 5}))
    assert not out.ignored and sim.node().phase == NodePhase.CORDONED
    assert sim.node().last_report is not None and sim.node().last_report.sent_at == sim.now + 5
