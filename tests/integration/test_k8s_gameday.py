"""The game day on Kubernetes (issue 19, line 4): chaos/gamedays/kubernetes.yaml, the same plan format and experiments
as on Slurm, run through the cluster port against the lab of examples/lab-k8s.yaml. Its remediation controllers are
real processes on ctl1 and ctl2 acting on the lab's real API server (cordon, taint, condition, evictions, spares;
Lease and state in the API); KWOK plays the GPU nodes' kubelets, and a node the lab's BMC powers off leaves KWOK's care,
so Kubernetes' own node lifecycle controller finds it NotReady."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from lightkube import Client
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Node

from ha_ops.lab import kubernetes
from ha_ops.lab.cluster import Lab
from ha_ops.lab.paths import LabPaths
from ha_ops.remediation.audit import AuditLog
from ha_ops.remediation.k8s_documents import ConfigMapDocuments
from ha_ops.schedulers.kubernetes import CONDITION, TAINT_KEY, KubernetesOptions, KubernetesScheduler
from ha_ops.spec import load_spec
from ha_ops.util.wait import wait_for
from tests.labkit import REPO, running_lab

pytestmark = [pytest.mark.lab, pytest.mark.tools]  # the lab, and the Go-built tools

LAB_NAME = "itk8sgd"  # the lab this module builds: the suite checks nothing of it is left (conftest)
PLAN = REPO / "chaos" / "gamedays" / "kubernetes.yaml"


@pytest.fixture(scope="module")
def klab() -> Iterator[Lab]:
    spec = load_spec(REPO / "examples" / "lab-k8s.yaml").model_copy(update={"name": LAB_NAME})
    started = time.monotonic()
    with running_lab(Lab(spec, LabPaths.for_lab(LAB_NAME))) as lab:
        print(f"\nlab with Kubernetes and its controllers on it up in {time.monotonic() - started:.0f} s")
        yield lab


@pytest.fixture(scope="module")
def api(klab: Lab) -> Iterator[Client]:
    with kubernetes.client(klab.ctx) as client:
        yield client


def test_the_kubernetes_game_day_takes_out_a_gpu_fault_and_a_lost_node_and_survives_a_leader_kill(
    klab: Lab, api: Client, tmp_path: Path
) -> None:
    """`ha-ops gameday run` as a user runs it: every fault detected and recovered, measured; the GPU node's taint
    and condition written, the lost node found NotReady by Kubernetes and tainted down, the Lease passed on, and
    each action audited once."""
    # The lab's controllers lead through the API's Lease (one claims it a moment after the lab is up).
    lease = wait_for("a controller holding the Lease",
                     lambda: api.get(Lease, "ha-ops-controller", namespace=kubernetes.CONTROLLER_NAMESPACE),
                     timeout=15, interval=0.2)  # fmt: skip
    assert lease.spec.holderIdentity in ("ctl1", "ctl2")
    transitions = lease.spec.leaseTransitions or 0
    cmd = [sys.executable, "-m", "ha_ops", "gameday", "run", str(PLAN), "--lab", LAB_NAME, "--report-dir",
           str(tmp_path), "--json"]  # fmt: skip
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    path = tmp_path / "latest" / "gameday.json"
    report = json.loads(path.read_text()) if path.exists() else {}
    for fault in report.get("faults", []):
        print(f"{fault['name']}: {fault['verdict']} {fault.get('why') or ''}, detected after "
              f"{fault['time_to_detect_s']} s, recovered after {fault['time_to_recover_s']} s")  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert report["passed"] is True
    assert [f["name"] for f in report["faults"]] == ["GPU XID 79", "node loss", "remediation controller leader kill"]
    assert all(f["verdict"] == "passed" for f in report["faults"])

    # What the controllers did, from their audit log in the API.
    documents = ConfigMapDocuments(api, kubernetes.CONTROLLER_NAMESPACE, "ha-ops-controller")
    audit = [json.loads(line) for line in AuditLog(documents).text().splitlines()]
    drains = {e["node"]: e for e in audit if e["what"] == "drain"}
    assert set(drains) == {"gpu3", "gpu2"}, audit
    assert "XID 79" in drains["gpu3"]["why"] and drains["gpu3"]["after"].startswith("IDLE+DRAIN")
    # The lost node: NotReady in Kubernetes (the `*`), its agent silent, then tainted down (NoExecute) by ha-ops.
    assert drains["gpu2"]["why"] == "lost: Kubernetes reports it idle*, its agent is silent", drains["gpu2"]
    assert drains["gpu2"]["after"].startswith("DOWN*+DRAIN"), drains["gpu2"]
    assert [e["what"] for e in audit if e["node"] == "gpu2"][-1] == "resume"  # power-cycled, validated, returned
    intents = [e["intent"] for e in audit if e.get("intent")]
    assert len(intents) == len(set(intents)), audit  # no action done twice, across the leader's death too
    after = api.get(Lease, "ha-ops-controller", namespace=kubernetes.CONTROLLER_NAMESPACE)
    assert (after.spec.leaseTransitions or 0) > transitions
    # Every GPU node back: Ready, uncordoned, no ha-ops taint, GpuHealthy True.
    scheduler = KubernetesScheduler(api, KubernetesOptions(pool="gpu"))

    def whole() -> dict[str, str] | None:
        states = {n: s for n, (s, _) in scheduler.node_states_and_reasons().items()}
        return states if set(states.values()) == {"idle"} else None

    states = wait_for("every GPU node idle in Kubernetes", whole, timeout=30, interval=0.5)
    assert set(states) == {n.name for n in klab.ctx.layout.nodes_with_role("gpu")}
    for name in states:
        node = api.get(Node, name).to_dict()
        conditions = {c["type"]: c["status"] for c in node["status"]["conditions"]}
        taints = [t["key"] for t in node["spec"].get("taints") or []]
        assert conditions["Ready"] == "True" and conditions.get(CONDITION, "True") == "True", (name, conditions)
        assert TAINT_KEY not in taints and not node["spec"].get("unschedulable"), (name, node["spec"])
