"""The game day's job accounting: each job judged by its markers and by whether Slurm still queues it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from ha_ops.chaos import workload
from ha_ops.util.proc import CommandResult


class Node:
    """A GPU node whose squeue lists `queued` and whose marker files have `lines` lines each."""

    def __init__(self, queued: list[str], lines: dict[str, int]) -> None:
        self.queued, self.lines = queued, lines

    def run(self, argv: list[str], **_: Any) -> CommandResult:
        if argv[0] == "squeue":
            return CommandResult(argv, 0, "\n".join(self.queued), "")
        text = "\n".join(f"{name} {count}" for name, count in self.lines.items())
        return CommandResult(argv, 0, text, "")


def cluster(node: Node) -> Any:
    layout = SimpleNamespace(nodes_with_role=lambda role: [SimpleNamespace(name="gpu1")])
    return SimpleNamespace(layout=layout, node=lambda name: node)


def test_each_job_is_judged_by_its_markers() -> None:
    node = Node([], {"1.done": 1, "1.started": 1, "2.done": 1, "2.started": 2, "3.done": 2, "3.started": 2,
                     "4.started": 1})  # fmt: skip
    account = workload.account(cluster(node), "/shared/gd", ["1", "2", "3", "4"], wait_s=0.1)
    assert account.completed_once == ["1", "2"] and account.restarted == ["2", "3"]
    assert account.ran_twice == ["3"] and account.lost == ["4"] and not account.ok


def test_a_finished_job_slurm_still_queues_is_unfinished_not_completed() -> None:
    # Its completion reached no controller in control: Slurm requeued it and will run it again.
    node = Node(["7"], {"7.done": 1, "7.started": 1})
    account = workload.account(cluster(node), "/shared/gd", ["7"], wait_s=0.1)
    assert account.unfinished == ["7"] and account.completed_once == [] and not account.ok
