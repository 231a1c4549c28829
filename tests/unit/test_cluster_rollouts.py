"""Driver rollouts through a cluster's rollout host (ha_ops.cluster.rollouts): the command lines it runs, the fleet it
reads back, what it refuses, and that a rollout fault's probes never judge the rollout before it."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

import pytest

from ha_ops.cluster.gpu import CapabilityMissing
from ha_ops.cluster.rollouts import DriverRollouts, RolloutSite, fleet_as_before
from ha_ops.errors import SpecError
from ha_ops.spec import compute_layout, load_spec
from ha_ops.util.proc import CommandResult

SPEC = load_spec(Path(__file__).resolve().parents[2] / "examples" / "lab.yaml")


class Node:
    def __init__(self, cluster: Cluster, name: str) -> None:
        self.cluster, self.name = cluster, name

    def run(self, argv: Sequence[str], *, timeout: float = 30.0, check: bool = True,
            input: str | None = None) -> CommandResult:  # fmt: skip
        self.cluster.ran.append((self.name, list(argv)))
        return self.cluster.answer(self.name, list(argv))


class Cluster:
    """GPU nodes with a role fact and nvidia-smi each, and a rollout host whose `rollout status` is `state`."""

    def __init__(self, active: dict[str, str | None], state: dict | None = None) -> None:
        self.name, self.spec, self.layout = "t", SPEC, compute_layout(SPEC)
        self.active, self.state = active, state
        self.reported = {n: [v] * 8 if v else [] for n, v in active.items()}
        self.ran: list[tuple[str, list[str]]] = []

    def hosts(self) -> list[str]:
        return [n.name for n in self.layout.nodes]

    def node(self, name: str) -> Node:
        return Node(self, name)

    def answer(self, host: str, argv: list[str]) -> CommandResult:
        if argv[0] == "cat":
            version = self.active.get(host)
            return CommandResult(
                argv, 0 if version else 1, json.dumps({"active_version": version}) if version else "", ""
            )
        if argv[:2] == ["sh", "-c"]:
            return CommandResult(argv, 0, "".join(f"{v}\n" for v in self.reported[host]), "")
        if "status" in argv:
            if self.state is None:
                return CommandResult(argv, 1, "", "error: no rollout in /var/lib/ha-ops/rollout (start one ...)")
            return CommandResult(argv, 0, json.dumps({"state": self.state}), "")
        return CommandResult(argv, 0, json.dumps({"phase": "halted", "reason": "canary: 1 of 1 failed"}), "")


GPUS = [n.name for n in compute_layout(SPEC).nodes_with_role("gpu")]
SITE = RolloutSite(host="ctl1", driver_args=["--spec", "/etc/ha-ops/c.yaml"], fact_file="/f/{host}.fact")


def test_the_rollout_runs_on_the_rollout_host_from_the_fleets_one_driver() -> None:
    cluster = Cluster(dict.fromkeys(GPUS, "550.90.07"))
    rollouts = DriverRollouts(cluster, SITE)  # type: ignore[arg-type]
    assert rollouts.start("575.51.02", "1,rest", 600) == "rollout to 575.51.02: halted (canary: 1 of 1 failed)"
    host, argv = cluster.ran[-1]
    assert host == "ctl1" and argv == [
        "ha-ops", "rollout", "driver", "--to", "575.51.02", "--from-version", "550.90.07", "--spec",
        "/etc/ha-ops/c.yaml", "--state-dir", "/var/lib/ha-ops/rollout", "--soak", "0", "--waves", "1,rest", "--json",
    ]  # fmt: skip
    assert ("gpu1", ["cat", "/f/gpu1.fact"]) in cluster.ran  # {host} is each node's name


@pytest.mark.parametrize(
    ("active", "why"),
    [({"gpu1": None}, "gpu1 run(s) no driver from the gpu_driver role"), ({"gpu1": "570.86.15"}, "different drivers")],
)
def test_a_fleet_with_no_or_mixed_drivers_is_refused_before_any_rollout(active: dict, why: str) -> None:
    cluster = Cluster(dict.fromkeys(GPUS, "550.90.07") | active)
    with pytest.raises(CapabilityMissing, match=re.escape(why)):
        DriverRollouts(cluster, SITE).check()  # type: ignore[arg-type]
    assert not any("driver" in argv for _, argv in cluster.ran)


def test_a_rollout_faults_probes_never_judge_the_rollout_before_it() -> None:
    before = {"id": "old", "phase": "halted", "nodes": {}}
    cluster = Cluster(dict.fromkeys(GPUS, "550.90.07"), before)
    rollouts = DriverRollouts(cluster, SITE)  # type: ignore[arg-type]
    assert rollouts.phase() == "halted" and rollouts.phase("old") == "none"
    assert rollouts.fleet_as_before() and not rollouts.fleet_as_before("old")
    cluster.state = {"id": "new", "phase": "running", "nodes": {}}
    assert rollouts.phase("old") == "running" and not rollouts.fleet_as_before("old")  # judged once it has ended
    cluster.state = {"id": "new", "phase": "halted", "nodes": {g: {"before": {"active_version": "550.90.07"}}
                                                               for g in GPUS}}  # fmt: skip
    assert rollouts.fleet_as_before("old")
    cluster.state = None
    assert rollouts.phase() == "none" and rollouts.phase("") == "none"


def test_the_fleet_is_as_before_only_with_every_node_on_its_old_driver_and_every_gpu_agreeing() -> None:
    assert fleet_as_before({"a": "1"}, {"a": "1"}, {"a": ["1"]})
    assert fleet_as_before({}, {"a": "1"}, {"a": ["1"]})  # the rollout never read it: the fact decides
    assert not fleet_as_before({"a": "1"}, {"a": "2"}, {"a": ["2"]})  # moved on
    assert not fleet_as_before({"a": "1"}, {"a": "1"}, {"a": ["1", "2"]})  # half-way
    assert not fleet_as_before({"a": "1"}, {"a": "1"}, {"a": []})  # GPUs lost
    assert not fleet_as_before({}, {"a": None}, {"a": []})  # no driver from the role


def test_a_bad_rollout_site_names_the_field() -> None:
    with pytest.raises(SpecError, match=r"ha_ops_rollout\.command"):
        RolloutSite.parse({"host": "ctl1", "command": []}, "hosts.yml")
    with pytest.raises(SpecError, match=r"ha_ops_rollout\.host"):
        RolloutSite.parse({"state_dir": "/x"}, "hosts.yml")


def test_a_dry_run_records_the_rollout_commands_and_runs_none() -> None:
    from ha_ops.chaos.dryrun import PlanningRollouts, _Recorder

    cluster = Cluster(dict.fromkeys(GPUS, "550.90.07"))
    recorder = _Recorder()
    planning = PlanningRollouts(DriverRollouts(cluster, SITE), recorder)  # type: ignore[arg-type]
    planning.prepare("575.51.02", True, "550.90.07")  # nothing to prepare on a real cluster: no line
    assert planning.start("575.51.02", "1,rest", 600) == "(dry run) rollout to 575.51.02"
    planning.end()
    planning.finish()
    lines = [(p.host, p.line) for p in recorder.planned]
    assert lines == [
        ("ctl1", "ha-ops rollout driver --to 575.51.02 --from-version 550.90.07 --spec /etc/ha-ops/c.yaml "
                 "--state-dir /var/lib/ha-ops/rollout --soak 0 --waves 1,rest --json"),
        ("ctl1", "if the rollout is still open: ha-ops rollout abort --rollback --state-dir /var/lib/ha-ops/rollout "
                 "--json"),
    ]  # fmt: skip
    assert not any("driver" in argv or "abort" in argv for _, argv in cluster.ran)  # read, never run
    with pytest.raises(AttributeError):
        planning.argv  # noqa: B018  (only reads pass through)
