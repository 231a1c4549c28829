"""The controllers' shared views (ha_ops.remediation.view): who sees more, freshness, and damaged files."""

from __future__ import annotations

from pathlib import Path

import pytest

from ha_ops.remediation.documents import DirectoryDocuments
from ha_ops.remediation.view import View, ViewStore, last_heard, should_yield

NOW = 1000.0
WINDOW = 4.0


def view(name: str, slurm: bool, agents: bool, at: float = NOW) -> View:
    return View(
        id=name,
        at=at,
        slurm_ok_at=NOW - 1 if slurm else NOW - 60,
        agents={"gpu1": NOW - 1 if agents else NOW - 60},
    )


@pytest.mark.parametrize(
    ("own", "peer", "yields"),
    [
        ((False, False), (True, True), True),  # cut off
        ((True, False), (True, True), True),  # agents cannot reach the leader
        ((True, False), (False, True), True),  # on a Slurm primary cut off: it reads only its own slurmctld
        ((False, True), (True, False), False),  # the cluster's side, before Slurm's backup took over
        ((False, True), (True, True), False),
        ((True, True), (True, True), False),
        ((True, False), (True, False), False),  # quiet agents: nobody hears more
        ((False, False), (True, False), False),
        ((True, True), (False, False), False),
    ],
)
def test_a_controller_yields_only_to_a_peer_that_hears_agents_it_does_not(
    own: tuple[bool, bool], peer: tuple[bool, bool], yields: bool
) -> None:
    found = should_yield(view("a", *own), [view("b", *peer)], NOW, WINDOW)
    assert (found is not None) == yields


def test_a_stale_peer_counts_for_nothing() -> None:
    assert should_yield(view("a", False, False), [view("b", True, True, at=NOW - 10)], NOW, WINDOW) is None


def test_its_own_record_among_the_peers_is_ignored() -> None:
    assert should_yield(view("a", False, False), [view("a", True, True)], NOW, WINDOW) is None


def test_the_store_reads_peers_and_skips_a_torn_file(tmp_path: Path) -> None:
    ViewStore(DirectoryDocuments(tmp_path), "ctl1").write(view("ctl1", True, True))
    ViewStore(DirectoryDocuments(tmp_path), "ctl2").write(view("ctl2", True, False))
    (tmp_path / "views" / "ctl3.json").write_text('{"id": "ctl3", "at"')
    peers = ViewStore(DirectoryDocuments(tmp_path), "ctl1").peers()
    assert [p.id for p in peers] == ["ctl2"]
    assert last_heard([view("x", True, True), *peers], "gpu1") == NOW - 1
    assert last_heard(peers, "gpu9") == 0.0


def test_describe_says_what_is_missing() -> None:
    assert view("a", True, True).describe(NOW, WINDOW) == "a reaches Slurm and hears agents"
    blind = View(id="a", at=NOW)
    assert blind.describe(NOW, WINDOW) == "a never read Slurm and has heard no agent yet"


def test_a_published_view_is_small_for_a_leader_and_keeps_a_standbys_recent_agents() -> None:
    """Written at every lease step, a leader's view listed every node (730 KiB at 25,000); now it lists none and
    says when it last heard one, which is all a peer reads of it. A standby's lists the agents heard within the
    window (the leader reads those: agents that reach the standby alone), and judges the same."""
    agents = {f"gpu{i:05d}": NOW - (i % 10) for i in range(25_000)} | {"old": NOW - 100}
    own = View(id="ctl1", at=NOW, slurm_ok_at=NOW, agents=agents)
    leading = own.published(leading=True, window_s=30)
    assert leading.agents == {} and leading.heard_at() == own.heard_at() == NOW
    assert len(leading.model_dump_json()) < 200
    assert should_yield(leading, [view("ctl2", True, True)], NOW, WINDOW) is None  # (still hears agents)
    standby = own.published(leading=False, window_s=30)
    assert set(standby.agents) == set(agents) - {"old"} and last_heard([standby], "gpu00003") == NOW - 3
    assert last_heard([standby], "old") == 0.0  # (silent to any reader anyway)
