"""Fleet memory (ha_ops.remediation.history, issue 22): incidents recorded per episode, causes, MTBI, the lemon
rule held by the policy, reliability tiers, their publication by the controller through Slurm and Kubernetes, and the
fleet metrics."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from lightkube.resources.core_v1 import Node
from prometheus_client import generate_latest

from ha_ops.errors import TransportError
from ha_ops.remediation import history, policy
from ha_ops.remediation.config import ControllerConfig, Fleet, Lemon, PoolConfig
from ha_ops.remediation.history import DAY_S, Incident, cause_of, tier_of
from ha_ops.remediation.model import ControllerState, NodePhase, NodeRecord, Rung
from ha_ops.remediation.policy import NodeView
from ha_ops.remediation.store import parse_state, state_text
from ha_ops.schedulers.kubernetes import TIER_LABEL, KubernetesScheduler
from ha_ops.schedulers.slurm import Slurm
from ha_ops.util.proc import CommandResult
from tests.unit.test_remediation_controller import EPISODE, Rig, StubExecutor
from tests.unit.test_remediation_controller import report as controller_report
from tests.unit.test_remediation_policy import Sim, make_config, report

DAY = DAY_S


# --- causes -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("reason", "lost", "flap", "cause"),
    [
        ("GPU1 xid: XID 79", False, False, "xid-off-bus"),
        ("GPU3 xid: XID 95 x12 in 3.0 s (+1 more)", False, False, "xid-memory"),
        ("GPU0 xid: XID 74", False, False, "xid-nvlink"),
        ("GPU0 xid: XID 119", False, False, "xid-firmware"),
        ("GPU0 xid: application XID 13 x5 in 60 s", False, False, "xid-application"),
        ("GPU0 xid: XID 999", False, False, "xid-other"),
        ("adopted the drain its agent made: GPU3 xid: XID 48", False, False, "xid-memory"),
        ("GPU2 ecc_uncorrectable: 3 uncorrectable ECC error(s) since the last reset", False, False, "ecc"),
        ("GPU2 row_remap_failure: row remapping failed", False, False, "ecc"),
        ("GPU5 temperature: 97 C at or above the shutdown threshold 95 C", False, False, "thermal"),
        ("GPU0 gpu_lost: GPU is not answering (fallen off the bus)", False, False, "xid-off-bus"),
        ("lost: Slurm reports it down*, its agent is silent", True, False, "lost"),
        ("GPU1 xid: XID 79", False, True, "flapping"),
        ("alert: GPU down", False, False, "other"),
    ],
)
def test_causes_are_classified_from_the_reason_the_policy_has(reason: str, lost: bool, flap: bool, cause: str) -> None:
    assert cause_of(reason, lost, flap) == cause
    assert cause in history.CAUSES  # a closed set: the metric's labels


def test_every_xid_in_the_table_has_a_class() -> None:
    from ha_ops.gpu.xid import XID_TABLE

    assert all(history.xid_class(x) != "other" for x in XID_TABLE)


# --- the policy records incidents ---------------------------------------------------------------------------------
def episode(sim: Sim, seq: int) -> None:
    """One incident on n1 that ends with the node validated (returned, or held if a lemon); then a day passes."""
    sim.to_repair(report(seq=seq))
    sim.finish("pass")
    sim.tick()  # -> resume (or the lemon hold)
    sim.finish()
    sim.tick()  # -> returned
    sim.advance(DAY)
    sim.tick()  # probation over
    sim.report(report(state="healthy", seq=seq + 1))


def test_an_episode_is_one_incident_with_its_cause_steps_and_outcome_and_the_node_returns_as_before() -> None:
    sim = Sim()
    sim.to_repair()
    incident = sim.node().incidents[-1]
    assert (incident.cause, incident.at, incident.episode, incident.outcome) == ("xid-off-bus", 1000.0, 1, "")
    assert incident.actions == ["drain", "reset_gpu"]
    sim.finish("pass")
    out = sim.tick()
    assert [i.kind for i in out.intents] == ["resume"]  # one incident: returned exactly as before
    sim.finish()
    sim.tick()
    assert sim.node().phase == NodePhase.RETURNED
    assert incident.actions == ["drain", "reset_gpu", "resume"] and incident.outcome == "returned"
    assert incident.ended_at == sim.now


def test_a_climb_to_replace_closes_the_incident_held_for_replacement() -> None:
    sim = Sim()
    sim.to_repair()
    sim.finish("fail: still broken")
    sim.tick()  # -> reboot
    sim.finish("fail: still broken")
    sim.tick()  # -> replace
    incident = sim.node().incidents[-1]
    assert incident.actions == ["drain", "reset_gpu", "reboot_node", "replace"]
    assert incident.outcome == "held for replacement"


def test_a_lost_node_is_a_lost_incident_whose_fence_was_its_reboot() -> None:
    sim = Sim()
    sim.tick({"n1": NodeView(state="idle")})
    sim.tick({"n1": NodeView(state="down*")})
    sim.finish()
    sim.tick()  # -> validate (the fence was the reboot)
    sim.finish("pass")
    sim.tick()  # -> resume
    sim.finish()
    sim.tick()
    [incident] = sim.node().incidents
    assert (incident.cause, incident.actions, incident.outcome) == ("lost", ["drain", "fence", "resume"], "returned")


def test_a_fault_soon_after_a_return_is_flapping() -> None:
    sim = Sim()
    sim.through_return()
    sim.report(report(seq=5))
    assert [i.cause for i in sim.node().incidents] == ["xid-off-bus", "flapping"]


# --- lemons -----------------------------------------------------------------------------------------------------
def test_a_node_given_three_incidents_in_the_window_is_held_for_replacement_and_says_why() -> None:
    sim = Sim()
    episode(sim, 1)
    episode(sim, 3)
    assert [i.outcome for i in sim.node().incidents] == ["returned", "returned"]
    sim.to_repair(report(seq=5))
    sim.finish("pass")
    out = sim.tick()  # validated: a lemon is held instead of returned
    node = sim.node()
    assert out.intents == [] and not sim.state.node_intents("n1", "resume", "pending")
    assert node.phase == NodePhase.AWAITING_REPAIR and node.rung == Rung.REPLACE
    assert node.reason == "lemon: 3 incidents in 30 days (xid-off-bus, xid-off-bus, xid-off-bus)"
    assert any("lemon: 3 incidents" in n and "held for replacement" in n for n in out.notes)
    assert node.incidents[-1].outcome == "held for replacement (lemon)"
    assert node.incidents[-1].actions == ["drain", "reset_gpu", "replace"]
    assert history.is_held_lemon(node)
    for _ in range(3):  # it stays held
        sim.advance(100)
        assert sim.tick().intents == [] and sim.node().phase == NodePhase.AWAITING_REPAIR
    # What `fleet history` says about it.
    said = history.report(sim.state, sim.now, Fleet(), Lemon(), "n1")["nodes"]["n1"]
    assert said["lemon"]["held"] and said["lemon"]["reason"].startswith("lemon: 3 incidents in 30 days")
    assert said["tier"] == "suspect" and len(said["incidents"]) == 3

    # A person replaces the part: validated and returned; the counts start afresh, the history stays.
    sim.advance(10)
    policy.repaired(sim.state, "n1", sim.now, 7)
    sim.finish("pass")
    sim.tick()  # -> resume
    sim.finish()
    sim.tick()
    assert sim.node().phase == NodePhase.RETURNED
    assert sim.node().incidents[-1].outcome == "held for replacement (lemon); repaired and returned"
    sim.advance(DAY)
    sim.tick()
    episode(sim, 7)  # a fourth incident, the first since the repair: returned
    assert sim.node().incidents[-1].outcome == "returned" and len(sim.node().incidents) == 4


def test_incidents_outside_the_window_do_not_make_a_lemon() -> None:
    sim = Sim()
    for seq in (1, 3, 5):
        episode(sim, seq)
        sim.advance(14 * DAY)  # three incidents 15 days apart: two within any 30 days
    assert [i.outcome for i in sim.node().incidents] == ["returned"] * 3


def test_lemons_can_be_turned_off() -> None:
    config = make_config().model_copy(update={"lemon": Lemon(enabled=False)})
    sim = Sim(config)
    for seq in (1, 3, 5):
        episode(sim, seq)
    assert [i.outcome for i in sim.node().incidents] == ["returned"] * 3


def test_a_lemon_needs_room_for_its_incidents_in_the_history() -> None:
    with pytest.raises(ValueError, match="max_incidents_per_node"):
        ControllerConfig(id="c", state_dir=Path("x"), pools={"p": PoolConfig(nodes=["n1"])},
                         lemon=Lemon(incidents=5), fleet=Fleet(max_incidents_per_node=4))  # fmt: skip


# --- MTBI, tiers, bounds ---------------------------------------------------------------------------------------
def node_with(times: list[float], seen_since: float = 0.0, pool: str = "p", name: str = "n1") -> NodeRecord:
    rec = NodeRecord(name=name, pool=pool, seen_since=seen_since, episode=len(times))
    rec.incidents = [Incident(cause="xid-memory", at=t, episode=n + 1, outcome="returned") for n, t in enumerate(times)]
    return rec


def test_mtbi_is_the_observed_time_in_the_window_over_its_incidents() -> None:
    now = 100 * DAY
    # Known since the history began (day 40): observed 60 days, 3 incidents -> 20 days.
    rec = node_with([50 * DAY, 70 * DAY, 90 * DAY])
    assert history.node_mtbi(rec, now, 90 * DAY, since=40 * DAY) == pytest.approx(20 * DAY)
    # Known for longer than the window: the window (90 days), the incidents within it (2 of 3).
    old = node_with([5 * DAY, 70 * DAY, 90 * DAY])
    assert history.node_mtbi(old, now, 90 * DAY, since=1.0) == pytest.approx(45 * DAY)
    # A node that appeared later is observed from then; none without an incident.
    late = node_with([95 * DAY], seen_since=80 * DAY, name="n2")
    assert history.node_mtbi(late, now, 90 * DAY, since=1.0) == pytest.approx(20 * DAY)
    clean = node_with([], name="n3", pool="q")
    assert history.node_mtbi(clean, now, 90 * DAY, since=1.0) is None
    # A pool: its node-time over its incidents.
    pools = history.pool_mtbi([old, late, clean], now, 90 * DAY, since=1.0)
    assert pools["p"] == {"nodes": 2, "incidents": 3, "node_seconds": 110 * DAY, "mtbi_s": pytest.approx(110 * DAY / 3)}
    assert pools["q"]["mtbi_s"] is None and pools["q"]["node_seconds"] == 90 * DAY


def test_tiers_follow_the_recent_incidents() -> None:
    fleet, lemon, now = Fleet(), Lemon(), 100 * DAY
    assert tier_of(node_with([]), now, fleet, lemon) == "reliable"
    assert tier_of(node_with([10 * DAY]), now, fleet, lemon) == "reliable"  # older than 30 days
    assert tier_of(node_with([10 * DAY, 90 * DAY]), now, fleet, lemon) == "standard"
    assert tier_of(node_with([80 * DAY, 90 * DAY]), now, fleet, lemon) == "suspect"
    repaired = node_with([80 * DAY, 90 * DAY])
    repaired.repaired_at = 95 * DAY
    assert tier_of(repaired, now, fleet, lemon) == "reliable"  # a repaired node starts afresh
    clean = [node_with([], name=f"c{i}") for i in range(3)]
    assert history.tier_changes(clean, now, fleet, lemon) == []  # nothing to publish without incidents
    changed = node_with([90 * DAY])
    [(rec, tier, why)] = history.tier_changes([*clean, changed], now, fleet, lemon)
    assert (rec.name, tier, why) == ("n1", "standard", "1 incident(s) in 30 days")
    changed.tier = "standard"
    assert history.tier_changes([changed], now, fleet, lemon) == []
    assert history.tier_changes([changed], now + 30 * DAY, fleet, lemon)[0][1] == "reliable"  # back, once aged out


def test_the_history_is_bounded_per_node_and_overall() -> None:
    rec = NodeRecord(name="n1", pool="p")
    for n in range(25):
        rec.episode = n + 1
        history.record_start(rec, "other", "x" * 500, float(n), "drain", max_per_node=20)
    assert len(rec.incidents) == 20 and rec.incidents[0].at == 5.0
    assert len(rec.incidents[-1].reason) == history.REASON_MAX
    assert rec.seen_since == 4.0  # its history is complete from the latest incident dropped
    others = [node_with([100.0 + n, 200.0 + n], name=f"m{n}") for n in range(10)]
    assert history.trim([rec, *others], 30) == 10
    assert sum(len(r.incidents) for r in [rec, *others]) == 30
    assert [i.at for i in rec.incidents] == [float(n) for n in range(15, 25)]  # the oldest in the fleet went
    assert rec.seen_since == 14.0 and all(len(o.incidents) == 2 and o.seen_since == 0 for o in others)
    assert history.trim([rec, *others], 30) == 0


def test_a_state_written_before_the_history_loads_and_the_history_costs_nothing_when_empty() -> None:
    old = {"version": 1, "nodes": {"n1": {"name": "n1", "pool": "p", "phase": "healthy", "episode": 3}}}
    state = parse_state(old, "old")
    assert state.nodes["n1"].incidents == [] and state.history_since == 0.0
    policy.init_state(state, make_config(), 500.0)
    assert state.history_since == 500.0 and state.nodes["n1"].seen_since == 0.0  # (stored once, not per node)
    assert '"seen_since"' not in state_text(state) and '"incidents"' not in state_text(state)
    again = parse_state(json.loads(state_text(state)), "again")
    grown = make_config().model_copy(update={"pools": {"p": PoolConfig(nodes=[*state.nodes, "n9"])}})
    policy.init_state(again, grown, 900.0)
    assert again.history_since == 500.0 and again.nodes["n9"].seen_since == 900.0  # a node added later


# --- the scheduler adapters -------------------------------------------------------------------------------------
class SlurmAnswers:
    """A transport answering `sinfo --json` with one node and recording scontrol's argv."""

    name = "ctl"

    def __init__(self, features: Any, active: Any = None) -> None:
        record: dict[str, Any] = {"name": "gpu1", "state": "IDLE", "features": features}
        if active is not None:
            record["active_features"] = active
        self.nodes = [record]
        self.calls: list[list[str]] = []

    def run(
        self, argv: Sequence[str], *, timeout: float = 30.0, check: bool = True, input: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult:  # fmt: skip
        argv = list(argv)
        if argv == ["sinfo", "--json"]:
            return CommandResult(argv, 0, json.dumps({"nodes": self.nodes}), "")
        self.calls.append(argv)
        return CommandResult(argv, 0, "", "")

    def read_file(self, path: str, timeout: float = 10.0) -> str:
        raise AssertionError("not read")

    def close(self) -> None:
        pass


@pytest.mark.parametrize(
    ("features", "active", "tier", "argv"),
    [
        ("gpu,a100", "gpu,a100", "reliable",
         ["Weight=1", "AvailableFeatures=gpu,a100,reliable", "ActiveFeatures=gpu,a100,reliable"]),
        ("gpu,reliable,a100", "gpu,reliable,a100", "standard",
         ["Weight=10", "AvailableFeatures=gpu,a100", "ActiveFeatures=gpu,a100"]),
        (["gpu", "reliable"], None, "suspect", ["Weight=100", "AvailableFeatures=gpu", "ActiveFeatures=gpu"]),
        ("reliable", "reliable", "standard", ["Weight=10", "AvailableFeatures=", "ActiveFeatures="]),
        ("gpu,reliable", "gpu,reliable", "reliable", ["Weight=1"]),  # features already right: the weight alone
        ("", "", "standard", ["Weight=10"]),
    ],
)  # fmt: skip
def test_slurm_gets_the_tiers_weight_and_the_reliable_feature_keeping_the_others(
    features: Any, active: Any, tier: str, argv: list[str]
) -> None:
    answers = SlurmAnswers(features, active)
    Slurm(answers).set_reliability("gpu1", tier)  # type: ignore[arg-type]
    assert answers.calls == [["scontrol", "update", "NodeName=gpu1", *argv]]


def test_slurm_refuses_an_unknown_tier_or_node() -> None:
    slurm = Slurm(SlurmAnswers("gpu"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown reliability tier"):
        slurm.set_reliability("gpu1", "gold")
    with pytest.raises(TransportError, match="gpu9"):
        slurm.set_reliability("gpu9", "reliable")


class PatchedNode:
    """A client holding one Node: records each patch's body."""

    def __init__(self) -> None:
        meta = {"name": "n1", "resourceVersion": "7", "labels": {"ha-ops.io/pool": "gpu"}}
        self.obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "spec": {}, "metadata": meta}
        self.patches: list[dict[str, Any]] = []

    def get(self, kind: type, name: str) -> Any:
        return Node.from_dict(self.obj)

    def patch(self, kind: type, name: str, body: dict[str, Any], patch_type: Any = None) -> Any:
        self.patches.append(body)
        self.obj["metadata"]["labels"].update(body["metadata"].get("labels") or {})
        return Node.from_dict(self.obj)


def test_kubernetes_gets_the_tier_as_a_node_label_in_one_write() -> None:
    client = PatchedNode()
    KubernetesScheduler(client).set_reliability("n1", "suspect")  # type: ignore[arg-type]
    assert client.patches == [{"metadata": {"labels": {TIER_LABEL: "suspect"}, "resourceVersion": "7"}}]
    assert client.obj["metadata"]["labels"][TIER_LABEL] == "suspect"
    with pytest.raises(ValueError):
        KubernetesScheduler(client).set_reliability("n1", "gold")  # type: ignore[arg-type]


# --- the controller: history in the state, tiers published, metrics ----------------------------------------------
class TieredSlurm:
    """StubSlurm (test_remediation_controller) plus set_reliability, which records or fails."""

    def __init__(self, base: Any) -> None:
        self.base = base
        self.published: list[tuple[str, str]] = []
        self.fail = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.base, name)

    def set_reliability(self, name: str, tier: str) -> None:
        if self.fail > 0:
            self.fail -= 1
            raise TransportError("scontrol: Unable to contact slurm controller")
        self.published.append((name, tier))

    def set_reliabilities(self, tiers: dict[str, str]) -> dict[str, Exception]:
        failed: dict[str, Exception] = {}
        for name, tier in tiers.items():
            try:
                self.set_reliability(name, tier)
            except TransportError as exc:
                failed[name] = exc
        return failed


@pytest.fixture
def tiered(tmp_path: Path) -> tuple[Rig, TieredSlurm]:
    rig, scheduler = tiered_rig(tmp_path)
    rig.c.lease_step()
    return rig, scheduler


def tiered_rig(tmp_path: Path, **config: Any) -> tuple[Rig, TieredSlurm]:
    """A rig whose scheduler publishes tiers (given to the controller at its start, as the wiring does)."""
    executor = StubExecutor()
    scheduler = TieredSlurm(executor.scheduler)
    executor.scheduler = scheduler  # type: ignore[assignment]
    return Rig(tmp_path, executor=executor, **config), scheduler


def join(rig: Rig) -> None:
    if rig.c.tiers.thread is not None:
        rig.c.tiers.thread.join(timeout=10)


def test_the_controller_publishes_a_changed_tier_once_and_audits_it(tiered: tuple[Rig, TieredSlurm]) -> None:
    rig, slurm = tiered
    rig.step(ticks=2)
    join(rig)
    assert slurm.published == []  # a fleet without incidents: nothing to publish
    rig.c.handle_report(controller_report())
    rig.step(ticks=6)
    join(rig)
    assert rig.executor.calls == EPISODE  # the episode as before
    assert slurm.published == [("n1", "standard")]
    state = rig.state()
    assert state.nodes["n1"].tier == "standard"
    assert state.nodes["n1"].incidents[-1].outcome == "returned"
    [entry] = [e for e in rig.audit() if e["what"] == "set_tier"]
    assert (entry["node"], entry["before"], entry["after"]) == ("n1", "as configured", "standard")
    assert entry["why"] == "1 incident(s) in 30 days"
    rig.step(ticks=3)
    join(rig)
    assert slurm.published == [("n1", "standard")]  # once


def test_a_tier_the_scheduler_refuses_never_fails_the_episode_and_is_tried_again_later(
    tiered: tuple[Rig, TieredSlurm],
) -> None:
    rig, slurm = tiered
    slurm.fail = 1
    rig.c.handle_report(controller_report())
    rig.step(ticks=6)
    join(rig)
    assert rig.executor.calls == EPISODE and rig.state().nodes["n1"].phase == NodePhase.RETURNED
    assert slurm.published == [] and rig.state().nodes["n1"].tier == ""
    assert not [e for e in rig.audit() if e["what"] == "set_tier"]
    rig.step(ticks=2)
    join(rig)
    assert slurm.published == []  # not before its retry time
    rig.step(seconds=61)
    join(rig)
    assert slurm.published == [("n1", "standard")] and rig.state().nodes["n1"].tier == "standard"


def test_shadow_mode_publishes_no_tier(tmp_path: Path) -> None:
    rig, scheduler = tiered_rig(tmp_path, dry_run=True)
    rig.c.lease_step()
    rig.c.handle_report(controller_report())
    rig.step(ticks=6)
    assert rig.c.publish_tiers() == 0 and scheduler.published == []


def test_the_history_survives_a_failover(tmp_path: Path) -> None:
    a = Rig(tmp_path, "ctl1")
    a.c.lease_step()
    a.c.handle_report(controller_report())
    a.step(ticks=6)
    b = Rig(tmp_path, "ctl2", a.clock)
    a.clock.now += 10  # a dies; b takes over after the lease expires
    b.c.lease_step()
    assert b.c.is_leader and b.c.state is not None
    [incident] = b.c.state.nodes["n1"].incidents
    assert (incident.cause, incident.outcome) == ("xid-off-bus", "returned")


def test_fleet_metrics(rig_with_history: Rig) -> None:
    text = generate_latest(rig_with_history.c.registry).decode()
    assert 'ha_ops_fleet_incidents{cause="xid-off-bus"} 1.0' in text
    assert 'ha_ops_fleet_incidents{cause="thermal"} 0.0' in text
    assert "# TYPE ha_ops_fleet_mtbi_seconds histogram" in text
    assert 'ha_ops_fleet_mtbi_seconds_bucket{le="+Inf"} 1.0' in text
    assert "ha_ops_fleet_mtbi_seconds_count 1.0" in text
    assert 'ha_ops_fleet_pool_mtbi_seconds{pool="p"}' in text
    assert 'ha_ops_fleet_nodes{tier="standard"} 1.0' in text
    assert 'ha_ops_fleet_nodes{tier="reliable"} 4.0' in text


@pytest.fixture
def rig_with_history(tmp_path: Path) -> Rig:
    rig = Rig(tmp_path)
    rig.c.lease_step()
    rig.c.handle_report(controller_report())
    rig.step(ticks=6)
    return rig


def test_state_round_trip_keeps_the_history() -> None:
    state = ControllerState()
    rec = NodeRecord(name="n1", pool="p", episode=1, tier="standard", repaired_at=3.0)
    history.record_start(rec, "lost", "lost: Slurm reports it down*", 2.0, "drain", 20)
    state.nodes["n1"] = rec
    back = parse_state(json.loads(state_text(state)), "x")
    assert back.nodes["n1"] == rec
