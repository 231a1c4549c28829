"""Kubernetes in the lab: a real etcd, kube-apiserver (TLS from the lab CA, RBAC), controller manager and scheduler
on loopback, with KWOK standing in for the GPU nodes' kubelets. Workloads are scheduled onto the spec's GPU nodes by
their GPUs and failure domains, and the ReplicaSet recovers pods from a lost node."""

from __future__ import annotations

import http.client
import ssl
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from lightkube import ApiError, Client, KubeConfig, codecs
from lightkube.models.authentication_v1 import BoundObjectReference, TokenRequestSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.coordination_v1 import Lease as LeaseObject
from lightkube.resources.core_v1 import Namespace, Node, Pod, ServiceAccount
from lightkube.resources.scheduling_v1 import PriorityClass
from lightkube.types import PatchType

from ha_ops.iac.engine import PulumiEngine
from ha_ops.lab import kubernetes
from ha_ops.lab.cluster import Lab
from ha_ops.lab.paths import LabPaths
from ha_ops.remediation.executor import Executor
from ha_ops.remediation.k8s_lease import KubernetesLease
from ha_ops.remediation.lease import LeaseLost
from ha_ops.remediation.model import Intent
from ha_ops.rollout.executor import DRAIN_REASON_PREFIX
from ha_ops.rollout.scheduler import RolloutScheduler
from ha_ops.schedulers.kubernetes import (
    CONDITION,
    DRAIN_POLICY_ANNOTATION,
    SPARE_TAINT_KEY,
    TAINT_KEY,
    KubernetesError,
    KubernetesOptions,
    KubernetesScheduler,
    UnknownNode,
    set_gpu_condition,
)
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


@pytest.fixture(scope="module")
def api(klab: Lab) -> Iterator[Client]:
    with kubernetes.client(klab.ctx) as client:
        yield client


def test_the_gpu_nodes_are_ready_nodes_with_their_gpus_and_failure_domains(klab: Lab, api: Client) -> None:
    nodes = {n["metadata"]["name"]: n for n in (o.to_dict() for o in api.list(Node, labels={"type": "kwok"}))}
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


def test_tls_and_rbac_are_enforced(klab: Lab, api: Client) -> None:
    ctx = klab.ctx
    # The scheduler's identity may bind pods but not create namespaces: RBAC, not just authentication.
    with kubernetes.client(ctx, identity="scheduler") as scheduler:
        with pytest.raises(ApiError) as denied:
            scheduler.create(Namespace(metadata=ObjectMeta(name="not-allowed")))
        assert denied.value.status.code == 403
        assert list(scheduler.list(Node))  # what its role allows
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


def running_pods(api: Client) -> dict[str, str]:
    """Running pods of the deployment (not being deleted) -> their node."""
    pods = [p.to_dict() for p in api.list(Pod, namespace="default", labels={"app": "trainer"})]
    return {p["metadata"]["name"]: p["spec"].get("nodeName", "") for p in pods
            if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")}  # fmt: skip


def _when(pods: dict[str, str], count: int, avoiding: str = "") -> dict[str, str] | None:
    return pods if len(pods) == count and avoiding not in pods.values() else None


def test_a_deployment_spreads_over_gpu_nodes_and_recovers_from_a_lost_node(klab: Lab, api: Client) -> None:
    api.apply(codecs.from_dict(deployment(3)), force=True)
    pods = wait_for("3 trainer pods Running", lambda: _when(running_pods(api), 3), timeout=120, interval=0.5)
    assert len(set(pods.values())) == 3, pods  # one per node: the spread constraint
    gpu_nodes = {n.name for n in klab.ctx.layout.nodes_with_role("gpu")}
    assert set(pods.values()) <= gpu_nodes
    lost_pod, lost_node = sorted(pods.items())[0]
    # The spare stands in for the lost node, as the controller's spare_in does (the spare taint off): without it the
    # spread constraint leaves the third pod pending, since the spare is one of the nodes it counts.
    every = [n.name for n in klab.ctx.layout.nodes_with_role("gpu")]
    scheduler = KubernetesScheduler(api, KubernetesOptions(pool="gpu"))
    scheduler.set_partition_nodes("gpu", every)
    started = time.monotonic()
    # Lost, as the controller marks it once Slurm-or-Kubernetes and the agent's silence agree: NoExecute, so the
    # taint manager evicts its pods at once instead of waiting for a node that will not confirm it (Kubernetes' own
    # pod GC, had the node object been deleted, waits 40-60 s).
    scheduler.mark_down(lost_node, "lost: not responding, its agent is silent")
    recovered = wait_for(
        "3 trainer pods Running again, none on the lost node",
        lambda: _when(running_pods(api), 3, avoiding=lost_node),
        timeout=180,
        interval=1.0,
    )
    print(f"\npods recovered from the lost node {lost_node} in {time.monotonic() - started:.0f} s")
    assert lost_pod not in recovered
    assert len(set(recovered.values())) == 3 and set(recovered.values()) <= gpu_nodes - {lost_node}
    api.delete(Deployment, "trainer", namespace="default")
    scheduler.resume(lost_node)  # repaired
    assert not scheduler.node(lost_node).drained


def test_the_k8s_layer_stack_deploys_ha_ops_onto_the_lab_kubernetes(klab: Lab, api: Client, tmp_path: Path) -> None:
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
    try:
        update = engine.up(program, "lab")
        assert update["result"] == "succeeded", update
        outputs = engine.outputs(program, "lab")
        namespace = outputs["namespace"]

        def pods(app: str) -> dict[str, str]:
            found = [p.to_dict() for p in api.list(Pod, namespace=namespace, labels={"app.kubernetes.io/name": app})]
            return {p["metadata"]["name"]: p["spec"].get("nodeName", "") for p in found
                    if p["status"].get("phase") == "Running"}  # fmt: skip

        gpu_nodes = {str(n.metadata.name) for n in api.list(Node, labels={"type": "kwok"}) if n.metadata}
        agents = wait_for("an agent Running on every GPU node",
                          lambda: (p := pods("ha-ops-agent")) and set(p.values()) >= gpu_nodes and p,
                          timeout=120, interval=1.0)  # fmt: skip
        assert set(agents.values()) == gpu_nodes
        controllers = wait_for("2 controllers Running", lambda: len(p := pods("ha-ops-controller")) == 2 and p,
                               timeout=120, interval=1.0)  # fmt: skip
        assert len(set(controllers.values())) == 2  # anti-affinity: never both on one node
        agent_may_write_only_its_own_nodes_condition(klab, api, namespace, agents)
        assert {str(pc.metadata.name) for pc in api.list(PriorityClass) if pc.metadata} >= {
            "critical", "normal", "preemptible-training"}  # fmt: skip
    finally:
        gone = engine.destroy(program, "lab")
    assert gone["result"] == "succeeded", gone
    try:
        left = api.get(Namespace, namespace)
        assert left.status is not None and left.status.phase == "Terminating"
    except ApiError as exc:
        assert exc.status.code == 404


def agent_may_write_only_its_own_nodes_condition(
    klab: Lab, api: Client, namespace: str, agents: dict[str, str]
) -> None:
    """With the token an agent pod gets (bound to the pod, so it names the pod's node), the agent writes its own
    node's GpuHealthy condition; another node's, or anything else of its own node, is refused."""
    pod_name, own = sorted(agents.items())[0]
    other = next(node for node in agents.values() if node != own)
    pod = api.get(Pod, pod_name, namespace=namespace)
    assert pod.metadata is not None
    bound = BoundObjectReference(apiVersion="v1", kind="Pod", name=pod_name, uid=pod.metadata.uid)
    request = ServiceAccount.Token(metadata=ObjectMeta(name="ha-ops-agent", namespace=namespace),
                                   spec=TokenRequestSpec(boundObjectRef=bound, expirationSeconds=600))  # fmt: skip
    answer = api.create(request, "ha-ops-agent", namespace=namespace)
    admin = yaml.safe_load(kubernetes.kubeconfig_path(klab.ctx).read_text())
    as_agent = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "agent",
        "clusters": admin["clusters"],
        "users": [{"name": "agent", "user": {"token": answer.status.token}}],
        "contexts": [{"name": "agent", "context": {"cluster": admin["clusters"][0]["name"], "user": "agent"}}],
    }
    with Client(config=KubeConfig.from_dict(as_agent), trust_env=False) as agent:  # fmt: skip
        set_gpu_condition(agent, own, "False", "GPU1 xid: XID 79 (written by the agent)")
        [mine] = [c for c in api.get(Node, own).to_dict()["status"]["conditions"] if c["type"] == CONDITION]
        assert (mine["status"], mine["message"]) == ("False", "GPU1 xid: XID 79 (written by the agent)")
        with pytest.raises(ApiError) as refused:
            set_gpu_condition(agent, other, "False", "forged")
        assert "its own node only" in (refused.value.status.message or ""), refused.value.status
        with pytest.raises(ApiError) as refused:  # the status of its own node, but not its condition
            agent.patch(Node.Status, own, {"status": {"conditions": [{"type": "Ready", "status": "False"}]}})
        assert "GpuHealthy condition only" in (refused.value.status.message or ""), refused.value.status
        with pytest.raises(ApiError) as refused:  # nor the node itself (RBAC)
            agent.patch(Node, own, {"spec": {"unschedulable": True}})
        assert refused.value.status.code == 403
        set_gpu_condition(agent, own, "True", "healthy")


def _pods(api: Client, namespace: str, app: str) -> list[dict]:
    pods = [p.to_dict() for p in api.list(Pod, namespace=namespace, labels={"app": app})]
    return [p for p in pods if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]


def _template(app: str, node: str | None = None) -> dict:
    """A pod template on a GPU node (or pinned to `node`); KWOK keeps a Job's pod Running for an hour, as a training
    job would, instead of completing it at once."""
    selector = {"kubernetes.io/hostname": node} if node else {"nvidia.com/gpu.present": "true"}
    return {
        "metadata": {"labels": {"app": app},
                     "annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": "1h",
                                     "pod-complete.stage.kwok.x-k8s.io/jitter-delay": "1h"}},
        "spec": {"nodeSelector": selector, "restartPolicy": "Never" if node is None else "Always",
                 "containers": [{"name": "main", "image": IMAGE}]},
    }  # fmt: skip


def test_the_kubernetes_scheduler_takes_a_node_out_evicts_within_budgets_brings_a_spare_and_returns_it(
    klab: Lab, api: Client
) -> None:
    """The remediation controller's executor, driving the Kubernetes adapter against the real API server, kube-
    controller-manager (Job and disruption controllers) and scheduler: a checkpointing Job moves to another node with
    its checkpoint path, a PodDisruptionBudget is honoured, the spare takes work, the node comes back."""
    scheduler = KubernetesScheduler(api, KubernetesOptions(pool="gpu", eviction_timeout_s=3.0))
    executor = Executor(scheduler, node_ops=None, partition="gpu")  # type: ignore[arg-type]  # (no node steps here)
    spare = next(n.name for n in klab.ctx.layout.nodes_with_role("gpu") if n.spare)
    # The spare out of the pool's work again (the lost-node test above brought it in), as the controller leaves it.
    scheduler.set_partition_nodes("gpu", [n for n in scheduler.partition_nodes("gpu") if n != spare])
    assert spare not in scheduler.partition_nodes("gpu")
    checkpoint = "/mnt/checkpoints/train-7"
    for namespace, policy in (("ml", None), ("serving", "allow-completion")):
        annotations = {DRAIN_POLICY_ANNOTATION: policy} if policy else {}
        api.apply(Namespace(metadata=ObjectMeta(name=namespace, annotations=annotations)), force=True)
    job = _template("train")
    job["spec"]["containers"][0]["env"] = [{"name": "HA_OPS_CHECKPOINT_DIR", "value": checkpoint}]
    manifest = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "namespace": "ml"},
                "spec": {"backoffLimit": 3, "template": job}}  # fmt: skip
    api.apply(codecs.from_dict(manifest), force=True)
    [first] = wait_for("the Job's pod Running", lambda: _pods(api, "ml", "train"), timeout=60, interval=0.5)
    node = first["spec"]["nodeName"]
    guarded = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "serve", "namespace": "serving"},
               "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "serve"}},
                        "template": _template("serve", node)}}  # fmt: skip
    api.apply(codecs.from_dict(guarded), force=True)
    budget = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
              "metadata": {"name": "serve", "namespace": "serving"},
              "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "serve"}}}}  # fmt: skip
    api.apply(codecs.from_dict(budget), force=True)
    [serving] = wait_for("the guarded pod Running", lambda: _pods(api, "serving", "serve"), timeout=60, interval=0.5)

    def run(kind: str, target: str, **args: object) -> str:
        return executor.run(Intent(id=f"t-{kind}-{target}", node=target, kind=kind, why="GPU1 xid: XID 79", args=args))

    assert run("drain", node) == "drained"
    assert run("drain", node).startswith("already drained")  # safe to repeat
    # Nothing half-applied: our cordon with its taint gone reads as not drained, and the drain repairs it.
    taints = api.get(Node, node).to_dict()["spec"]["taints"]
    api.patch(
        Node, node, {"spec": {"taints": [t for t in taints if t["key"] != TAINT_KEY]}}, patch_type=PatchType.MERGE
    )
    assert not scheduler.node(node).drained
    assert run("drain", node) == "drained"
    facts = api.get(Node, node).to_dict()
    assert facts["spec"]["unschedulable"] is True
    assert {"key": TAINT_KEY, "value": "GPU1-xid-XID-79", "effect": "NoSchedule"} in facts["spec"]["taints"]
    [condition] = [c for c in facts["status"]["conditions"] if c["type"] == CONDITION]
    assert (condition["status"], condition["reason"]) == ("False", "GpuUnhealthy") and "XID 79" in condition["message"]
    assert scheduler.node(node).drained_by_ha_ops
    assert run("spare_in", spare, replaces=node) == f"added to gpu for {node}"
    assert spare in scheduler.partition_nodes("gpu")
    assert not [t for t in api.get(Node, spare).to_dict()["spec"].get("taints") or [] if t["key"] == SPARE_TAINT_KEY]
    result = run("requeue_jobs", node)
    assert result == (f"requeued [ml/{first['metadata']['name']}]; "
                      f"not requeueable, left to finish [serving/{serving['metadata']['name']}]"), result  # fmt: skip
    # The Job controller makes a new pod and it runs elsewhere, with the job contract's checkpoint path: a job that
    # reads it resumes from its latest checkpoint wherever it starts.
    [moved] = wait_for("the Job's pod Running on another node", lambda: [
        p for p in _pods(api, "ml", "train") if p["metadata"]["name"] != first["metadata"]["name"]],
        timeout=60, interval=0.5)  # fmt: skip
    assert moved["spec"]["nodeName"] != node
    assert moved["spec"]["containers"][0]["env"] == [{"name": "HA_OPS_CHECKPOINT_DIR", "value": checkpoint}]
    # The budget is honoured: asked to evict the guarded pod, the adapter gives up after its timeout...
    guarded_id = f"serving/{serving['metadata']['name']}"
    with pytest.raises(KubernetesError, match="PodDisruptionBudget"):
        scheduler.requeue(guarded_id)
    assert scheduler.job_state(guarded_id) == "RUNNING"
    # ...unless its namespace says a pod held that long may be deleted.
    api.patch(Namespace, "serving", {"metadata": {"annotations": {DRAIN_POLICY_ANNOTATION: "delete-after-timeout"}}})
    scheduler.requeue(guarded_id)
    assert scheduler.job_state(guarded_id) in ("GONE", "COMPLETING")
    assert run("resume", node) == "resumed"
    facts = api.get(Node, node).to_dict()
    assert not facts["spec"].get("unschedulable")
    assert not [t for t in facts["spec"].get("taints") or [] if t["key"] == TAINT_KEY]
    assert [c["status"] for c in facts["status"]["conditions"] if c["type"] == CONDITION] == ["True"]
    with pytest.raises(UnknownNode):
        scheduler.node("gpu99")
    for namespace in ("ml", "serving"):
        api.delete(Namespace, namespace)


def test_a_kubernetes_lease_elects_one_holder_fences_a_deposed_one_and_hands_over_on_expiry(api: Client) -> None:
    """The leader lease as a coordination.k8s.io Lease against the real API server: of controllers racing for it one
    wins (the others get 409), the token (leaseTransitions) grows at each new holder, and a holder that stopped
    renewing is fenced once another took over."""
    name = "ha-ops-controller-test"

    def lease(me: str) -> KubernetesLease:
        return KubernetesLease(api, name, "default", me, ttl_s=2.0, margin_s=0.3)

    racers = [lease(f"pod-{i}") for i in range(6)]
    with ThreadPoolExecutor(len(racers)) as pool:
        won = list(pool.map(lambda r: r.acquire_or_renew(), racers))
    assert won.count(True) == 1, won
    first = racers[won.index(True)]
    token = first.token
    assert token is not None
    first.check(token)
    assert first.acquire_or_renew() and first.token == token  # renewing keeps the term
    others = [r for r in racers if r is not first]
    assert not any(r.acquire_or_renew() for r in others)  # held and fresh: nobody takes it
    # The holder stops renewing (frozen, or cut off): another takes over once the lease has not changed for its
    # duration on the taker's own clock, in a term of its own.
    taker = others[0]
    wait_for("the lease taken over", taker.acquire_or_renew, timeout=10, interval=0.2)
    assert taker.token == token + 1
    with pytest.raises(LeaseLost):
        first.check(token)  # the deposed holder acts on nothing
    assert not first.acquire_or_renew()
    taker.release()
    assert lease("pod-new").acquire_or_renew()  # a released lease is free at once
    api.delete(LeaseObject, name, namespace="default")


def test_the_rollout_drains_and_returns_a_node_through_the_kubernetes_adapter(api: Client) -> None:
    scheduler = KubernetesScheduler(api, KubernetesOptions(pool="gpu"))
    rollout = RolloutScheduler(scheduler, poll_s=0.5)
    node = sorted(kubernetes.ready_nodes(api) & set(scheduler.partition_nodes("gpu")))[0]
    assert rollout.node_healthy(node) and node not in rollout.unavailable()
    rollout.drain(node, f"{DRAIN_REASON_PREFIX} driver 580.1 (r1)")
    assert not rollout.node_healthy(node) and node in rollout.unavailable()
    rollout.wait_idle(node, timeout=30)
    rollout.resume(node)
    assert rollout.node_healthy(node) and node not in rollout.unavailable()
    # A node someone else cordoned (ha-ops' remediation) is never returned by the rollout.
    scheduler.drain(node, "ha-ops: GPU1 xid: XID 79")
    rollout.resume(node)
    assert scheduler.node(node).drained
    scheduler.resume(node)
