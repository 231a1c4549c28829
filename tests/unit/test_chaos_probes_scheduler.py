"""The scheduler-neutral probes over a scripted scheduler (pure logic): what "in service" and "capacity" mean in
sinfo's words, whichever scheduler answers, and a scheduler that does not answer is "not in service", not an error."""

from __future__ import annotations

from pathlib import Path

import pytest

from ha_ops.chaos import probes, target
from ha_ops.errors import HaOpsError
from ha_ops.spec import compute_layout, load_spec

SPEC = load_spec(Path(__file__).resolve().parents[2] / "examples" / "lab-k8s.yaml")
CONFIGURATION = {target.TARGET: "lab:scripted"}


class Scripted:
    """A scheduler answering from a table of node -> state (sinfo's words); None: it does not answer."""

    def __init__(self, states: dict[str, str] | None, working: list[str] | None = None) -> None:
        self.states = states
        self.working = working if working is not None else ["gpu1", "gpu2", "gpu3"]

    def node_states_and_reasons(self) -> dict[str, tuple[str, str]]:
        if self.states is None:
            raise HaOpsError("list nodes: 503 the API server is shutting down")
        return {name: (state, "") for name, state in self.states.items()}

    def partition_nodes(self, partition: str) -> list[str]:
        assert partition == "gpu"
        return self.working


class Cluster:
    def __init__(self, scheduler: Scripted) -> None:
        self.spec, self.layout, self._scheduler = SPEC, compute_layout(SPEC), scheduler

    def scheduler(self) -> Scripted:
        return self._scheduler


def judged(scheduler: Scripted, probe: str, **arguments: object) -> object:
    with target.using(Cluster(scheduler), CONFIGURATION):  # type: ignore[arg-type]
        return getattr(probes, probe)(**arguments, configuration=CONFIGURATION)


WHOLE = {"gpu1": "idle", "gpu2": "allocated", "gpu3": "mixed", "gpu4": "idle"}


def test_every_gpu_node_in_service_is_the_steady_state() -> None:
    assert judged(Scripted(WHOLE), "nodes_in_service") is True
    assert judged(Scripted(WHOLE), "scheduler_responds") is True
    assert judged(Scripted(WHOLE), "node_state", node="gpu2") == "allocated"


@pytest.mark.parametrize("state", ["drained", "draining", "idle*", "down*"])
def test_a_node_out_or_not_responding_is_not_in_service(state: str) -> None:
    assert judged(Scripted({**WHOLE, "gpu3": state}), "nodes_in_service") is False
    assert judged(Scripted({**WHOLE, "gpu3": state}), "node_state", node="gpu3") == state


def test_a_gpu_node_the_scheduler_does_not_know_is_not_in_service() -> None:
    missing = {n: s for n, s in WHOLE.items() if n != "gpu4"}
    assert judged(Scripted(missing), "nodes_in_service") is False
    assert judged(Scripted(missing), "node_state", node="gpu4") == "unknown"


def test_a_scheduler_that_does_not_answer_is_judged_not_in_service() -> None:
    assert judged(Scripted(None), "scheduler_responds") is False
    assert judged(Scripted(None), "nodes_in_service") is False
    assert judged(Scripted(None), "capacity_in_service") is False
    assert judged(Scripted(None), "node_state", node="gpu1") == "unknown"


def test_capacity_holds_while_the_spare_stands_in_for_a_node_that_is_out() -> None:
    lost = {**WHOLE, "gpu2": "down*"}
    # The spare (gpu4) taken into the working pool: three nodes in service, as many as the pool's non-spares.
    assert judged(Scripted(lost, working=["gpu1", "gpu2", "gpu3", "gpu4"]), "capacity_in_service") is True
    # Not yet: the spare still waits outside it.
    assert judged(Scripted(lost, working=["gpu1", "gpu2", "gpu3"]), "capacity_in_service") is False
    # A node in service outside the working pool does not count.
    assert judged(Scripted(WHOLE, working=["gpu1", "gpu2"]), "capacity_in_service") is False
