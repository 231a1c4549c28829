"""The game day's job accounting: each job judged by its event log (the reference job's) and by whether Slurm still
queues it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from ha_ops.chaos import workload
from ha_ops.util.proc import CommandResult

START = "start host=gpu1 restart={n} rank=0 world=1 from={step} pid=7 skipped=-"


def log(*events: str) -> list[str]:
    return list(events)


class Node:
    """A GPU node whose squeue lists `queued` and whose shared folder has these job logs."""

    def __init__(self, queued: list[str], logs: dict[str, list[str]]) -> None:
        self.queued, self.logs = queued, logs

    def run(self, argv: list[str], **_: Any) -> CommandResult:
        if argv[0] == "squeue":
            return CommandResult(argv, 0, "\n".join(self.queued), "")
        text = "".join(f"== {job}\n" + "".join(f"{line}\n" for line in lines) for job, lines in self.logs.items())
        return CommandResult(argv, 0, text, "")


def cluster(node: Node) -> Any:
    layout = SimpleNamespace(nodes_with_role=lambda role: [SimpleNamespace(name="gpu1")])
    return SimpleNamespace(layout=layout, node=lambda name: node)


def test_each_job_is_judged_by_its_log() -> None:
    logs = {
        "1": log(START.format(n=0, step=0), "saved step=1", "done host=gpu1 step=1"),
        "2": log(
            START.format(n=0, step=0),
            "saved step=1",
            "saved step=2",
            START.format(n=1, step=2),
            "saved step=3",
            "done host=gpu2 step=3",
        ),
        "3": log(START.format(n=0, step=0), "done step=1", START.format(n=1, step=1), "done step=1"),
        "4": log(START.format(n=0, step=0), "saved step=1"),
    }
    account = workload.account(cluster(Node([], logs)), "/shared/gd", ["1", "2", "3", "4", "5"], wait_s=0.1)
    assert account.completed_once == ["1", "2"] and account.restarted == ["2", "3"]
    assert account.ran_twice == ["3"] and account.lost == ["4", "5"] and not account.ok
    assert account.resumes["2"] == [{"from": 2, "last_saved": 2}] and account.resumed_behind == []


def test_a_resume_behind_the_last_saved_step_fails_the_account() -> None:
    # Step 3 was saved (and fsynced into the log) before the node died; the restart began at step 2: saved work lost.
    logs = {"9": log(START.format(n=0, step=0), "saved step=2", "saved step=3", START.format(n=1, step=2),
                     "saved step=4", "done host=gpu2 step=4")}  # fmt: skip
    account = workload.judge(["9"], logs, queued=set())
    assert account.completed_once == ["9"] and account.resumed_behind == ["9"] and not account.ok
    assert account.resumes["9"] == [{"from": 2, "last_saved": 3}]


def test_a_torn_last_line_is_not_counted() -> None:
    logs = {"5": log(START.format(n=0, step=0), "saved step=1", "saved st")}
    account = workload.judge(["5"], logs, queued=set())
    assert account.lost == ["5"] and account.resumed_behind == []


def test_a_finished_job_slurm_still_queues_is_unfinished_not_completed() -> None:
    # Its completion reached no controller in control: Slurm requeued it and will run it again.
    node = Node(["7"], {"7": log(START.format(n=0, step=0), "done host=gpu1 step=1")})
    account = workload.account(cluster(node), "/shared/gd", ["7"], wait_s=0.1)
    assert account.unfinished == ["7"] and account.completed_once == [] and not account.ok
