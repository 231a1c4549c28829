"""The executor's requeue of a node's jobs: what runs and allows it is requeued; what ran to its end is not run
again (the partitions game day saw a job requeued in its last moment complete twice)."""

from __future__ import annotations

import typing

import pytest

from ha_ops.remediation.executor import ACTIONS, ActionFailed, Executor
from ha_ops.remediation.model import Intent, IntentKind
from ha_ops.schedulers.base import SchedulerJob


class Jobs:
    """A scheduler holding a fixed list of jobs, all requeueable but 'pinned'; it records each requeue."""

    def __init__(self, jobs: list[SchedulerJob]) -> None:
        self.jobs, self.requeued = jobs, []  # type: ignore[var-annotated]

    def jobs_on(self, node: str) -> list[SchedulerJob]:
        return [j for j in self.jobs if node in j.nodes]

    def job_requeueable(self, job_id: str) -> bool:
        return job_id != "pinned"

    def requeue(self, job_id: str) -> None:
        self.requeued.append(job_id)


def test_a_job_that_ran_to_its_end_is_not_requeued_and_one_that_failed_is() -> None:
    scheduler = Jobs([
        SchedulerJob("running", "RUNNING", ("gpu3",)),
        SchedulerJob("finished", "COMPLETING", ("gpu3",), exit_code=0),
        SchedulerJob("crashed", "COMPLETING", ("gpu3",), exit_code=256),
        SchedulerJob("unknown", "COMPLETING", ("gpu3",)),
        SchedulerJob("pinned", "RUNNING", ("gpu3",)),
        SchedulerJob("queued", "PENDING", ()),
        SchedulerJob("elsewhere", "RUNNING", ("gpu1",)),
    ])  # fmt: skip
    executor = Executor(scheduler, node_ops=None, partition="gpu")  # type: ignore[arg-type]
    result = executor.run(Intent(id="i1", node="gpu3", kind="requeue_jobs", why="XID 79"))
    assert scheduler.requeued == ["running", "crashed", "unknown"]
    assert result == ("requeued [running, crashed, unknown]; not requeueable, left to finish [pinned]; "
                      "finished, left [finished]")  # fmt: skip


def test_every_kind_of_intent_but_an_alert_has_an_action_and_an_alert_fails_named() -> None:
    assert set(typing.get_args(IntentKind)) - set(ACTIONS) == {"alert"}
    executor = Executor(Jobs([]), node_ops=None, partition="gpu")  # type: ignore[arg-type]
    with pytest.raises(ActionFailed, match="no action carries out a 'alert' intent"):
        executor.run(Intent(id="i2", node="gpu3", kind="alert", why="a person must look"))
