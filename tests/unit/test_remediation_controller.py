"""The controller (ha_ops.remediation.app) driven by hand, without its threads: a stub executor, an injected
clock, `lease_step()` and `tick()`. Intents run in order, once, each audited once; state survives a failover; a
deposed leader acts on nothing; dry run changes nothing; metrics."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import generate_latest

from ha_ops.errors import TransportError
from ha_ops.health.report import AgentReport, ReportFinding
from ha_ops.remediation.app import open_controller
from ha_ops.remediation.audit import AuditHead, verify
from ha_ops.remediation.config import (
    ControllerConfig,
    KubernetesConfig,
    KubernetesLeaseConfig,
    Ladder,
    PoolConfig,
    Safety,
    SlurmFence,
)
from ha_ops.remediation.executor import ActionFailed
from ha_ops.remediation.fence_config import DEFAULT_FENCE_COMMAND
from ha_ops.remediation.lease import LeaseLost
from ha_ops.remediation.model import Intent, NodePhase
from ha_ops.remediation.node_records import durable_key
from ha_ops.remediation.store import load_state, read_state
from ha_ops.schedulers.slurm import SlurmJob
from ha_ops.util.proc import CommandResult
from ha_ops.util.wait import wait_for
from tests.unit.cli_helpers import run_main

EPISODE = [
    ("drain", "n1"), ("spare_in", "s1"), ("requeue_jobs", "n1"), ("reset_gpu", "n1"), ("validate", "n1"),
    ("resume", "n1"), ("spare_out", "s1"),
]  # fmt: skip


class Died(BaseException):
    """The controller process dies here (not an error it handles)."""


class Clock:
    def __init__(self, now: float = 5000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class StubSlurm:
    def __init__(self) -> None:
        self.running: dict[str, list[str]] = {}
        self.down = False

    def jobs(self) -> list[SlurmJob]:
        if self.down:
            raise TransportError("squeue: slurmctld does not answer")
        return [SlurmJob(j, "RUNNING", (node,)) for node, ids in self.running.items() for j in ids]


class StubExecutor:
    """Duck-types ha_ops.remediation.executor.Executor: records what it is asked to do."""

    def __init__(self) -> None:
        self.scheduler = StubSlurm()
        self.calls: list[tuple[str, str]] = []
        self.ids: list[str] = []
        self.args: list[dict[str, Any]] = []
        self.fail: Counter[str] = Counter()  # kind -> how many more times it fails
        self.validate = "pass"
        self.die_before: str | None = None

    def batch_limit(self, intent: Intent) -> int:
        return 1  # each intent on its own (the real executor's batches: test_remediation_batches.py)

    def before(self, intent: Intent) -> str:
        if intent.kind == self.die_before:
            raise Died(intent.id)
        return "IDLE"

    def run(self, intent: Intent) -> str:
        self.calls.append((intent.kind, intent.node))
        self.ids.append(intent.id)
        self.args.append(intent.args)
        if self.fail[intent.kind] > 0:
            self.fail[intent.kind] -= 1
            raise ActionFailed("slurm_load_node: Unable to contact slurm controller")
        return self.validate if intent.kind == "validate" else f"{intent.kind} ok"


def make_config(
    state_dir: Path,
    me: str = "ctl1",
    spares: tuple[str, ...] = ("s1",),
    nodes: tuple[str, ...] = ("n1", "n2", "n3", "n4"),
    parallel_actions: int = 1,
    **limits: Any,
) -> ControllerConfig:
    values: dict[str, Any] = {"breaker_max_nodes": 5, "breaker_max_fraction": 1.0, "min_healthy_fraction": 0.0}
    values.update(limits)
    return ControllerConfig(
        id=me,
        state_dir=state_dir,
        pools={"p": PoolConfig(nodes=list(nodes), spares=list(spares))},
        safety=Safety(**values),
        ladder=Ladder(validate_timeout_s=5, probation_s=10, drain_timeout_s=30),
        lease_ttl_s=3.0,
        lease_margin_s=0.5,
        # One action at a time: the tests below name the order of actions across nodes too.
        parallel_actions=parallel_actions,
        parallel_repairs=parallel_actions,
    )


def report(node: str = "n1", seq: int = 1, state: str = "unhealthy") -> AgentReport:
    findings = [ReportFinding(check="xid", severity="critical", action="reset_gpu", message="XID 79", gpu=1)]
    return AgentReport(
        node=node,
        seq=seq,
        agent_id="agent",
        sent_at=0,
        state=state,
        action="reset_gpu" if state == "unhealthy" else "none",
        reason="GPU1 xid: XID 79",
        findings=findings if state == "unhealthy" else [],
    )


class Rig:
    def __init__(
        self,
        tmp_path: Path,
        me: str = "ctl1",
        clock: Clock | None = None,
        executor: StubExecutor | None = None,
        update: dict[str, Any] | None = None,
        **config: Any,
    ) -> None:
        self.dir = tmp_path / "shared"
        self.clock = clock or Clock()
        self.executor = executor or StubExecutor()
        self.config = make_config(self.dir, me, **config).model_copy(update=update or {})
        self.c = open_controller(self.config, self.executor, clock=self.clock)  # type: ignore[arg-type]

    def step(self, seconds: float = 0.5, ticks: int = 1) -> None:
        for _ in range(ticks):
            self.clock.now += seconds
            self.c.lease_step()
            self.c.tick()
            self.check_stored()

    def check_stored(self) -> None:
        """What a new leader would load is what this one holds (issue 43: records are written only when they say
        they changed; a change that did not say so would be lost at a failover), less a report's freshness."""
        with self.c.term.lock:
            if not self.c.is_leader or self.c.term._audit_queue or self.c.term._unaudited:
                return  # (a background write under way)
            held = {n: durable_key(r) for n, r in self.c.state.nodes.items()}
        stored = {n: durable_key(r) for n, r in load_state(self.c.documents).nodes.items()}
        assert stored == held, sorted(n for n in held if stored.get(n) != held[n])

    def audit(self) -> list[dict[str, Any]]:
        path = self.dir / "audit.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def files(self) -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in sorted(self.dir.iterdir()) if p.name in ("state.json", "audit.jsonl")}

    def state(self) -> Any:
        return read_state(self.dir / "state.json")


@pytest.fixture
def rig(tmp_path: Path) -> Rig:
    rig = Rig(tmp_path)
    rig.c.lease_step()
    assert rig.c.is_leader and rig.c.token == 1
    return rig


# --- the normal path --------------------------------------------------------------------------------------------
def test_becoming_leader_persists_every_node(rig: Rig) -> None:
    state = rig.state()
    assert set(state.nodes) == {"n1", "n2", "n3", "n4", "s1"}
    assert state.nodes["s1"].spare and not state.nodes["s1"].in_main
    assert rig.c.describe()["leader"] and rig.c.describe()["leader_name"] == "ctl1"


def test_tick_without_work_does_nothing(rig: Rig) -> None:
    rig.step(ticks=3)
    assert rig.executor.calls == [] and rig.audit() == []


def test_report_persists_intents_before_anything_runs(rig: Rig) -> None:
    answer = rig.c.handle_report(report())
    assert answer == {
        "accepted": True,
        "ignored": "",
        "notes": [],
        "intents": ["drain n1", "spare_in s1", "requeue_jobs n1"],
        "heartbeat_s": 10.0,  # the heartbeat its agents are asked for (remediation/heartbeats.py)
    }
    assert rig.executor.calls == []
    state = rig.state()
    assert [(i.kind, i.node, i.status, i.token) for i in state.intents] == [
        ("drain", "n1", "pending", 1), ("spare_in", "s1", "pending", 1), ("requeue_jobs", "n1", "pending", 1),
    ]  # fmt: skip
    assert state.nodes["n1"].phase == NodePhase.CORDONED


def test_a_storm_of_reports_costs_a_few_state_writes_and_audit_appends(tmp_path: Path) -> None:
    """40 nodes fail at once (each write taking 20 ms, as an API write does): each report is answered once the
    state holding it is written, yet the reports share writes (group commit), the drains run side by side, and
    their results are written together."""
    nodes = [f"n{i}" for i in range(1, 41)]
    rig = Rig(tmp_path, breaker_max_nodes=50, max_cordons_per_minute=100, nodes=tuple(nodes), parallel_actions=16)
    rig.c.lease_step()
    writes: Counter[str] = Counter()
    append, write = rig.c.documents.append, rig.c.documents.write

    def slow(real: Any) -> Any:
        def call(name: str, text: str) -> None:
            writes.update([name])
            time.sleep(0.02)
            real(name, text)

        return call

    rig.c.documents.append, rig.c.documents.write = slow(append), slow(write)  # type: ignore[method-assign]
    with ThreadPoolExecutor(len(nodes)) as pool:
        answers = list(pool.map(lambda node: rig.c.handle_report(report(node)), nodes))
    assert all(a["accepted"] for a in answers)
    assert sorted(i.node for i in rig.state().pending() if i.kind == "drain") == sorted(nodes)  # all written
    assert writes["state.json"] <= 10, writes  # 2 here; one per report before
    writes.clear()
    rig.c.run_pending()
    assert sorted(n for kind, n in rig.executor.calls if kind == "drain") == sorted(nodes)
    assert writes["audit.jsonl"] <= 10 and writes["state.json"] <= 10, writes  # 6 and 6 here; 81 and 81 before
    assert [e["what"] for e in rig.audit()].count("drain") == 40


def test_an_episode_runs_in_order_once_and_is_audited_once_each(rig: Rig) -> None:
    rig.c.handle_report(report())
    rig.step(ticks=6)
    assert rig.executor.calls == EPISODE
    state = rig.state()
    assert state.nodes["n1"].phase == NodePhase.RETURNED
    assert all(i.status == "done" and i.attempts == 1 for i in state.intents)
    entries = rig.audit()
    assert [(e["what"], e["node"]) for e in entries] == EPISODE
    assert [e["intent"] for e in entries] == rig.executor.ids
    assert all(e["who"] == "ctl1 (token 1)" for e in entries)
    assert entries[3]["after"] == "IDLE; reset_gpu ok" and entries[3]["before"] == "IDLE"
    assert verify(rig.dir / "audit.jsonl", AuditHead(state.audit_seq, state.audit_hash)) == []
    assert state.audit_seq == len(EPISODE)
    rig.step(seconds=5, ticks=3)  # probation over
    assert rig.state().nodes["n1"].phase == NodePhase.HEALTHY
    assert rig.executor.calls == EPISODE and len(rig.audit()) == len(EPISODE)


def test_a_validation_waiting_for_a_boot_never_holds_up_a_drain(tmp_path: Path) -> None:
    """Repairs have slots of their own: while n1's validation waits (a node booting), n2's drain runs."""
    rig = Rig(tmp_path, spares=())
    rig.c.lease_step()
    validating, booting, run = threading.Event(), threading.Event(), rig.executor.run

    def slow(intent: Intent) -> str:
        if intent.kind == "validate":
            validating.set()
            booting.wait(10)
        return run(intent)

    rig.executor.run = slow  # type: ignore[method-assign]
    rig.c.handle_report(report("n1"))
    stepping = threading.Thread(target=rig.step, kwargs={"ticks": 3})
    stepping.start()
    assert validating.wait(5), "n1's validation under way"
    rig.c.handle_report(report("n2"))
    rig.c._work.set()
    wait_for("n2 drained meanwhile", lambda: ("drain", "n2") in rig.executor.calls, timeout=5, interval=0.01)
    assert not booting.is_set() and ("validate", "n1") not in rig.executor.calls  # still waiting
    booting.set()
    stepping.join(10)
    assert ("validate", "n1") in rig.executor.calls


def test_reset_gpu_gets_the_reported_gpus(rig: Rig) -> None:
    rig.c.handle_report(report())
    rig.step(ticks=2)
    reset = next(i for i in rig.state().intents if i.kind == "reset_gpu")
    assert reset.args["gpus"] == [1]


def test_validation_failure_climbs_to_reboot(rig: Rig) -> None:
    rig.executor.validate = "fail: XID 79 again"
    rig.c.handle_report(report())
    rig.step(ticks=3)
    assert rig.executor.calls[3:] == [
        ("reset_gpu", "n1"),
        ("validate", "n1"),
        ("reboot_node", "n1"),
        ("validate", "n1"),
    ]
    assert rig.state().nodes["n1"].rung == "reboot_node"
    rig.step()
    assert rig.state().nodes["n1"].rung == "replace" and len(rig.executor.calls) == 7


def test_jobs_on_the_cordoned_node_hold_the_repair(tmp_path: Path) -> None:
    rig = Rig(tmp_path, spares=())  # no spare in service, so no other reason to look at Slurm's jobs
    rig.executor.scheduler.running = {"n1": ["42"]}  # a job that cannot be requeued keeps running
    rig.c.lease_step()
    rig.c.handle_report(report())
    rig.step(ticks=3)
    assert rig.state().nodes["n1"].phase == NodePhase.DRAINING
    assert ("reset_gpu", "n1") not in rig.executor.calls  # never a GPU reset under a running job
    rig.executor.scheduler.running = {}
    rig.step(ticks=1)
    assert ("reset_gpu", "n1") in rig.executor.calls


def test_slurm_unreachable_skips_the_tick(rig: Rig) -> None:
    rig.c.handle_report(report())
    rig.executor.scheduler.down = True
    rig.step(ticks=2)
    assert rig.executor.calls == []
    rig.executor.scheduler.down = False
    rig.step()
    assert rig.executor.calls == EPISODE[:3]


# --- failures and retries ---------------------------------------------------------------------------------------
def test_failed_drain_is_retried_then_marked_failed(rig: Rig) -> None:
    rig.executor.fail["drain"] = 99
    rig.c.handle_report(report())
    rig.step()
    assert len([c for c in rig.executor.calls if c[0] == "drain"]) == 1  # retries wait: 1, 2, 4, 8 s
    rig.step(seconds=1.0, ticks=20)
    drain = rig.state().node_intents("n1", "drain")[0]
    assert drain.status == "failed" and drain.attempts == 5 and "Unable to contact" in drain.result
    audited = [e for e in rig.audit() if e["what"] == "drain"]
    assert len(audited) >= 1 and "Unable to contact" in audited[0]["after"]
    # The node is never repaired while Slurm may still schedule onto it: it stays cordoned and the drain is retried.
    state = rig.state()
    assert state.nodes["n1"].phase.value == "cordoned"
    assert len(state.node_intents("n1", "drain")) >= 2
    assert not state.node_intents("n1", "reset_gpu") and not state.node_intents("n1", "reboot_node")


def test_a_transient_drain_failure_is_retried_until_done(rig: Rig) -> None:
    rig.executor.fail["drain"] = 2
    rig.c.handle_report(report())
    rig.step(seconds=1.0, ticks=6)
    drain = rig.state().node_intents("n1", "drain")[0]
    assert drain.status == "done" and drain.attempts == 3
    calls = rig.executor.calls
    assert calls.count(("drain", "n1")) == 3
    last_drain = max(i for i, c in enumerate(calls) if c == ("drain", "n1"))
    assert calls.index(("requeue_jobs", "n1")) > last_drain  # never requeue before the drain succeeded
    assert [e["what"] for e in rig.audit()].count("drain") == 1


def test_a_failed_validation_is_not_retried(rig: Rig) -> None:
    rig.executor.fail["validate"] = 1
    rig.c.handle_report(report())
    rig.step(ticks=2)
    validate = rig.state().node_intents("n1", "validate")[0]
    assert validate.status == "failed" and validate.attempts == 1
    rig.step()
    assert rig.state().nodes["n1"].rung == "reboot_node"


# --- failover ---------------------------------------------------------------------------------------------------
def test_next_leader_continues_pending_intents_and_skips_done_ones(tmp_path: Path) -> None:
    clock = Clock()
    a = Rig(tmp_path, "ctl1", clock)
    b = Rig(tmp_path, "ctl2", clock)
    a.c.lease_step()
    b.c.lease_step()
    assert a.c.is_leader and not b.c.is_leader
    a.c.handle_report(report())
    a.executor.die_before = "requeue_jobs"  # persisted, not yet carried out
    with pytest.raises(Died):
        a.c.tick()
    assert a.executor.calls == EPISODE[:2]
    clock.now += 3.0  # ctl1 is gone; its lease runs out
    b.c.lease_step()
    assert b.c.is_leader and b.c.token == 2
    assert [i.kind for i in b.c.state.pending()] == ["requeue_jobs"]  # type: ignore[union-attr]
    b.step(ticks=6)
    assert b.executor.calls == EPISODE[2:]
    entries = b.audit()
    assert [(e["what"], e["node"]) for e in entries] == EPISODE
    assert len({e["intent"] for e in entries}) == len(EPISODE)
    assert [e["who"] for e in entries] == ["ctl1 (token 1)"] * 2 + ["ctl2 (token 2)"] * 5
    assert verify(b.dir / "audit.jsonl") == []
    # ctl1 comes back: it stands by and does nothing.
    a.executor.die_before = None
    a.step(ticks=2)
    assert not a.c.is_leader and a.executor.calls == EPISODE[:2]


def test_an_intent_already_audited_is_not_audited_again(tmp_path: Path) -> None:
    clock = Clock()
    a, b = Rig(tmp_path, "ctl1", clock), Rig(tmp_path, "ctl2", clock)
    a.c.lease_step()
    a.c.handle_report(report())
    a.c.tick()  # drain, spare_in, requeue_jobs done and audited
    entries = a.audit()
    # ctl1 dies after auditing the last one but before its state said so: the next leader re-runs it.
    state_path = a.dir / "state.json"
    data = json.loads(state_path.read_text())
    data["intents"][-1]["status"] = "pending"
    state_path.write_text(json.dumps(data))
    clock.now += 3.0
    b.c.lease_step()
    b.c.run_pending()
    assert b.executor.calls == [("requeue_jobs", "n1")]  # idempotent re-run
    assert b.audit() == entries  # but written once


def test_a_deposed_leader_acts_on_nothing_and_writes_nothing(tmp_path: Path) -> None:
    clock = Clock()
    a, b = Rig(tmp_path, "ctl1", clock), Rig(tmp_path, "ctl2", clock)
    a.c.lease_step()
    a.c.handle_report(report())
    before = a.files()
    clock.now += 3.0  # ctl1 froze; ctl2 takes over, but has not written anything yet
    b.c.lease_step()
    assert b.c.is_leader
    before = a.files()
    # ctl1 has not looked at the lease since: it still holds token 1, but no longer calls itself the leader, since
    # its last renewal has run out on its own clock (a leader whose renewals hang on storage says so too).
    assert a.c.token == 1 and not a.c.is_leader
    with pytest.raises(LeaseLost):
        a.c.run_pending()
    a.c.tick()  # not the leader on its own clock: the tick does nothing (checked below)
    with pytest.raises(LeaseLost):
        a.c.handle_report(report("n2"))
    with pytest.raises(LeaseLost):
        a.c.reset_breaker()
    assert a.executor.calls == []
    assert a.files() == before
    a.c.lease_step()
    assert not a.c.is_leader and a.c.state is None
    with pytest.raises(LeaseLost, match="not the leader"):
        a.c.handle_report(report("n2"))


def test_a_leader_past_its_margin_stops_before_acting(rig: Rig) -> None:
    rig.c.handle_report(report())
    rig.clock.now += 2.6  # 0.4 s of the lease left: under the 0.5 s margin
    with pytest.raises(LeaseLost, match="margin"):
        rig.c.run_pending()
    assert rig.executor.calls == []
    rig.c.lease_step()  # renewed: it goes on
    rig.c.run_pending()
    assert rig.executor.calls == EPISODE[:3]


def test_leader_rereads_the_state_after_the_lease_was_lost_and_retaken(tmp_path: Path) -> None:
    clock = Clock()
    a, b = Rig(tmp_path, "ctl1", clock), Rig(tmp_path, "ctl2", clock)
    a.c.lease_step()
    clock.now += 3.0  # ctl1 froze
    b.c.lease_step()
    b.c.handle_report(report("n3"))
    (tmp_path / "shared" / "lease.json").write_text("{torn")  # damaged: treated as free
    a.c.lease_step()  # ctl1 wakes up and takes the free lease: a new term, so it must re-read the state
    assert a.c.is_leader and a.c.token is not None and a.c.token > 2
    assert a.c.state is not None and a.c.state.nodes["n3"].phase == NodePhase.CORDONED
    a.c.tick()
    assert a.state().nodes["n3"].phase == NodePhase.CORDONED  # ctl2's decision was not overwritten
    assert ("drain", "n3") in a.executor.calls


def test_a_restarted_controller_resumes_from_the_shared_state(rig: Rig, tmp_path: Path) -> None:
    rig.c.handle_report(report())
    rig.c.lease.release()
    again = Rig(tmp_path, "ctl1", rig.clock)
    again.c.lease_step()
    assert again.c.token == 2
    again.step(ticks=6)
    assert again.executor.calls == EPISODE


# --- dry run ----------------------------------------------------------------------------------------------------
def test_dry_run_decides_and_audits_but_changes_nothing(tmp_path: Path) -> None:
    rig = Rig(tmp_path, dry_run=True)
    rig.c.lease_step()
    rig.c.handle_report(report())
    rig.step(ticks=6)
    assert rig.executor.calls == []  # nothing carried out
    state = rig.state()
    assert all(i.status == "skipped" for i in state.intents)
    validate = state.node_intents("n1", "validate")[0]
    assert validate.result == "pass"  # treated as passed, so the whole path is shown
    assert state.node_intents("n1", "drain")[0].result == "dry-run: not carried out"
    assert state.nodes["n1"].phase == NodePhase.RETURNED
    assert [(e["what"], e["node"]) for e in rig.audit()] == [(f"dry-run {k}", n) for k, n in EPISODE]


# --- the breaker ------------------------------------------------------------------------------------------------
def test_breaker_trips_and_an_operator_resets_it(tmp_path: Path) -> None:
    rig = Rig(tmp_path, breaker_max_nodes=1)
    rig.c.lease_step()
    rig.c.handle_report(report("n1"))
    answer = rig.c.handle_report(report("n2"))
    assert not answer["accepted"] and "limit of 1" in answer["ignored"]
    assert rig.state().breaker.open
    metrics = generate_latest(rig.c.registry).decode()
    assert 'ha_ops_controller_breaker_open{id="ctl1"} 1.0' in metrics
    assert rig.c.handle_report(report("n3"))["intents"] == []
    answer = rig.c.reset_breaker()
    assert answer["notes"] == ["circuit breaker closed"]
    state = rig.state()
    assert not state.breaker.open and state.breaker.cordons == []
    entry = rig.audit()[-1]
    assert entry["what"] == "breaker_reset" and entry["before"].startswith("1 node(s) cordoned")
    assert state.audit_seq == entry["seq"]
    assert rig.c.handle_report(report("n3", seq=2))["intents"][0] == "drain n3"


# --- metrics ----------------------------------------------------------------------------------------------------
def test_metrics(tmp_path: Path) -> None:
    clock = Clock()
    a, b = Rig(tmp_path, "ctl1", clock), Rig(tmp_path, "ctl2", clock)
    a.c.lease_step()
    b.c.lease_step()
    a.c.handle_report(report())
    text = generate_latest(a.c.registry).decode()
    assert 'ha_ops_controller_leader{id="ctl1"} 1.0' in text
    assert 'ha_ops_controller_breaker_open{id="ctl1"} 0.0' in text
    assert 'ha_ops_controller_node_phase{node="n1",phase="cordoned"} 1.0' in text
    assert 'ha_ops_controller_node_phase{node="n2",phase="healthy"} 1.0' in text
    assert 'ha_ops_controller_intents{status="pending"} 3.0' in text
    assert 'ha_ops_controller_deferred{id="ctl1"} 0.0' in text
    assert 'ha_ops_controller_view_whole{id="ctl1"} 0.0' in text  # (no poll of the fleet yet)
    assert 'ha_ops_controller_suspects_held{id="ctl1"} 0.0' in text
    standby = generate_latest(b.c.registry).decode()
    assert 'ha_ops_controller_leader{id="ctl2"} 0.0' in standby
    assert "ha_ops_controller_breaker_open" not in standby  # a standby has no state to describe
    assert "ha_ops_controller_watch_synced" not in text  # (Slurm: no watches)
    b.c.executor.scheduler.watches_synced = lambda: {"Node": True, "Pod": False}  # type: ignore[attr-defined]
    standby = generate_latest(b.c.registry).decode()  # (a standby's caches are warm for its takeover)
    assert 'ha_ops_controller_watch_synced{id="ctl2",resource="Node"} 1.0' in standby
    assert 'ha_ops_controller_watch_synced{id="ctl2",resource="Pod"} 0.0' in standby


def test_metrics_name_a_node_held_for_replacement(rig: Rig) -> None:
    rig.executor.validate = "fail: no"
    rig.c.handle_report(report())
    rig.step(ticks=4)
    text = generate_latest(rig.c.registry).decode()
    assert 'ha_ops_controller_needs_replacement{node="n1"} 1.0' in text


def poll_the_fleet(rig: Rig, n1: str, ticks: int = 1) -> None:
    """Polls of the whole fleet, a second apart: n1 in state `n1` and its agent silent, every other node idle and
    its agent heard (a view of the fleet that is whole: observers.py)."""
    for _ in range(ticks):
        others = [n for n in rig.c.state.nodes if n != "n1"] if rig.c.state else []
        for node in others:
            rig.c.heard_from(node)
        rig.c.reconciler.fresh_states = {node: ("idle", "") for node in others} | {"n1": (n1, "")}
        rig.step(seconds=1.0)


@pytest.mark.parametrize("fence_fails", [False, True])
def test_a_lost_nodes_jobs_are_released_only_after_its_fence_succeeded(rig: Rig, fence_fails: bool) -> None:
    rig.executor.scheduler.running = {"n1": ["41"]}
    rig.executor.fail["reboot_node"] = 1 if fence_fails else 0
    poll_the_fleet(rig, "idle", ticks=int(rig.config.agent_silence_s) + 1)  # the new leader listens first
    assert rig.c.describe()["observers"]["view_whole"]
    assert 'ha_ops_controller_view_whole{id="ctl1"} 1.0' in generate_latest(rig.c.registry).decode()
    poll_the_fleet(rig, "down*")  # what the node-state poller hands the next tick
    order = [k for k, n in rig.executor.calls if n == "n1"]
    assert order[:3] == ["drain", "reboot_node", "requeue_jobs"]
    requeue = rig.executor.args[[c for c in rig.executor.calls].index(("requeue_jobs", "n1"))]
    assert requeue["release"] == ([] if fence_fails else ["41"])


def test_a_lost_nodes_job_that_slurm_requeued_before_the_read_is_released_from_the_read_before(rig: Rig) -> None:
    """The poll that finds n1 down* reads its jobs too, but Slurm requeued job 41 in that same moment: it is pending,
    on no node. The read before saw it on n1, and the requeue step releases it (else it waits 120 s)."""
    rig.executor.scheduler.running = {"n1": ["41"]}
    poll_the_fleet(rig, "allocated", ticks=int(rig.config.agent_silence_s) + 1)  # while it runs; its agent silent
    rig.executor.scheduler.running = {}  # requeued by Slurm: pending, no longer on n1
    poll_the_fleet(rig, "down*")
    requeue = rig.executor.args[rig.executor.calls.index(("requeue_jobs", "n1"))]
    assert requeue["release"] == ["41"]


def test_metrics_name_each_slurm_controller_the_leader_last_pinged(tmp_path: Path) -> None:
    clock = Clock()
    a, b = Rig(tmp_path, "ctl1", clock), Rig(tmp_path, "ctl2", clock)
    a.c.lease_step()
    b.c.lease_step()
    a.c.fencing.step([("ctl1", "DOWN"), ("ctl2", "UP")])  # what the fence loop hands it from `scontrol ping`
    text = generate_latest(a.c.registry).decode()
    assert 'ha_ops_slurm_controller_up{host="ctl1"} 0.0' in text
    assert 'ha_ops_slurm_controller_up{host="ctl2"} 1.0' in text
    a.c.fencing.step([("ctl1", "UP"), ("ctl2", "UP")])
    assert 'ha_ops_slurm_controller_up{host="ctl1"} 1.0' in generate_latest(a.c.registry).decode()
    assert "ha_ops_slurm_controller_up{" not in generate_latest(b.c.registry).decode()  # a standby pings nothing


class CutOffPrimary:
    """Node access where the Slurm primary's host does not answer ssh and its BMC powers it off."""

    def __init__(self) -> None:
        self.here: list[str] = []

    def run_command(self, node: str, command: str, connect_timeout_s: float | None = None) -> CommandResult:
        raise TransportError(f"cannot reach {node}:22")

    def run_here(self, command: str) -> CommandResult:
        self.here.append(command)
        return CommandResult(["sh", "-c", command], 0, "done", "")


def test_a_cut_off_primary_is_powered_off_through_its_bmc_then_the_backup_is_told_to_take_control(
    tmp_path: Path,
) -> None:
    fence = SlurmFence(after_s=5, power_off_command="ha-ops power off {node} -i hosts.yml")
    rig = Rig(tmp_path, update={"slurm_fence": fence})
    ops = CutOffPrimary()
    rig.executor.node_ops = ops  # type: ignore[attr-defined]
    rig.c.lease_step()
    cut = [("ctl1", "DOWN"), ("ctl2", "UP")]  # the backup answers, in standby: the primary's heartbeat is fresh
    rig.c.fencing.step(cut)
    rig.step(seconds=1.0, ticks=5)  # the lease renewed meanwhile
    rig.c.fencing.step(cut)
    assert ops.here == []  # no agent heard since the primary went silent: this leader may be the one cut off
    rig.c.heard_from("n1")  # an agent's report got through: the silence is the primary's
    rig.c.fencing.step(cut)
    assert ops.here == ["ha-ops power off ctl1 -i hosts.yml", "scontrol takeover"]
    fenced, took = [e for e in rig.audit() if e["what"] in ("fence_slurmctld", "slurm_takeover")]
    assert fenced["node"] == "ctl1" and "powered off through its BMC" in fenced["after"]
    assert (took["what"], took["node"], took["after"]) == ("slurm_takeover", "ctl2", "told to take control")
    rig.step(seconds=1.0, ticks=5)
    rig.c.fencing.step(cut)
    assert len(ops.here) == 2  # once per outage


class HungPrimary(CutOffPrimary):
    """Node access where the Slurm primary's host answers ssh, so the fence kills its slurmctld there."""

    def __init__(self) -> None:
        super().__init__()
        self.on: list[tuple[str, str]] = []

    def run_command(self, node: str, command: str, connect_timeout_s: float | None = None) -> CommandResult:
        self.on.append((node, command))
        return CommandResult(["ssh", node, command], 0, "killed slurmctld 42", "")


def test_a_primary_fenced_over_ssh_is_followed_by_the_takeover_at_once(tmp_path: Path) -> None:
    # Not after SlurmctldTimeout: a job that ends while no controller is in control loses its completion.
    fence = SlurmFence(after_s=5, power_off_command="ha-ops power off {node} -i hosts.yml")
    rig = Rig(tmp_path, update={"slurm_fence": fence})
    ops = HungPrimary()
    rig.executor.node_ops = ops  # type: ignore[attr-defined]
    rig.c.lease_step()
    silent = [("ctl1", "DOWN"), ("ctl2", "UP")]
    rig.c.fencing.step(silent)
    rig.step(seconds=1.0, ticks=6)  # (renewing its lease: a new term would watch afresh)
    rig.c.heard_from("n1")
    rig.c.fencing.step(silent)
    assert ops.on == [("ctl1", DEFAULT_FENCE_COMMAND)]
    assert ops.here == ["scontrol takeover"]  # no power off: ssh reached it
    fenced, took = [e for e in rig.audit() if e["what"] in ("fence_slurmctld", "slurm_takeover")]
    assert fenced["after"] == "fenced over ssh: killed slurmctld 42"
    assert (took["node"], took["why"], took["after"]) == ("ctl2", "ctl1 was fenced over ssh", "told to take control")


def keyed_pair(tmp_path: Path) -> tuple[Clock, Rig, Rig]:
    """Two controllers with the audit key (beside the shared folder, not on it): ctl1 leads, ctl2 stands by."""
    (tmp_path / "key").write_bytes(b"s" * 32)
    clock = Clock()
    keyed = {"audit_key_file": tmp_path / "key"}
    a, b = Rig(tmp_path, "ctl1", clock, update=keyed), Rig(tmp_path, "ctl2", clock, update=keyed)
    a.c.lease_step()
    b.c.lease_step()
    return clock, a, b


def test_a_takeover_finds_a_cut_audit_log_and_goes_on_from_the_states_head(tmp_path: Path) -> None:
    clock, a, b = keyed_pair(tmp_path)
    a.c.handle_report(report())
    a.step(ticks=8)  # the episode, audited (keyed)
    recorded = a.state()
    assert recorded.audit_seq == len(EPISODE) and recorded.audit_problems == []
    path = a.dir / "audit.jsonl"
    path.write_text("".join(f"{line}\n" for line in path.read_text().splitlines()[:2]))  # the tail cut off
    clock.now += 3.0  # ctl1 is gone
    b.c.lease_step()
    assert b.c.is_leader
    state = b.state()
    said = f"the controller's state records seq {len(EPISODE)} but the log ends at seq 2"
    assert any(said in p for p in state.audit_problems), state.audit_problems
    broken = b.audit()[-1]
    assert broken["what"] == "audit_chain_broken" and broken["who"] == "ctl2 (token 2)"
    assert (broken["seq"], broken["prev"]) == (len(EPISODE) + 1, recorded.audit_hash)  # not adopted from the log
    assert state.audit_seq == broken["seq"]
    assert 'ha_ops_audit_intact{id="ctl2"} 0.0' in generate_latest(b.c.registry).decode()
    assert f'ha_ops_audit_head_seq{{id="ctl2"}} {len(EPISODE) + 1}.0' in generate_latest(b.c.registry).decode()


def test_a_takeover_finds_a_tail_cut_hidden_by_moving_the_states_head(tmp_path: Path) -> None:
    """Issue 44, finding 5: the log's tail cut and state.json's audit head pointed at the last entry kept. The chain
    is whole and matches that head; only the audit key's HMAC over the head (which the cutter lacks) tells."""
    clock, a, b = keyed_pair(tmp_path)
    a.c.handle_report(report())
    a.step(ticks=8)
    assert a.state().audit_head_mac  # (keyed at every save)
    path, core = a.dir / "audit.jsonl", a.dir / "state.json"
    kept = path.read_text().splitlines()[:2]
    path.write_text("".join(f"{line}\n" for line in kept))
    last = json.loads(kept[-1])
    data = json.loads(core.read_text())
    data["audit_seq"], data["audit_hash"] = last["seq"], last["hash"]
    core.write_text(json.dumps(data))
    clock.now += 3.0
    b.c.lease_step()
    assert b.c.is_leader
    problems = b.state().audit_problems
    assert problems and "with an HMAC the audit key did not make" in problems[0]
    assert b.audit()[-1]["what"] == "audit_chain_broken"
    assert 'ha_ops_audit_intact{id="ctl2"} 0.0' in generate_latest(b.c.registry).decode()


def test_an_audit_key_on_the_shared_storage_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"audit_key_file: .* is on the shared storage"):
        ControllerConfig.model_validate({**make_config(tmp_path).model_dump(), "audit_key_file": tmp_path / "key"})


# --- a blind leader steps down ----------------------------------------------------------------------------------
def see(rig: Rig, slurm: bool = True, agents: tuple[str, ...] = ()) -> None:
    """What this controller observed just now: a successful read of Slurm, and agents' reports arriving."""
    if slurm:
        rig.c.leadership.slurm_ok_at = rig.clock.now
    for node in agents:
        rig.c.heard_from(node)


def test_a_leader_cut_off_steps_down_for_a_standby_that_reaches_slurm_and_hears_agents(tmp_path: Path) -> None:
    clock = Clock()
    a, b = Rig(tmp_path, "ctl1", clock), Rig(tmp_path, "ctl2", clock)
    see(a, agents=("n1",))
    a.c.lease_step()
    b.c.lease_step()
    assert a.c.is_leader and not b.c.is_leader
    stepped = None
    # ctl1 is cut off: it reads nothing, and the agents fail over to ctl2 (503)
    for second in range(1, int(a.config.blind_after_s) + 5):
        clock.now += 1
        see(b, agents=("n1", "n2"))
        b.c.lease_step()
        a.c.lease_step()
        if stepped is None and not a.c.is_leader:
            stepped = second
    assert stepped is not None and a.config.blind_after_s < stepped <= a.config.blind_after_s + 1, stepped
    assert b.c.is_leader and not a.c.is_leader  # and the blind one does not take the lease back
    [entry] = [e for e in a.audit() if e["what"] == "lease_step_down"]
    assert entry["who"] == "ctl1 (token 1)" and entry["after"] == "released the lease for ctl2"
    assert f"ctl1 has not read Slurm for {stepped:.1f} s" in entry["why"], entry["why"]
    assert "ctl2 reaches Slurm and hears agents" in entry["why"]


def test_a_leader_renews_its_lease_before_it_writes_its_view_and_a_standby_after(tmp_path: Path) -> None:
    """At 25,000 nodes on a loaded API server, the view's write and the peers' read took the leader's renewal past
    its 3 s lease; a standby still looks at the views first (a blind one must not take the lease)."""
    clock = Clock()
    a, b = Rig(tmp_path, "ctl1", clock), Rig(tmp_path, "ctl2", clock)
    a.c.lease_step()
    order: list[str] = []
    for rig in (a, b):
        take, renew, write = rig.c.lease.acquire_or_renew, rig.c.lease.renew, rig.c.leadership.views.write
        rig.c.lease.acquire_or_renew = lambda t=take, who=rig.c.config.id: order.append(f"{who} takes") or t()  # type: ignore[method-assign]
        rig.c.lease.renew = lambda token, r=renew, who=rig.c.config.id: order.append(f"{who} renews") or r(token)  # type: ignore[method-assign]
        rig.c.leadership.views.write = lambda v, w=write, who=rig.c.config.id: order.append(f"{who} view") or w(v)  # type: ignore[method-assign]
    clock.now += 1
    a.c.lease_step()
    b.c.lease_step()
    assert order == ["ctl1 renews", "ctl1 view", "ctl2 view", "ctl2 takes"]
    assert a.c.is_leader and not b.c.is_leader


def test_the_leaders_renewals_never_wait_for_the_lease_step_or_the_terms_lock(tmp_path: Path) -> None:
    """At 25,000 nodes a tick held the term's lock for seconds and the views took their time: the renewal, in the
    same step, came after the 3 s lease had run out. renew_run renews on its own cadence whatever holds the lock."""
    clock = Clock()
    a, b = Rig(tmp_path, "ctl1", clock), Rig(tmp_path, "ctl2", clock)
    a.c.lease_step()
    token = a.c.lease.token
    held, stop = threading.Event(), threading.Event()

    def tick_over_a_huge_fleet() -> None:
        with a.c.term.lock:
            held.set()
            stop.wait(10)

    blocker = threading.Thread(target=tick_over_a_huge_fleet)
    blocker.start()
    held.wait(5)
    try:
        for _ in range(10):  # 10 s while the lock is held: the renewals go on, each due after lease_renew_s
            clock.now += 1
            renewed: list[bool | None] = []
            renewal = threading.Thread(target=lambda out=renewed: out.append(a.c.leadership.renew_if_due()))
            renewal.start()
            renewal.join(2.0)  # (a renewal that waited for the lock would still be waiting here)
            assert renewed == [True]
            b.c.lease_step()
        assert a.c.lease.token == token and a.c.leadership.renewed_at == clock.now
        assert not b.c.is_leader
    finally:
        stop.set()
        blocker.join()
    a.c.lease_step()
    assert a.c.is_leader and a.c.term.token == token  # the same term: nothing was taken over


def test_a_leader_whose_lease_step_is_stuck_stops_renewing_and_a_peer_takes_over(tmp_path: Path) -> None:
    clock = Clock()
    a, b = Rig(tmp_path, "ctl1", clock), Rig(tmp_path, "ctl2", clock)
    a.c.lease_step()
    for _ in range(70):  # the step never finishes again (a deadlock); only the renewals run
        clock.now += 1
        a.c.leadership.renew_if_due()
        b.c.lease_step()
    assert b.c.is_leader and not a.c.lease.current()
    assert a.c.leadership.renew_if_due() is None  # its renewal never takes the lease back


def test_a_renewal_never_takes_a_lease_it_lost(tmp_path: Path) -> None:
    clock = Clock()
    a, b = Rig(tmp_path, "ctl1", clock), Rig(tmp_path, "ctl2", clock)
    a.c.lease_step()
    token = a.c.lease.token
    assert token is not None
    clock.now += 10  # a's lease ran out (it was frozen); b takes the lease
    b.c.lease_step()
    assert b.c.is_leader
    assert a.c.lease.renew(token) is False and a.c.lease.token is None
    b.c.lease.release()  # and a free lease is not taken by a renewal either
    assert a.c.lease.renew(token) is False and a.c.lease.token is None


def test_a_leader_that_sees_as_little_as_its_standby_keeps_the_lease(tmp_path: Path) -> None:
    # Slurm down for everyone and the agents quiet: a handover would help nobody.
    clock = Clock()
    a, b = Rig(tmp_path, "ctl1", clock), Rig(tmp_path, "ctl2", clock)
    a.c.lease_step()
    for _ in range(20):
        clock.now += 1
        b.c.lease_step()
        a.c.lease_step()
    assert a.c.is_leader and not b.c.is_leader
    assert not [e for e in a.audit() if e["what"] == "lease_step_down"]


def test_a_leader_that_hears_agents_keeps_the_lease_over_a_standby_that_only_reaches_slurm(tmp_path: Path) -> None:
    clock = Clock()
    a, b = Rig(tmp_path, "ctl1", clock), Rig(tmp_path, "ctl2", clock)
    for _ in range(20):
        clock.now += 1
        see(a, agents=("n1",))
        see(b)
        a.c.lease_step()
        b.c.lease_step()
    assert a.c.is_leader and not b.c.is_leader


def test_a_lost_node_needs_silence_on_both_controllers(rig: Rig, tmp_path: Path) -> None:
    other = Rig(tmp_path, "ctl2", rig.clock)
    rig.clock.now += rig.config.agent_silence_s + 1
    see(other, agents=("n1",))  # n1's agent reaches the standby only (it cannot reach this leader)
    other.c.lease_step()
    rig.c.lease_step()
    rig.c.reconciler.fresh_states = {"n1": ("down*", "")}
    rig.c.tick()
    assert [k for k, n in rig.executor.calls if n == "n1"] == []
    assert rig.state().nodes["n1"].phase == "healthy"


def test_the_config_chooses_the_lease_a_file_by_default_or_a_kubernetes_lease(tmp_path: Path) -> None:
    from ha_ops.remediation.k8s_lease import KubernetesLease
    from ha_ops.remediation.lease import Lease
    from ha_ops.remediation.wiring import make_lease

    assert isinstance(make_lease(make_config(tmp_path), time.time), Lease)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
    }))  # fmt: skip
    k8s = KubernetesConfig(kubeconfig=kubeconfig, lease=KubernetesLeaseConfig(namespace="ops"))
    config = make_config(tmp_path).model_copy(update={"kubernetes": k8s})
    lease = make_lease(config, time.time)  # (no request yet: the client connects on first use)
    assert isinstance(lease, KubernetesLease)
    assert (lease.namespace, lease.name, lease.me) == ("ops", "ha-ops-controller", "ctl1")


def test_an_action_that_ends_frees_its_slot_at_once_and_a_new_report_starts_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pipeline, not waves: with two slots and n1's drain held up, the other drains go through the second slot one
    after another, and a report that arrives meanwhile has its drain started too, none of them waiting for the
    results' next write (FLUSH_S, made a minute here so that waiting for it would show)."""
    monkeypatch.setattr("ha_ops.remediation.actions.FLUSH_S", 60.0)
    nodes = ("n1", "n2", "n3", "n4", "n5")
    rig = Rig(tmp_path, nodes=nodes, spares=(), parallel_actions=2, breaker_max_nodes=10)
    rig.c.lease_step()
    held, run = threading.Event(), rig.executor.run

    def slow(intent: Intent) -> str:
        if intent.node == "n1":
            held.wait(10)
        return run(intent)

    rig.executor.run = slow  # type: ignore[method-assign]
    for node in nodes[:4]:
        rig.c.handle_report(report(node))
    pending = threading.Thread(target=rig.c.run_pending)
    pending.start()

    def drained(*names: str) -> bool:
        return all(("drain", n) in rig.executor.calls for n in names)

    wait_for("n2, n3 and n4 drained beside n1's", lambda: drained("n2", "n3", "n4"), timeout=5, interval=0.01)
    rig.c.handle_report(report("n5"))
    wait_for("n5 drained too", lambda: drained("n5"), timeout=5, interval=0.01)
    assert not held.is_set() and ("drain", "n1") not in rig.executor.calls
    held.set()
    pending.join(10)
    assert not pending.is_alive()
    state = rig.state()
    assert all(i.status == "done" for i in state.intents if i.kind == "drain")  # all written when it ended
    assert [e["node"] for e in rig.audit() if e["what"] == "drain"].count("n1") == 1


def test_a_state_removed_while_the_audit_log_holds_actions_blocks_the_takeover(tmp_path: Path) -> None:
    # Forgetting what was done (a node out of service, a fence under way) is worse than leading nothing: a missing
    # state beside a log of actions is damage, to restore (`controller state restore`), not a fresh start.
    clock = Clock()
    first = Rig(tmp_path, "ctl1", clock)
    first.c.lease_step()
    first.c.handle_report(report())
    first.step(ticks=2)
    assert first.audit()  # actions audited
    first.c.stop()
    first.c.lease.release()
    (first.dir / "state.json").unlink()
    second = Rig(tmp_path, "ctl2", clock)
    second.c.lease_step()
    assert not second.c.is_leader
    blocked = second.c.describe()["blocked"]
    assert blocked["reason"] == "state" and "is missing while the audit log holds" in blocked["error"], blocked


@pytest.mark.parametrize("keyed", [True, False])
def test_the_log_and_the_state_deleted_together_are_named_by_the_lease_and_block_the_takeover(
    tmp_path: Path, keyed: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Issue 44, finding 5: with the log and the state both gone, nothing of them is left to compare; the lease
    records the audit head as the last leader saved it (carried from holder to holder), so the next leader refuses
    to lead (blocked: HaOpsRemediationBlocked) until a person restores the state."""
    (tmp_path / "key").write_bytes(b"s" * 32)
    clock = Clock()
    update = {"audit_key_file": tmp_path / "key"} if keyed else None
    first, second = Rig(tmp_path, "ctl1", clock, update=update), Rig(tmp_path, "ctl2", clock, update=update)
    first.c.lease_step()
    first.c.handle_report(report())
    first.step(ticks=8)
    logged = first.state().audit_seq
    assert logged > 0
    first.step(seconds=1.0, ticks=2)  # (renewing: the lease carries the head saved)
    recorded = json.loads((first.dir / "lease.json").read_text())["audit_head"]
    assert recorded["seq"] == logged and bool(recorded["mac"]) is keyed
    first.c.stop()
    first.c.lease.release()
    (first.dir / "state.json").unlink()
    (first.dir / "audit.jsonl").unlink()
    second.c.lease_step()
    assert not second.c.is_leader
    blocked = second.c.describe()["blocked"]
    assert blocked["reason"] == "state", blocked
    assert f"does not hold the head the lease records (seq {logged})" in blocked["error"], blocked
    assert json.loads((first.dir / "lease.json").read_text())["audit_head"]["seq"] == logged  # kept for the next
    # A person looks (audit verify names it too), then restores: from nothing here, the loss accepted and audited.
    key = ["--audit-key-file", str(tmp_path / "key")] if keyed else []
    argv = ["controller", "state", "restore", "--state-dir", str(first.dir), "--rebuild-from-audit", *key]
    assert run_main(monkeypatch, *argv) == 0, capsys.readouterr()
    assert json.loads((first.dir / "lease.json").read_text())["audit_head"]["seq"] == 0  # the state restored
    clock.now += 1.0
    second.c.lease_step()
    assert second.c.is_leader and second.c.describe()["blocked"] is None


def test_a_takeover_names_a_log_cut_below_the_head_the_lease_records(tmp_path: Path) -> None:
    """The log's tail cut and the state rewound with it (an older state.json put back): the chain and the state
    agree, the lease's record does not."""
    clock, a, b = keyed_pair(tmp_path)
    early = (a.dir / "state.json").read_text()  # at seq 0, as the takeover wrote it
    a.c.handle_report(report())
    a.step(ticks=8)
    a.step(seconds=1.0, ticks=2)
    logged = a.state().audit_seq
    (a.dir / "audit.jsonl").write_text("")  # every entry cut, and the state put back to before them
    (a.dir / "state.json").write_text(early)
    clock.now += 3.0
    b.c.lease_step()
    assert b.c.is_leader
    problems = b.state().audit_problems
    assert problems and f"the lease records the audit head at seq {logged}" in problems[0], problems
    broken = b.audit()[-1]
    assert broken["what"] == "audit_chain_broken" and broken["seq"] == logged + 1  # chained past the cut, visible


def test_a_leader_killed_between_its_first_audit_and_the_next_save_is_succeeded(tmp_path: Path) -> None:
    # The neighbour of the case above: the state exists (written at the takeover, at seq 0) and the log is longer,
    # because the leader died after auditing its first action and before saving. That is a takeover, not damage.
    clock = Clock()
    first = Rig(tmp_path, "ctl1", clock)
    first.c.lease_step()
    at_takeover = (first.dir / "state.json").read_text()
    first.c.handle_report(report())
    first.step(ticks=2)
    logged = len(first.audit())
    assert logged  # actions audited
    first.c.stop()
    first.c.lease.release()
    (first.dir / "state.json").write_text(at_takeover)  # the save after the audit never happened
    second = Rig(tmp_path, "ctl2", clock)
    second.c.lease_step()
    assert second.c.is_leader and second.c.describe()["blocked"] is None
    assert second.state().audit_seq >= logged and not second.state().audit_problems


def hold_action(rig: Rig, kind: str, node: str | None = None) -> tuple[threading.Event, threading.Event]:
    """The rig's executor holds each `kind` action (on `node`) until released: (one started, release them)."""
    started, release = threading.Event(), threading.Event()
    run = rig.executor.run

    def held(intent: Intent) -> str:
        if intent.kind == kind and node in (None, intent.node):
            started.set()
            release.wait(30)
        return run(intent)

    rig.executor.run = held  # type: ignore[method-assign]
    return started, release


def test_the_decision_loop_never_waits_for_a_long_repair_a_node_lost_meanwhile_is_taken_out(rig: Rig) -> None:
    # Issue 43: n2's GPU reset takes "300 s" (held until the test lets it go) in the action pipeline's own runnable;
    # meanwhile n1 goes silent and down. The decision loop (its real thread, as `run` starts it) decides n1 lost at
    # the first tick after its grace (the agent's silence), and the drain runs beside the repair: not after it.
    repairing, release = hold_action(rig, "reset_gpu", "n2")
    loops = [threading.Thread(target=rig.c.actions.run, daemon=True),
             threading.Thread(target=rig.c._decision_loop, daemon=True)]  # fmt: skip
    for loop in loops:
        loop.start()

    def poll(n1: str) -> None:
        """One poll of the node states, a second after the last, handed to the decision loop, and its tick."""
        others = [n for n in rig.c.state.nodes if n != "n1"] if rig.c.state else []
        for node in others:
            rig.c.heard_from(node)
        states = {node: ("drained" if node == "n2" else "idle", "") for node in others} | {"n1": (n1, "")}
        rig.clock.now += 1.0
        rig.c.lease_step()
        with rig.c.term.lock:
            rig.c.reconciler.states_polled(states, rig.clock.now)
        rig.c._work.set()
        wait_for("the tick took the poll", lambda: not rig.c.reconciler.fresh_states, timeout=5, interval=0.01)

    try:
        rig.c.handle_report(report("n2"))
        assert repairing.wait(5), "n2's repair under way"
        for _ in range(int(rig.config.agent_silence_s) + 1):  # n1's agent silent past its grace, n1 still idle
            poll("idle")
        assert ("drain", "n1") not in rig.executor.calls
        poll("down*")  # the first poll that finds it lost
        lost_at = rig.clock.now
        wait_for("n1 taken out", lambda: ("drain", "n1") in rig.executor.calls, timeout=5, interval=0.01)
        assert rig.clock.now == lost_at  # decided at that very tick: no later poll was needed
        assert not release.is_set() and ("reset_gpu", "n2") not in rig.executor.calls  # the repair still runs
    finally:
        release.set()
        rig.c.stop()
        for loop in loops:
            loop.join(10)
    assert not any(loop.is_alive() for loop in loops)


def test_a_validation_that_outlasts_the_rungs_timeout_is_waited_for_not_climbed_over(rig: Rig) -> None:
    # With the decision loop ticking beside the action pipeline (issue 43), a rung's timeout must not climb the
    # ladder while the rung's own validation is still under way (it waits up to boot_wait_s for its node): the ladder
    # follows the validation's result once it ends.
    validating, done = hold_action(rig, "validate")
    pipeline = threading.Thread(target=rig.c.actions.run, daemon=True)
    pipeline.start()
    try:
        rig.c.handle_report(report("n1"))
        for _ in range(20):  # the decision loop's ticks, until the validation runs
            if validating.is_set():
                break
            rig.clock.now += 0.5
            rig.c.lease_step()
            rig.c.reconciler.tick()
            time.sleep(0.05)
        assert validating.wait(5), rig.executor.calls
        for _ in range(4):  # 8 s of ticks past the ladder's 5 s validate timeout, the validation still running
            rig.clock.now += 2.0
            rig.c.lease_step()
            rig.c.reconciler.tick()
        assert ("reboot_node", "n1") not in rig.executor.calls
        assert not [i for i in rig.c.state.intents if i.kind == "reboot_node"], "climbed over a running validation"
    finally:
        done.set()

    def resumed() -> bool:  # (the decision loop's next tick makes the resume; the pipeline runs it)
        rig.c.reconciler.tick()
        return ("resume", "n1") in rig.executor.calls

    wait_for("n1 resumed", resumed, timeout=10, interval=0.1)
    rig.c.stop()
    pipeline.join(10)
    assert [k for k, n in rig.executor.calls if n == "n1"][-2:] == ["validate", "resume"]


def test_a_stopping_controller_keeps_the_lease_until_its_actions_under_way_end(tmp_path: Path) -> None:
    # A successor must not start the same action while this process still carries it out: run() waits for the
    # action pipeline (its grace) before it releases the lease.
    rig = Rig(tmp_path, update={"port": 0, "listen_address": "127.0.0.1"})
    in_flight, held = hold_action(rig, "drain")
    controller = threading.Thread(target=rig.c.run, daemon=True)
    controller.start()
    wait_for("a leader", lambda: rig.c.is_leader, timeout=10, interval=0.05)
    rig.c.handle_report(report("n1"))
    assert in_flight.wait(10)
    rig.c.stop()
    controller.join(1.0)
    assert controller.is_alive()  # still waiting for the drain under way...
    assert rig.c.lease.read().holder == "ctl1"  # ...with the lease held
    held.set()
    controller.join(20)
    assert not controller.is_alive() and rig.c.lease.read().holder == ""  # released once it ended
