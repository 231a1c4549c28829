"""The rule that keeps a partition of the control plane from looking like node faults (observers.py, lost.py), pinned
with scripted observations: what the leader reads from Slurm and hears from the agents, poll by poll."""

from __future__ import annotations

from typing import Any

import pytest

from ha_ops.remediation.observers import Contact, Observation, domain_silent, mass_verdict, observe, responding
from ha_ops.remediation.policy import NodeView, Outcome
from tests.unit.cli_helpers import run_main
from tests.unit.test_remediation_policy import NODES, Sim, kinds, make_config

FLEET = [*NODES, "s1"]
POLL_S = 1.0


class Fleet:
    """A leader polling a fleet once a second: per node, what Slurm says and when its agent was last heard."""

    def __init__(self, sim: Sim | None = None) -> None:
        self.sim = sim or Sim()
        self.heard = dict.fromkeys(FLEET, self.sim.now)
        self.intents: list[tuple[str, str]] = []
        self.notes: list[str] = []

    def poll(self, states: dict[str, str] | None = None, reporting: set[str] | None = None) -> Outcome:
        """One poll: `states` (default idle) and the agents whose reports arrive (default all)."""
        sim = self.sim
        for node in FLEET if reporting is None else reporting:
            self.heard[node] = sim.now
        views = {n: NodeView(state=(states or {}).get(n, "idle"), heard_at=self.heard[n], polled_at=sim.now)
                 for n in FLEET}  # fmt: skip
        out = sim.tick(views, whole=False)
        self.intents += kinds(out)
        self.notes += out.notes
        return out

    def run(self, seconds: float, states: dict[str, str] | None = None, reporting: set[str] | None = None) -> None:
        for _ in range(int(seconds / POLL_S)):
            self.sim.advance(POLL_S)
            self.poll(states, reporting)


def everyone(state: str) -> dict[str, str]:
    return dict.fromkeys(FLEET, state)


def test_the_control_planes_own_partition_and_its_mend_take_no_healthy_node_out() -> None:
    # Issue 42's trial: both controller hosts cut off for 40 s. Slurm's controllers find every node down*, and no
    # agent's report reaches any controller. After the mend the fleet reports again, but n1's agent only 10 s later
    # and Slurm still says down* for n1 for 5 s: without the rule, n1 (silent 50 s, down*) is lost and power-cycled.
    fleet = Fleet()
    fleet.run(10)
    fleet.run(40, states=everyone("down*"), reporting=set())
    fleet.run(5, states={"n1": "down*"}, reporting=set(FLEET) - {"n1"})
    fleet.run(5, reporting=set(FLEET) - {"n1"})
    fleet.run(60)
    assert fleet.intents == []
    assert not any(r.lost for r in fleet.sim.state.nodes.values())
    assert any("view is not whole" in n for n in fleet.notes), fleet.notes  # said once, when it happened
    assert sum("view is not whole" in n for n in fleet.notes) == 1


def test_silence_counts_from_when_contact_came_back() -> None:
    # A node that really died during the partition is found lost, agent_silence_s after the mend, not at once.
    fleet = Fleet()
    fleet.run(10)
    fleet.run(40, states=everyone("down*"), reporting=set())
    mended = fleet.sim.now
    alive = set(FLEET) - {"n3"}
    while not fleet.intents:
        fleet.run(1, states={"n3": "down*"}, reporting=alive)
        assert fleet.sim.now - mended < 60, "never found lost"
    assert ("drain", "n3") in fleet.intents
    assert fleet.sim.now - mended > fleet.sim.config.agent_silence_s
    assert fleet.sim.node("n3").reason == "lost: Slurm reports it down*, its agent is silent"


def test_one_silent_node_in_a_fleet_that_reports_is_lost() -> None:
    fleet = Fleet()
    fleet.run(10)
    fleet.run(fleet.sim.config.agent_silence_s + 2, states={"n2": "down*"}, reporting=set(FLEET) - {"n2"})
    assert [i for i in fleet.intents if i[0] == "drain"] == [("drain", "n2")]


def test_a_flapping_controller_link_takes_nothing_out() -> None:
    # The leader's link up 5 s, down 5 s, for a minute: the agents' reports and Slurm's pings come and go together.
    # n1's heartbeat gets through only every other up phase, so it is silent 15 s at a time, past this config's
    # agent_silence_s (8 s), and down* in every down phase: counted from before the flaps, it would be lost.
    config = make_config().model_copy(update={"blind_after_s": 4.0, "agent_silence_s": 8.0})
    fleet = Fleet(Sim(config))
    fleet.run(10)
    for flap in range(6):
        fleet.run(5, states=everyone("idle*"), reporting=set())
        fleet.run(5, reporting=set(FLEET) - ({"n1"} if flap % 2 else set()))
    fleet.run(30)
    assert fleet.intents == []


def test_a_scheduler_the_leader_could_not_read_counts_from_its_next_read() -> None:
    # slurmctld unreachable for 40 s (no polls at all), then read again with n4 down*: silence counts from the read.
    fleet = Fleet()
    fleet.run(10)
    fleet.sim.advance(40)  # no poll: the reads failed
    fleet.run(fleet.sim.config.agent_silence_s - 2, states={"n4": "down*"}, reporting=set(FLEET) - {"n4"})
    assert fleet.intents == []
    fleet.run(4, states={"n4": "down*"}, reporting=set(FLEET) - {"n4"})
    assert ("drain", "n4") in fleet.intents


def test_more_nodes_lost_at_once_than_the_breaker_allows_are_the_observers_partition() -> None:
    fleet = Fleet(Sim(make_config(breaker_max_nodes=2)))
    fleet.run(10)
    silent = {"n1", "n2", "n3"}  # 4 of 7 still heard: the view is whole, but 3 at once is more than the breaker's 2
    fleet.run(fleet.sim.config.agent_silence_s + 5, states=dict.fromkeys(silent, "down*"),
              reporting=set(FLEET) - silent)  # fmt: skip
    assert fleet.intents == []
    held = [n for n in fleet.notes if "not found lost" in n]
    assert len(held) == 3 and all("more than the breaker allows (2)" in n for n in held), fleet.notes


def test_a_mass_verdict_counts_nodes_whose_silence_began_a_few_seconds_apart() -> None:
    # The agents' heartbeats are spread over seconds: a partition's nodes cross agent_silence_s in different polls.
    fleet = Fleet(Sim(make_config(breaker_max_nodes=2)))
    fleet.run(10)
    fleet.run(1, reporting=set(FLEET) - {"n1"})
    fleet.run(1, reporting=set(FLEET) - {"n1", "n2"})
    silent = {"n1", "n2", "n3"}
    fleet.run(fleet.sim.config.agent_silence_s + 5, states=dict.fromkeys(silent, "down*"),
              reporting=set(FLEET) - silent)  # fmt: skip
    assert fleet.intents == []


def domains_config(**safety: Any) -> Any:
    config = make_config(**safety)
    return config.model_copy(update={"failure_domains": {"r1": ["n1", "n2"], "r2": ["n3", "n4"], "r3": ["n5", "n6"]}})


def test_a_failure_domain_silent_as_a_whole_is_not_one_nodes_loss() -> None:
    fleet = Fleet(Sim(domains_config()))
    fleet.run(10)
    rack = {"n1", "n2"}  # a leaf cut off with its nodes: both silent and down*, the rest of the fleet reports
    fleet.run(fleet.sim.config.agent_silence_s + 5, states=dict.fromkeys(rack, "down*"), reporting=set(FLEET) - rack)
    assert fleet.intents == []
    assert any("failure domain r1 is silent too" in n for n in fleet.notes), fleet.notes
    fleet.run(5, states={"n1": "down*"}, reporting=set(FLEET) - {"n1"})  # n2 heard again: n1 is alone now
    fleet.run(fleet.sim.config.agent_silence_s + 2, states={"n1": "down*"}, reporting=set(FLEET) - {"n1"})
    assert [i for i in fleet.intents if i[0] == "drain"] == [("drain", "n1")]


# --- the pure pieces -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("state", "answers"),
    [("idle", True), ("allocated", True), ("drained", True), ("mixed+drain", True), ("idle*", False),
     ("down", False), ("down*", False), ("", False)],
)  # fmt: skip
def test_responding(state: str, answers: bool) -> None:
    assert responding(state) is answers


def test_contact_is_whole_only_above_the_quorum_and_since_when_it_became_whole() -> None:
    contact = Contact()
    nodes = [Observation(f"n{i}", "idle", 100.0) for i in range(4)]
    observe(contact, nodes, 100.0, 100.0, window_s=8, quorum=0.5, poll_gap_s=5)
    assert contact.sound_since(0.0) == 100.0
    observe(contact, nodes, 101.0, 101.0, window_s=8, quorum=0.5, poll_gap_s=5)
    assert contact.sound_since(0.0) == 100.0  # still the time it became whole
    half = [Observation(n.name, "idle*" if i < 2 else "idle", n.heard_at) for i, n in enumerate(nodes)]
    observe(contact, half, 102.0, 102.0, window_s=8, quorum=0.5, poll_gap_s=5)
    assert contact.sound_since(0.0) is None  # 2 of 4 responding is not more than half
    observe(contact, nodes, 103.0, 103.0, window_s=8, quorum=0.5, poll_gap_s=5)
    assert contact.sound_since(0.0) == 103.0 and contact.sound_since(110.0) == 110.0
    observe(contact, nodes, 120.0, 120.0, window_s=8, quorum=0.5, poll_gap_s=5)
    assert contact.sound_since(0.0) is None  # every agent last heard at 100: over the window


def test_domain_and_mass_rules() -> None:
    domains = {"n1": "r1", "n2": "r1", "n3": "r2"}
    members = {"r1": ["n1", "n2"], "r2": ["n3"]}
    assert domain_silent("n1", domains, members, {"n1": False, "n2": True, "n3": True}, 0.5) is None
    assert "r1 is silent too" in (domain_silent("n1", domains, members, {"n1": False, "n2": False}, 0.5) or "")
    assert domain_silent("n3", domains, members, {"n3": False}, 0.5) is None  # alone in its domain: no peers
    assert domain_silent("n9", domains, members, {}, 0.5) is None  # in no domain
    assert mass_verdict({"p": ["a", "b"]}, {"p": 2}) == {}
    assert set(mass_verdict({"p": ["a", "b", "c"], "q": ["d"]}, {"p": 2, "q": 1})) == {"a", "b", "c"}


def test_controller_status_shows_the_judgement_and_the_nodes_held_back(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from ha_ops.cli import controller as cli

    fleet = Fleet(Sim(domains_config()))
    fleet.run(10)
    rack = {"n1", "n2"}
    fleet.run(fleet.sim.config.agent_silence_s + 5, states=dict.fromkeys(rack, "down*"), reporting=set(FLEET) - rack)
    state = fleet.sim.state
    described = {"id": "c1", "leader": True, "leader_name": "c1", "state": state.model_dump(mode="json"),
                 "observers": state.contact.summary(state.leading_since)}  # fmt: skip
    monkeypatch.setattr(cli, "call", lambda url, files=None: described)
    assert run_main(monkeypatch, "controller", "status", "--url", "http://c1:8800") == 0
    said = capsys.readouterr().out.replace("\n", " ")
    assert "view of the fleet: whole: silence counts" in said
    assert "held back: n1: its failure domain r1 is silent too (0 of 1 other node(s) heard)" in " ".join(said.split())
