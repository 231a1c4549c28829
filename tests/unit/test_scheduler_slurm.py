"""The Slurm adapter's reading of Slurm's structured output (`squeue --json`, `sinfo --json`), given the answers
Slurm 22.05 gives. The lab test (tests/integration/test_lab.py) reads the real ones."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from ha_ops.errors import TransportError
from ha_ops.schedulers.slurm import Slurm
from ha_ops.util.proc import CommandResult

HOSTILE_NAME = "x Requeue=1 State=RUNNING\n77|RUNNING|gpu9|forged"


def job(job_id: int, state: str | list[str], nodes: str, name: str, requeue: bool) -> dict[str, Any]:
    return {"job_id": job_id, "job_state": state, "nodes": nodes, "name": name, "requeue": requeue, "partition": "gpu"}


class Answers:
    """A transport answering `squeue --json` and `sinfo --json` with fixed documents, and squeue's %T for one job."""

    name = "gpu1"

    def __init__(
        self, jobs: list[dict[str, Any]], nodes: list[dict[str, Any]] | None = None, errors: Sequence[Any] = ()
    ) -> None:
        self.jobs, self.nodes, self.errors = jobs, nodes or [], list(errors)
        self.calls: list[list[str]] = []

    def run(
        self, argv: Sequence[str], *, timeout: float = 30.0, check: bool = True, input: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult:  # fmt: skip
        argv = list(argv)
        self.calls.append(argv)
        if argv == ["squeue", "--json"]:
            out = json.dumps({"meta": {}, "errors": self.errors, "jobs": self.jobs})
        elif argv == ["sinfo", "--json"]:
            out = json.dumps({"meta": {}, "errors": [], "nodes": self.nodes})
        elif argv[:3] == ["squeue", "-h", "-j"]:  # plain squeue lists unfinished jobs only
            out = next((j["job_state"] for j in self.jobs if str(j["job_id"]) == argv[3] and j["job_state"] in
                        ("PENDING", "RUNNING")), "")  # fmt: skip
        else:
            raise AssertionError(f"unexpected command {argv}")
        return CommandResult(argv, 0, out, "")

    def read_file(self, path: str, timeout: float = 10.0) -> str:
        raise AssertionError("not read")

    def close(self) -> None:
        pass


def test_a_job_name_that_looks_like_fields_or_lines_is_read_as_a_name() -> None:
    slurm = Slurm(Answers([job(12, "RUNNING", "gpu[1-2]", HOSTILE_NAME, False), job(13, "PENDING", "", "b", True)]))
    jobs = slurm.jobs()
    assert [(j.id, j.state, j.nodes, j.name) for j in jobs] == [
        ("12", "RUNNING", ("gpu1", "gpu2"), HOSTILE_NAME),
        ("13", "PENDING", (), "b"),
    ]
    assert [j.id for j in slurm.jobs_on("gpu9")] == []
    assert slurm.job_requeueable("12") is False  # the name says Requeue=1; the record says no
    assert slurm.job_requeueable("13") is True
    assert slurm.job_requeueable("99") is False


def test_finished_jobs_are_not_listed_but_their_state_is_known_until_slurm_forgets_them() -> None:
    slurm = Slurm(Answers([job(12, "COMPLETED", "gpu1", "a", False), job(14, ["RUNNING"], "gpu3", "c", False)]))
    assert [j.id for j in slurm.jobs()] == ["14"]  # a later release's state list, base state first
    assert slurm.jobs()[0].state == "RUNNING"
    assert slurm.job_state("12") == "COMPLETED"
    assert slurm.job_state("15") == "GONE"


def test_partition_nodes_come_from_each_nodes_partitions() -> None:
    nodes = [
        {"name": "gpu1", "state": "idle", "partitions": ["gpu"]},
        {"name": "gpu4", "state": "idle", "partitions": ["spares"]},
        {"name": "gpu2", "state": "idle", "partitions": ["gpu", "debug"]},
        {"name": "ctl1", "state": "idle"},
    ]
    assert Slurm(Answers([], nodes)).partition_nodes("gpu") == ["gpu1", "gpu2"]


@pytest.mark.parametrize(
    "answer",
    ["not json", "[]", '{"jobs": 5}', '{"errors": [{"error": "Unable to contact slurm controller"}], "jobs": []}'],
)
def test_an_answer_that_is_not_a_job_list_is_a_transport_error(answer: str) -> None:
    transport = Answers([])
    transport.run = lambda argv, **_: CommandResult(list(argv), 0, answer, "")  # type: ignore[method-assign]
    with pytest.raises(TransportError, match="squeue --json"):
        Slurm(transport).jobs()


def test_a_requeued_job_is_released_in_a_later_second_than_its_kill() -> None:
    # slurmd counts a launch credential made in the same second as the requeue's kill as revoked ("Job N already
    # killed, do not launch batch job": the lab saw it fail 2 runs in 5), so the release waits for the next second.
    import time

    class Releases(Answers):
        def run(self, argv: Sequence[str], **kwargs: Any) -> CommandResult:
            if argv[:2] == ["scontrol", "update"]:
                self.released_at = time.time()
                return CommandResult(list(argv), 0, "", "")
            return super().run(argv, **kwargs)

    transport = Releases([job(21, "PENDING", "", "train", True)])
    pending_seen = time.time()
    Slurm(transport).release_requeued("21")
    assert int(transport.released_at) > int(pending_seen)
    assert transport.calls[-1] == ["squeue", "-h", "-j", "21", "-o", "%T"]


def test_a_completing_job_says_how_it_ended_in_either_releases_record() -> None:
    signalled = {"status": ["SIGNALED"], "return_code": {"set": True, "number": 0},
                 "signal": {"id": {"set": True, "number": 9}, "name": "KILL"}}  # fmt: skip
    success = {"status": ["SUCCESS"], "return_code": {"set": True, "number": 0},
               "signal": {"id": {"set": False, "number": 0}, "name": ""}}  # fmt: skip
    jobs = [
        {**job(30, "COMPLETING", "gpu1", "ok", True), "exit_code": 0},  # 22.05: the wait status
        {**job(31, "COMPLETING", "gpu2", "failed", True), "exit_code": 256},  # exit 1
        {**job(32, "COMPLETING", "gpu3", "later", True), "exit_code": signalled},  # later releases: an object
        {**job(33, "COMPLETING", "gpu4", "later-ok", True), "exit_code": success},
        {**job(34, "RUNNING", "gpu5", "runs", True), "exit_code": 0},
        job(35, "COMPLETING", "gpu6", "unknown", True),
    ]
    ended = {j.id: j.exit_code for j in Slurm(Answers(jobs)).jobs()}
    assert ended == {"30": 0, "31": 256, "32": 137, "33": 0, "34": None, "35": None}
