"""A rollout's progress and ETA (ha_ops.rollout.progress), from its state and the clock: what `ha-ops rollout`
prints as each node settles and `rollout status` shows."""

from __future__ import annotations

from pathlib import Path

from ha_ops.rollout.progress import describe, progress
from ha_ops.rollout.state import NodeStep
from tests.unit.test_rollout_executor import Fleet, execute, fleet_nodes, start


def test_no_eta_before_a_node_is_done_then_one_from_the_mean_node_time(tmp_path: Path) -> None:
    # 12 nodes, 3 at a time: a canary wave, then waves whose batches run one after another, 60 s soak between waves.
    state = start(tmp_path, fleet_nodes(12), max_unavailable="3", soak_s=60).load()
    first = progress(state, now=1000.0)
    assert (first.settled, first.total, first.elapsed_s, first.eta_s) == (0, 12, None, None)
    assert describe(first) == "0/12 nodes settled"

    state.started_at = 1000.0
    canary = state.waves[0].nodes()
    for name in canary:  # each canary node took 120 s from its drain to back in service
        node = state.nodes[name]
        node.step, node.began_at, node.updated_at = NodeStep.DONE, 1000.0, 1120.0
    state.waves[0].status = "done"
    now = 1200.0
    p = progress(state, now)
    assert p.settled == len(canary) and p.node_s == 120.0 and p.elapsed_s == 200.0
    rounds = sum(-(-len(batch) // 3) for wave in state.waves[1:] for batch in wave.batches)
    soaks = 60.0 * (len(state.waves) - 2)  # between the waves left, not after the last
    assert p.eta_s == rounds * 120.0 + soaks
    assert describe(p) == f"{len(canary)}/12 nodes settled, 3.3 min in, ETA {p.eta_s / 60:.1f} min"


def test_a_soaking_wave_counts_only_the_soak_left(tmp_path: Path) -> None:
    state = start(tmp_path, fleet_nodes(4), max_unavailable="1", soak_s=600).load()
    for wave in state.waves[:-1]:
        wave.status = "done"
    for name in state.nodes:
        node = state.nodes[name]
        node.step, node.began_at, node.updated_at = NodeStep.DONE, 0.5, 10.5
    last = state.waves[-1]
    last.status, last.soak_until = "soaking", 130.0
    assert progress(state, now=100.0).eta_s == 30.0  # everything settled; the last wave's own soak is what is left


def test_the_rollout_prints_progress_as_nodes_settle(tmp_path: Path) -> None:
    nodes = fleet_nodes(6)
    fleet = Fleet([n.name for n in nodes])
    lines: list[str] = []
    state = execute(start(tmp_path, nodes, max_unavailable="2"), fleet, lines)
    settled = [line for line in lines if ": done;" in line]
    assert len(settled) == 6 and "; 6/6 nodes settled, " in settled[-1] and "ETA now" in settled[-1]
    assert "; 1/6 nodes settled" in settled[0]
    assert any("/6 nodes settled" in line and "taking out" in line for line in lines)
    assert lines[-1].startswith("rollout r1 completed: 6 done (6/6 nodes settled")
    assert state.started_at > 0 and all(n.began_at > 0 for n in state.nodes.values())


def test_status_reads_the_eta_as_of_the_last_write_unless_a_process_drives_it(tmp_path: Path) -> None:
    from ha_ops.rollout.run import summary as _summary

    state = start(tmp_path, fleet_nodes(4), max_unavailable="1", soak_s=0).load()
    state.started_at, state.updated_at = 1000.0, 1300.0
    assert _summary(state)["progress"]["elapsed_s"] == 300.0  # nothing drives it: the clock stopped at its last write
    assert _summary(state, driven=True)["progress"]["elapsed_s"] > 1e9  # driven: now
