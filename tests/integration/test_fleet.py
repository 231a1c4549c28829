"""Fleet memory in the lab (issue 22, lines 1 and 2): with the lemon rule and the tiers' publication on (the lab's
usual controller config has both off, since other tests fault the same nodes many times), gpu2's incidents move its
Slurm Weight and feature, jobs are placed by them, and its third incident holds it for replacement as a lemon."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest
import yaml

from ha_ops.lab.cluster import Lab
from ha_ops.lab.controllers import config_path, state_dir
from ha_ops.remediation.store import read_state
from ha_ops.schedulers.slurm import TIER_WEIGHTS, Slurm, feature_list
from ha_ops.util.wait import wait_for
from tests.labkit import call_controller, controller_nodes, leader, reset_remediation

pytestmark = pytest.mark.lab

GPU_NODES = ("gpu1", "gpu2", "gpu3")  # the main partition; gpu4 is the spare


@pytest.fixture(scope="module")
def fleet_rules(lab: Lab) -> Iterator[Slurm]:
    """Both controllers with the lemon rule and tier publication on, and no flap climbing between the incidents (a
    one-second flap window, no probation): each incident is an ordinary one, so the lemon rule alone holds gpu2."""
    paths = [config_path(lab.ctx, n) for n in controller_nodes(lab)]
    saved = {p: p.read_text() for p in paths}
    for p in paths:
        config = yaml.safe_load(saved[p])
        config["lemon"] = {"enabled": True, "incidents": 3}
        config["fleet"] = {"publish_tiers": True}
        config["ladder"] = {**config["ladder"], "probation_s": 0.0, "flap_window_s": 1.0}
        p.write_text(yaml.safe_dump(config, sort_keys=False))
    slurm = Slurm(lab.transport("gpu1"))
    try:
        reset_remediation(lab)
        yield slurm
    finally:
        for p, text in saved.items():
            p.write_text(text)
        reset_remediation(lab)
        for node in (*GPU_NODES, "gpu4"):  # back to slurm.conf's values, which the next modules expect
            slurm.set_reliability(node, "reliable")


def phase(lab: Lab, node: str) -> str:
    return read_state(state_dir(lab.ctx) / "state.json").nodes[node].phase.value


def weight_and_reliable(lab: Lab, node: str) -> tuple[int, bool]:
    out = lab.node("gpu1").run(["scontrol", "show", "node", node]).stdout
    fields = dict(word.split("=", 1) for word in out.split() if "=" in word)
    return int(fields["Weight"]), "reliable" in feature_list(fields.get("AvailableFeatures", ""))


def incident(lab: Lab, slurm: Slurm, node: str) -> None:
    """A double-bit ECC error: drained, its GPU reset, validated and returned (or held, once a lemon)."""
    lab.node(node).gpus().double_bit_ecc(4)
    wait_for(f"{node} drained", lambda: slurm.node(node).drained, timeout=10, interval=0.05)
    lab.node(node).gpus().clear()
    wait_for(f"{node}'s episode over", lambda: episode_over(lab, node), timeout=40, interval=0.2)


def episode_over(lab: Lab, node: str) -> bool:
    """Back in service, or held for replacement as a lemon (awaiting_repair is also the phase a repair runs in)."""
    record = read_state(state_dir(lab.ctx) / "state.json").nodes[node]
    return record.phase.value in ("returned", "healthy") or record.reason.startswith("lemon:")


def placed(lab: Lab, slurm: Slurm, count: int, *extra: str, running: int) -> list[str]:
    """Submit `count` jobs, each taking a whole node's GPUs, wait until `running` of them run (Slurm starts them one
    scheduling pass after another: counting fewer read a third job pending that was about to start), and return the
    node each runs on ('' if pending)."""
    gpus = lab.ctx.layout.node("gpu1").gpus
    ids = []
    for i in range(count):
        argv = ["sbatch", "--parsable", f"--gres=gpu:{gpus}", "-N", "1", "-J", f"fleet-{i}", "-o", "/dev/null",
                *extra, "--wrap", "sleep 60"]  # fmt: skip
        ids.append(lab.node("gpu1").run(argv).stdout.strip().split(";")[0])
    wait_for("the jobs scheduled", lambda: all(j.state in ("RUNNING", "PENDING") for j in slurm.jobs() if j.id in ids)
             and sum(j.state == "RUNNING" for j in slurm.jobs() if j.id in ids) >= running,
             timeout=20, interval=0.2)  # fmt: skip
    nodes = {j.id: (j.nodes[0] if j.state == "RUNNING" and j.nodes else "") for j in slurm.jobs() if j.id in ids}
    lab.node("gpu1").run(["scancel", *ids], check=False)
    wait_for("the jobs gone", lambda: not [j for j in slurm.jobs() if j.id in ids and j.state != "CANCELLED"],
             timeout=20, interval=0.2)  # fmt: skip
    return [nodes.get(i, "") for i in ids]


def test_incidents_move_placement_and_the_third_makes_a_lemon(lab: Lab, fleet_rules: Slurm) -> None:
    slurm = fleet_rules
    assert weight_and_reliable(lab, "gpu2") == (TIER_WEIGHTS["reliable"], True)  # slurm.conf's, before any incident

    incident(lab, slurm, "gpu2")
    wait_for("gpu2 published standard", lambda: weight_and_reliable(lab, "gpu2") == (TIER_WEIGHTS["standard"], False),
             timeout=15, interval=0.2)  # fmt: skip
    incident(lab, slurm, "gpu2")
    wait_for("gpu2 published suspect", lambda: weight_and_reliable(lab, "gpu2") == (TIER_WEIGHTS["suspect"], False),
             timeout=15, interval=0.2)  # fmt: skip
    assert phase(lab, "gpu2") in ("returned", "healthy") and not slurm.node("gpu2").drained
    assert weight_and_reliable(lab, "gpu1") == weight_and_reliable(lab, "gpu3") == (1, True)

    # --constraint=reliable: two whole-node jobs run on gpu1 and gpu3; more wait rather than land on gpu2.
    constrained = placed(lab, slurm, 3, "--constraint=reliable", running=2)
    assert sorted(n for n in constrained if n) == ["gpu1", "gpu3"] and "gpu2" not in constrained, constrained
    # Unconstrained: the stable nodes are taken first (Weight); gpu2 only gets the third job.
    free = placed(lab, slurm, 3, running=3)
    assert sorted(free[:2]) == ["gpu1", "gpu3"] and free[2] == "gpu2", free

    incident(lab, slurm, "gpu2")
    wait_for("gpu2 held for replacement", lambda: phase(lab, "gpu2") == "awaiting_repair", timeout=20, interval=0.2)
    record = read_state(state_dir(lab.ctx) / "state.json").nodes["gpu2"]
    assert record.reason.startswith("lemon: 3 incidents in 30 days"), record.reason
    assert slurm.node("gpu2").drained and "gpu4" in slurm.partition_nodes("gpu")  # the spare covers it

    ctl = leader(lab)
    assert ctl is not None
    status, answer = call_controller(lab, ctl, "/v1/state")
    assert status == 200 and answer["state"]["nodes"]["gpu2"]["reason"].startswith("lemon:")
    config = config_path(lab.ctx, ctl)
    shown = subprocess.run([sys.executable, "-m", "ha_ops", "fleet", "history", "gpu2", "--config", str(config),
                            "--json"], capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    gpu2 = json.loads(shown.stdout)["nodes"]["gpu2"]
    assert gpu2["lemon"]["held"] and gpu2["lemon"]["reason"].startswith("lemon: 3 incidents")
    assert len(gpu2["incidents"]) == 3 and gpu2["incidents"][-1]["outcome"] == "held for replacement (lemon)"
    assert gpu2["tier"] == "suspect"
