"""Drains and resumes in batches (issue 43): where the scheduler takes a list of nodes in one call (Slurm's `scontrol
update NodeName=a,b,c`), a storm's drains go in a few calls, not one (and three reads of every node) per node. The
real executor and Slurm adapter over a transport that keeps a node table as slurmctld would."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from ha_ops.errors import CommandFailed, CommandTimeout
from ha_ops.remediation.actions import ActionPipeline
from ha_ops.remediation.executor import Executor
from ha_ops.remediation.lease import LeaseLost
from ha_ops.remediation.model import Intent
from ha_ops.schedulers.base import SchedulerJob
from ha_ops.schedulers.kubernetes import KubernetesScheduler
from ha_ops.schedulers.slurm import BATCH_LIMIT, Slurm, expand_hostlist
from ha_ops.util.proc import CommandResult
from tests.unit.test_remediation_controller import Rig, make_config, report
from tests.unit.test_scheduler_slurm import Answers


class SlurmTable(Answers):
    """slurmctld's node table (`table`, by name) behind `sinfo --json`, `squeue --json` (no jobs) and `scontrol update
    NodeName=<list>`; an update naming a node it does not know fails whole, as scontrol's does ("Invalid node name
    specified")."""

    name = "ctl"

    def __init__(self, nodes: list[str], refused: frozenset[str] = frozenset()) -> None:
        self.table = {n: {"name": n, "state": "IDLE", "state_flags": [], "reason": ""} for n in nodes}
        super().__init__([], list(self.table.values()))  # (the same records: an update shows in the next read)
        self.refused = refused  # listed, yet refused by an update (removed from slurm.conf since the read)

    def run(self, argv: Sequence[str], **options: Any) -> CommandResult:
        argv = list(argv)
        if argv[0] != "scontrol":
            return super().run(argv, **options)
        self.calls.append(argv)
        assert argv[1] == "update" and argv[2].startswith("NodeName="), argv
        names = expand_hostlist(argv[2].removeprefix("NodeName="))
        if any(n not in self.table or n in self.refused for n in names):
            raise CommandFailed(argv, 1, "", "slurm_update error: Invalid node name specified")
        settings = dict(a.split("=", 1) for a in argv[3:])
        for name in names:
            record = self.table[name]
            if "State" not in settings:
                continue  # (a tier's Weight and features: recorded in calls)
            if settings["State"] == "RESUME":
                record.update(state_flags=[], reason="")
            elif settings["State"] == "DOWN":
                record.update(state="DOWN", reason=settings["Reason"])
            else:
                record.update(state_flags=["DRAIN"], reason=settings["Reason"])
        return CommandResult(argv, 0, "", "")

    def updates(self) -> list[list[str]]:
        return [c for c in self.calls if c[0] == "scontrol"]

    def reads(self) -> int:
        return sum(c == ["sinfo", "--json"] for c in self.calls)


def executor_over(table: SlurmTable) -> Executor:
    return Executor(Slurm(table, retries=0), node_ops=None, partition="gpu")  # type: ignore[arg-type]


def drain(node: str, why: str = "ha-ops: GPU1 xid: XID 79", **args: object) -> Intent:
    return Intent(id=f"d-{node}", node=node, kind="drain", why=why, args=dict(args))


def test_a_batch_of_drains_is_one_read_and_one_update_per_reason() -> None:
    table = SlurmTable([f"gpu{i}" for i in range(1, 7)])
    table.table["gpu3"].update(state_flags=["DRAIN"], reason="ha-ops: earlier")
    intents = [drain("gpu1"), drain("gpu2"), drain("gpu3"), drain("gpu4", why="ha-ops: lost"), drain("gpu5")]
    out = executor_over(table).run_batch(intents)
    assert out == {"d-gpu1": "drained", "d-gpu2": "drained", "d-gpu3": "already drained (ha-ops: earlier)",
                   "d-gpu4": "drained", "d-gpu5": "drained"}  # fmt: skip
    assert table.reads() == 1
    assert table.updates() == [
        ["scontrol", "update", "NodeName=gpu1,gpu2,gpu5", "State=DRAIN", "Reason=ha-ops: GPU1 xid: XID 79"],
        ["scontrol", "update", "NodeName=gpu4", "State=DRAIN", "Reason=ha-ops: lost"],
    ]
    assert table.table["gpu6"]["state_flags"] == []  # not named, not touched


def test_lost_nodes_are_marked_down_together_then_drained() -> None:
    table = SlurmTable(["gpu1", "gpu2", "gpu3"])
    table.table["gpu2"]["state"] = "DOWN"  # already down: not marked again
    out = executor_over(table).run_batch([drain(n, why="ha-ops: lost", lost=True) for n in ("gpu1", "gpu2", "gpu3")])
    assert set(out.values()) == {"drained"}
    assert [c[2:4] for c in table.updates()] == [["NodeName=gpu1,gpu3", "State=DOWN"],
                                                 ["NodeName=gpu1,gpu2,gpu3", "State=DRAIN"]]  # fmt: skip
    assert all(r["state"] == "DOWN" and r["state_flags"] == ["DRAIN"] for r in table.table.values())


def test_a_node_slurm_does_not_know_fails_alone_and_a_failed_batch_goes_one_by_one() -> None:
    table = SlurmTable(["gpu1", "gpu2"])
    out = executor_over(table).run_batch([drain("gpu1"), drain("ghost"), drain("gpu2")])
    assert out["d-gpu1"] == out["d-gpu2"] == "drained"
    assert "does not describe node 'ghost'" in str(out["d-ghost"])
    # A node gone between the read and the update: the list is refused whole, then each is tried alone.
    table = SlurmTable(["gpu1", "gpu9", "gpu3"], refused=frozenset({"gpu9"}))
    out = executor_over(table).run_batch([drain("gpu1"), drain("gpu9"), drain("gpu3")])
    assert out["d-gpu1"] == out["d-gpu3"] == "drained", out
    assert "Invalid node name specified" in str(out["d-gpu9"])
    assert table.updates()[0][2:4] == ["NodeName=gpu1,gpu9,gpu3", "State=DRAIN"]  # refused whole
    assert table.table["gpu1"]["state_flags"] == table.table["gpu3"]["state_flags"] == ["DRAIN"]


def test_a_batch_of_resumes_returns_only_what_ha_ops_drained() -> None:
    table = SlurmTable(["gpu1", "gpu2", "gpu3", "gpu4"])
    for name, reason in (("gpu1", "ha-ops: a"), ("gpu2", "ha-ops: b"), ("gpu3", "operator maintenance")):
        table.table[name].update(state_flags=["DRAIN"], reason=reason)
    out = executor_over(table).run_batch([Intent(id=n, node=n, kind="resume", why="validated") for n in table.table])
    assert out["gpu1"] == out["gpu2"] == "resumed" and out["gpu4"] == "already in service"
    assert "drained by someone else (operator maintenance); not resuming" in str(out["gpu3"])
    assert table.updates() == [["scontrol", "update", "NodeName=gpu1,gpu2", "State=RESUME"]]
    assert table.table["gpu3"]["state_flags"] == ["DRAIN"]


def test_slurm_splits_a_long_list_and_kubernetes_takes_one_node_a_call() -> None:
    names = [f"gpu{i}" for i in range(BATCH_LIMIT + 10)]
    table = SlurmTable(names)
    Slurm(table).drain_nodes(names, "ha-ops: x")
    assert [len(c[2].split(",")) for c in table.updates()] == [BATCH_LIMIT, 10]
    assert KubernetesScheduler.batch_limit == 1
    executor = executor_over(table)
    assert executor.batch_limit(drain("gpu1")) == BATCH_LIMIT
    assert executor.batch_limit(Intent(id="r", node="gpu1", kind="requeue_jobs", why="x")) == BATCH_LIMIT
    # A lost node's requeue releases its jobs one by one, each waiting for Slurm's next second: on its own.
    lost = Intent(id="l", node="gpu1", kind="requeue_jobs", why="x", args={"release": ["7"]})
    assert executor.batch_limit(lost) == 1
    assert executor.batch_limit(Intent(id="v", node="gpu1", kind="validate", why="x")) == 1


def test_a_batch_of_requeues_reads_the_jobs_once_and_requeues_a_job_on_two_of_its_nodes_once() -> None:
    jobs = [SchedulerJob("11", "RUNNING", ("gpu1", "gpu2")), SchedulerJob("12", "RUNNING", ("gpu3",)),
            SchedulerJob("13", "PENDING", ()), SchedulerJob("14", "RUNNING", ("gpu4",))]  # fmt: skip

    class Jobs:
        reads, requeued = 0, []  # type: ignore[var-annotated]

        def jobs(self) -> list[SchedulerJob]:
            Jobs.reads += 1
            return jobs

        def job_requeueable(self, job_id: str) -> bool:
            return True

        def requeue(self, job_id: str) -> None:
            Jobs.requeued.append(job_id)

    executor = Executor(Jobs(), node_ops=None, partition="gpu")  # type: ignore[arg-type]
    intents = [Intent(id=n, node=n, kind="requeue_jobs", why="x") for n in ("gpu1", "gpu2", "gpu3")]
    out = executor.run_batch(intents)
    assert Jobs.reads == 1 and Jobs.requeued == ["11", "12"]
    assert out["gpu1"].startswith("requeued [11]") and out["gpu2"].startswith("requeued []")  # type: ignore[union-attr]
    assert out["gpu3"].startswith("requeued [12]")  # type: ignore[union-attr]


def test_the_pipeline_batches_drains_each_batch_one_slot_and_everything_else_alone() -> None:
    executor = executor_over(SlurmTable([]))
    executor.scheduler.batch_limit = 3  # type: ignore[misc]
    config = make_config(Path("/nonexistent"), parallel_actions=2)
    pipeline = ActionPipeline(None, config, executor, None, None)  # type: ignore[arg-type]
    ready = [drain(f"n{i}") for i in range(7)] + [Intent(id="r", node="m", kind="requeue_jobs", why="x"),
                                                 Intent(id="v", node="v", kind="validate", why="x")]  # fmt: skip
    batches = pipeline.within_limits(ready, running=[])
    assert [[i.node for i in b] for b in batches] == [["n0", "n1", "n2"], ["n3", "n4", "n5"], ["v"]]
    # One slot taken by a running batch of drains: one batch more, and the repair in its own slots.
    batches = pipeline.within_limits(ready, running=[[drain("x1"), drain("x2")]])
    assert [[i.node for i in b] for b in batches] == [["n0", "n1", "n2"], ["v"]]


def test_a_storm_on_slurm_is_drained_in_a_few_calls_each_node_audited_once(tmp_path: Path) -> None:
    """40 nodes fail at once with two action slots: every node drained and audited once, in a handful of scontrol
    updates and reads (before batches: 40 updates and 120 reads of every node)."""
    nodes = [f"n{i}" for i in range(1, 41)]
    table = SlurmTable(nodes)
    rig = Rig(tmp_path, executor=executor_over(table), breaker_max_nodes=50, max_cordons_per_minute=100,  # type: ignore[arg-type]
              nodes=tuple(nodes), spares=(), parallel_actions=2)  # fmt: skip
    rig.c.lease_step()
    for node in nodes:
        assert rig.c.handle_report(report(node))["accepted"]
    table.calls.clear()
    rig.c.run_pending()
    assert all(r["state_flags"] == ["DRAIN"] for r in table.table.values())
    drains = [c for c in table.updates() if "State=DRAIN" in c]
    assert len(drains) == 1 and len(drains[0][2].split(",")) == 40, drains
    # The batch first (each node's requeue waits for its drain): one read (the audit's "before", and what the batch
    # decides on), the update, one read for the audit's "after".
    read = ["sinfo", "--json"]
    assert table.calls[:3] == [read, drains[0], read], table.calls[:3]
    entries = [e for e in rig.audit() if e["what"] == "drain"]
    assert sorted(e["node"] for e in entries) == sorted(nodes)
    assert all(e["before"] == "IDLE" and e["after"].startswith("IDLE+DRAIN") for e in entries), entries[0]


def test_slurm_publishes_a_rounds_tiers_in_one_read_and_one_update_per_group_that_ends_alike() -> None:
    table = SlurmTable(["gpu1", "gpu2", "gpu3", "gpu4"])
    for record in table.table.values():
        record.update(features="gpu,reliable", active_features="gpu,reliable")
    table.table["gpu3"].update(features="gpu,a100,reliable", active_features="gpu,a100,reliable")
    failed = Slurm(table).set_reliabilities({"gpu1": "standard", "gpu2": "standard", "gpu3": "standard",
                                             "gpu4": "reliable", "ghost": "standard", "gpu9": "gold"})  # fmt: skip
    assert set(failed) == {"ghost", "gpu9"} and "unknown reliability tier 'gold'" in str(failed["gpu9"])
    assert table.reads() == 1
    assert [c[2:] for c in table.updates()] == [
        ["NodeName=gpu1,gpu2", "Weight=10", "AvailableFeatures=gpu", "ActiveFeatures=gpu"],
        ["NodeName=gpu3", "Weight=10", "AvailableFeatures=gpu,a100", "ActiveFeatures=gpu,a100"],
        ["NodeName=gpu4", "Weight=1"],
    ]


def test_a_batch_gone_one_by_one_checks_the_lease_before_each_and_stops_at_a_scheduler_that_does_not_answer() -> None:
    table = SlurmTable(["gpu1", "gpu9", "gpu3", "gpu4"], refused=frozenset({"gpu9"}))
    checks: list[str] = []
    out = executor_over(table).run_batch([drain(n) for n in ("gpu1", "gpu9", "gpu3")], None,
                                         lambda: checks.append("checked"))  # fmt: skip
    assert checks == ["checked"] * 3 and out["d-gpu1"] == out["d-gpu3"] == "drained"
    # A deposed leader: the check raises, and nothing more is carried out.
    table = SlurmTable(["gpu1", "gpu9", "gpu3"], refused=frozenset({"gpu9"}))

    def deposed() -> None:
        raise LeaseLost("not the leader")

    with pytest.raises(LeaseLost):
        executor_over(table).run_batch([drain(n) for n in ("gpu1", "gpu9", "gpu3")], None, deposed)
    assert all(r["state_flags"] == [] for r in table.table.values())
    # slurmctld hung after the read: the first one alone waits for its timeout, the rest fail with it at once.
    table = SlurmTable(["gpu1", "gpu2", "gpu3"])
    attempts: list[list[str]] = []

    def hung(argv: Any, **_: Any) -> CommandResult:
        if argv[0] == "scontrol":
            attempts.append(list(argv))
            raise CommandTimeout(list(argv), 10.0)
        return SlurmTable.run(table, argv)

    table.run = hung  # type: ignore[method-assign]
    out = executor_over(table).run_batch([drain(n) for n in ("gpu1", "gpu2", "gpu3")])
    assert all(isinstance(out[f"d-{n}"], CommandTimeout) for n in ("gpu1", "gpu2", "gpu3"))
    assert [a[2] for a in attempts] == ["NodeName=gpu1,gpu2,gpu3", "NodeName=gpu1"]  # the list, then gpu1 alone
