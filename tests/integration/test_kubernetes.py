"""Kubernetes in the lab: a real etcd, kube-apiserver (TLS from the lab CA, RBAC), controller manager and scheduler
on loopback, with KWOK standing in for the GPU nodes' kubelets. Workloads are scheduled onto the spec's GPU nodes by
their GPUs and failure domains, and the ReplicaSet recovers pods from a lost node."""

from __future__ import annotations

import http.client
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from ha_ops.iac.engine import PulumiEngine
from ha_ops.lab import kubernetes
from ha_ops.lab.cluster import Lab
from ha_ops.lab.kubeapi import KubeClient, KubeError
from ha_ops.lab.paths import LabPaths
from ha_ops.spec.model import Kubernetes
from ha_ops.util.wait import wait_for
from tests.labkit import REPO, lab_spec, running_lab

pytestmark = [pytest.mark.lab, pytest.mark.tools]  # the lab, and the Go-built tools

LAB_NAME = "itk8s"  # the lab this module builds: the suite checks nothing of it is left (conftest)
IMAGE = "registry.invalid/ha-ops/trainer@sha256:" + "0" * 64  # KWOK never pulls it


@pytest.fixture(scope="module")
def klab() -> Iterator[Lab]:
    spec = lab_spec(LAB_NAME).model_copy(update={"kubernetes": Kubernetes()})
    started = time.monotonic()
    with running_lab(Lab(spec, LabPaths.for_lab(LAB_NAME))) as lab:
        print(f"\nlab with Kubernetes up in {time.monotonic() - started:.0f} s")
        yield lab


def test_the_gpu_nodes_are_ready_nodes_with_their_gpus_and_failure_domains(klab: Lab) -> None:
    api = kubernetes.client(klab.ctx)
    nodes = {n["metadata"]["name"]: n for n in api.list("Node", labelSelector="type=kwok")}
    layout = {n.name: n for n in klab.ctx.layout.nodes_with_role("gpu")}
    assert set(nodes) == set(layout)
    assert kubernetes.ready_nodes(api) == set(layout)
    domains = {d.name: d for d in klab.spec.failure_domains}
    for name, node in nodes.items():
        domain = domains[layout[name].domain]
        labels = node["metadata"]["labels"]
        assert (labels[kubernetes.ZONE_LABEL], labels[kubernetes.RACK_LABEL]) == (domain.zone, domain.rack)
        assert node["status"]["allocatable"][kubernetes.GPU_RESOURCE] == str(layout[name].gpus)
    assert klab.status()["kubernetes"]["api_server"] == kubernetes.api_server(klab.ctx)


def test_tls_and_rbac_are_enforced(klab: Lab) -> None:
    ctx = klab.ctx
    # The scheduler's identity may bind pods but not create namespaces: RBAC, not just authentication.
    scheduler = KubeClient(kubernetes.folder(ctx) / "scheduler.kubeconfig")
    with pytest.raises(KubeError) as denied:
        scheduler.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "not-allowed"}})
    assert denied.value.status == 403
    assert scheduler.list("Node")  # what its role allows
    # No client certificate: refused (anonymous auth is off).
    bare = ssl.create_default_context(cafile=str(kubernetes.folder(ctx) / "pki" / "ca.crt"))
    assert klab.spec.kubernetes is not None
    conn = http.client.HTTPSConnection("127.0.0.1", klab.spec.kubernetes.api_port, context=bare, timeout=10)
    conn.request("GET", "/api/v1/nodes")
    assert conn.getresponse().status == 401
    conn.close()


def deployment(replicas: int) -> dict:
    labels = {"app": "trainer"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "trainer", "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {"nvidia.com/gpu.present": "true"},
                    "topologySpreadConstraints": [
                        {
                            "maxSkew": 1,
                            "topologyKey": "kubernetes.io/hostname",
                            "whenUnsatisfiable": "DoNotSchedule",
                            "labelSelector": {"matchLabels": labels},
                        },
                        {
                            "maxSkew": 1,
                            "topologyKey": kubernetes.ZONE_LABEL,
                            "whenUnsatisfiable": "ScheduleAnyway",
                            "labelSelector": {"matchLabels": labels},
                        },
                    ],
                    "containers": [
                        {"name": "train", "image": IMAGE, "resources": {"limits": {kubernetes.GPU_RESOURCE: "4"}}}
                    ],
                },
            },
        },
    }


def running_pods(api: KubeClient) -> dict[str, str]:
    """Running pods of the deployment (not being deleted) -> their node."""
    pods = api.list("Pod", "default", labelSelector="app=trainer")
    return {p["metadata"]["name"]: p["spec"].get("nodeName", "") for p in pods
            if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")}  # fmt: skip


def _when(pods: dict[str, str], count: int, avoiding: str = "") -> dict[str, str] | None:
    return pods if len(pods) == count and avoiding not in pods.values() else None


def test_a_deployment_spreads_over_gpu_nodes_and_recovers_from_a_lost_node(klab: Lab) -> None:
    api = kubernetes.client(klab.ctx)
    api.apply(deployment(3))
    pods = wait_for("3 trainer pods Running", lambda: _when(running_pods(api), 3), timeout=120, interval=0.5)
    assert len(set(pods.values())) == 3, pods  # one per node: the spread constraint
    gpu_nodes = {n.name for n in klab.ctx.layout.nodes_with_role("gpu")}
    assert set(pods.values()) <= gpu_nodes
    lost_pod, lost_node = sorted(pods.items())[0]
    started = time.monotonic()
    assert api.delete("Node", lost_node)  # the node is gone: its kubelet (KWOK) no longer reports it
    recovered = wait_for(
        "3 trainer pods Running again, none on the lost node",
        lambda: _when(running_pods(api), 3, avoiding=lost_node),
        timeout=180,
        interval=1.0,
    )
    print(f"\npods recovered from the lost node {lost_node} in {time.monotonic() - started:.0f} s")
    assert lost_pod not in recovered
    assert len(set(recovered.values())) == 3 and set(recovered.values()) <= gpu_nodes - {lost_node}
    api.delete("Deployment", "trainer", "default")


def test_the_k8s_layer_stack_deploys_ha_ops_onto_the_lab_kubernetes(klab: Lab, tmp_path: Path) -> None:
    """infra/k8s through the built CLI and the built pulumi-kubernetes provider, against the lab's API server: the
    agent runs on every GPU node, the controller's 2 replicas on different nodes; destroy removes them."""
    images = {"agent": f"registry.invalid/ha-ops/agent@sha256:{'1' * 64}",
              "controller": f"registry.invalid/ha-ops/controller@sha256:{'2' * 64}"}  # fmt: skip
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump(klab.spec.model_dump(mode="json") | {"images": images}, sort_keys=False))
    engine = PulumiEngine(tmp_path / "state")
    program = REPO / "infra" / "k8s"
    engine.select_stack(program, "lab")
    engine.set_config(program, "lab", {"spec": str(spec_file), "kubeconfig": str(kubernetes.kubeconfig_path(klab.ctx))})
    api = kubernetes.client(klab.ctx)
    try:
        update = engine.up(program, "lab")
        assert update["result"] == "succeeded", update
        outputs = engine.outputs(program, "lab")
        namespace = outputs["namespace"]

        def pods(app: str) -> dict[str, str]:
            found = api.list("Pod", namespace, labelSelector=f"app.kubernetes.io/name={app}")
            return {p["metadata"]["name"]: p["spec"].get("nodeName", "") for p in found
                    if p["status"].get("phase") == "Running"}  # fmt: skip

        gpu_nodes = {n["metadata"]["name"] for n in api.list("Node", labelSelector="type=kwok")}  # one was lost above
        agents = wait_for("an agent Running on every GPU node",
                          lambda: (p := pods("ha-ops-agent")) and set(p.values()) >= gpu_nodes and p,
                          timeout=120, interval=1.0)  # fmt: skip
        assert set(agents.values()) == gpu_nodes
        controllers = wait_for("2 controllers Running", lambda: len(p := pods("ha-ops-controller")) == 2 and p,
                               timeout=120, interval=1.0)  # fmt: skip
        assert len(set(controllers.values())) == 2  # anti-affinity: never both on one node
        assert {pc["metadata"]["name"] for pc in api.request("GET", "/apis/scheduling.k8s.io/v1/priorityclasses")[
            "items"]} >= {"critical", "normal", "preemptible-training"}  # fmt: skip
    finally:
        gone = engine.destroy(program, "lab")
    assert gone["result"] == "succeeded", gone
    assert (
        api.get("Namespace", namespace) is None or api.get("Namespace", namespace)["status"]["phase"] == "Terminating"
    )
