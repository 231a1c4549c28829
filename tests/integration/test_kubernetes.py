"""Kubernetes in the lab: a real etcd, kube-apiserver (TLS from the lab CA, RBAC), controller manager and scheduler
on loopback, with KWOK standing in for the GPU nodes' kubelets. Workloads are scheduled onto the spec's GPU nodes by
their GPUs and failure domains, and the ReplicaSet recovers pods from a lost node."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path

import httpx2
import pytest
import yaml
from lightkube import ApiError, Client, KubeConfig, codecs
from lightkube.models.authentication_v1 import BoundObjectReference, TokenRequestSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.coordination_v1 import Lease as LeaseObject
from lightkube.resources.core_v1 import Namespace, Node, Pod, ServiceAccount
from lightkube.resources.discovery_v1 import EndpointSlice
from lightkube.resources.flowcontrol_apiserver_v1 import FlowSchema, PriorityLevelConfiguration
from lightkube.resources.rbac_authorization_v1 import ClusterRole, ClusterRoleBinding
from lightkube.resources.scheduling_v1 import PriorityClass
from lightkube.types import PatchType

from ha_ops.health.poster import HttpPoster
from ha_ops.health.report import AgentReport, ReportFinding
from ha_ops.iac.engine import PulumiEngine
from ha_ops.iac.k8s_manifests import controller_port
from ha_ops.lab import audit_sink, kubelets, kubernetes
from ha_ops.lab import tls as lab_tls
from ha_ops.lab.cluster import Lab
from ha_ops.lab.paths import LabPaths
from ha_ops.remediation.audit import AuditLog, verify_text
from ha_ops.remediation.executor import Executor
from ha_ops.remediation.k8s_documents import ConfigMapDocuments
from ha_ops.remediation.k8s_lease import LEADER_LABEL, KubernetesLease
from ha_ops.remediation.lease import LeaseLost
from ha_ops.remediation.model import Intent
from ha_ops.rollout.executor import DRAIN_REASON_PREFIX
from ha_ops.rollout.scheduler import RolloutScheduler
from ha_ops.schedulers.kubernetes import (
    CONDITION,
    DRAIN_POLICY_ANNOTATION,
    SPARE_TAINT_KEY,
    TAINT_KEY,
    TIER_LABEL,
    UNSCHEDULABLE_TAINT_KEY,
    KubernetesError,
    KubernetesOptions,
    KubernetesScheduler,
    UnknownNode,
    set_gpu_condition,
)
from ha_ops.security import tls
from ha_ops.security.pki import CertificateAuthority
from ha_ops.security.tls import ReloadingContext, TlsFiles
from ha_ops.spec import parse_spec
from ha_ops.spec.model import Kubernetes
from ha_ops.util.tools import tool
from ha_ops.util.wait import wait_for
from tests.labkit import REPO, firewall_matrix_problems, lab_spec, running_lab

pytestmark = [pytest.mark.lab, pytest.mark.tools]  # the lab, and the Go-built tools

LAB_NAME = "itk8s"  # the lab this module builds: the suite checks nothing of it is left (conftest)
IMAGE = "registry.invalid/ha-ops/trainer@sha256:" + "0" * 64  # KWOK never pulls it


GPU_KUBELET = "gpu5"  # the one GPU node with a real kubelet (the spare of five): the agent's pod runs there


@pytest.fixture(scope="module")
def klab() -> Iterator[Lab]:
    # ctl1 and ctl2 real kubelet nodes (containerd), for the controller pods, and gpu5 for a real agent pod; KWOK for
    # the other GPU nodes.
    base = lab_spec(LAB_NAME)
    pools = [base.pools[0].model_copy(update={"count": 5})]
    kube = Kubernetes(kubelet_nodes=["ctl1", "ctl2", GPU_KUBELET])
    # (the host firewalls on, as in examples/lab.yaml: with Kubernetes' flows)
    update = {"pools": pools, "kubernetes": kube}
    spec = parse_spec(base.model_copy(update=update).model_dump(mode="json"))
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
    assert set(nodes) == set(layout) - {GPU_KUBELET}
    assert kubernetes.ready_nodes(api) == set(layout) - {GPU_KUBELET}
    # The GPU node with a real kubelet registered itself, with the same labels and its GPUs advertised.
    real = api.get(Node, GPU_KUBELET).to_dict()
    assert kubernetes.ready_nodes(api, {kubelets.LAB_LABEL: "true"}) >= {GPU_KUBELET}
    assert real["metadata"]["labels"]["nvidia.com/gpu.present"] == "true"
    # (gpu5 is the spare; the node controller's not-ready taint may still be on it for a moment after Ready)
    assert {t["key"] for t in real["spec"]["taints"]} >= {kubelets.LAB_LABEL, SPARE_TAINT_KEY}
    nodes[GPU_KUBELET] = real
    domains = {d.name: d for d in klab.spec.failure_domains}
    for name, node in nodes.items():
        domain = domains[layout[name].domain]
        labels = node["metadata"]["labels"]
        assert (labels[kubernetes.ZONE_LABEL], labels[kubernetes.RACK_LABEL]) == (domain.zone, domain.rack)
        assert node["status"]["allocatable"][kubernetes.GPU_RESOURCE] == str(layout[name].gpus)
    assert klab.status()["kubernetes"]["api_server"] == kubernetes.api_server(klab.ctx)


def test_the_host_firewalls_let_in_exactly_the_flows_of_the_cluster_with_kubernetes(klab: Lab) -> None:
    """Issue 20 on Kubernetes: the matrix of every host pair and port, the kubelet's among them, probed as in the
    plain lab. The real pods behind their nodes' firewalls still reach the API (the agent pod's condition, the
    controller pods' Lease: the layer test) and the monitoring host's audit sink (the layer test's shipped entries):
    the pods' addresses, the spec's kubernetes.pod_cidr, may reach it."""
    assert klab.spec.firewall is not None and klab.spec.kubernetes is not None
    assert firewall_matrix_problems(klab) == []


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


def kubectl(klab: Lab, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """The built kubectl against the lab's API server, as an operator runs it."""
    return subprocess.run([str(tool("kubectl")), "--kubeconfig",
                           str(kubernetes.kubeconfig_path(klab.ctx)), *args], input=stdin, capture_output=True,
                          text=True, timeout=60)  # fmt: skip


def test_the_layer_meets_pod_security_on_the_api_server(klab: Lab, tmp_path: Path) -> None:
    """Issue 44, finding 11. The layer as production renders it (`ha-ops k8s render`, NVML agents) labels both its
    namespaces Pod Security `restricted`; with those namespaces made, `kubectl apply --dry-run=server` of the whole
    base succeeds with no Pod Security warning, and each workload's pod, created as a Pod (server dry run, where
    `enforce` refuses), is admitted. The same pod as root is refused with the API server's own words: the check can
    fail. (The lab's layer, whose agents read fake GPUs through a hostPath, runs its controllers in a `restricted`
    namespace: test_the_k8s_layer_stack_...)"""
    namespaces = {"namespace": "psa-ha-ops", "agent_namespace": "psa-ha-ops-agent"}
    spec_file, layer_file, base = tmp_path / "spec.yaml", tmp_path / "layer.yaml", tmp_path / "base"
    spec_file.write_text(yaml.safe_dump(klab.spec.model_dump(mode="json") | {"images": {"agent": IMAGE,
                                        "controller": IMAGE}}, sort_keys=False))  # fmt: skip
    layer_file.write_text(yaml.safe_dump({**namespaces, "prometheus_operator": False}))
    rendered = subprocess.run([sys.executable, "-m", "ha_ops", "k8s", "render", str(spec_file), "--out", str(base),
                               "--layer", str(layer_file)], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert rendered.returncode == 0, rendered.stderr
    try:
        for name in namespaces.values():  # the namespaces themselves, labelled as the layer labels them
            made = kubectl(klab, "apply", "-f", str(base / f"namespace-{name}.yaml"))
            assert made.returncode == 0, made.stderr
            labels = json.loads(kubectl(klab, "get", "namespace", name, "-o", "json").stdout)["metadata"]["labels"]
            assert labels["pod-security.kubernetes.io/enforce"] == "restricted", labels
        for account in ("ha-ops-controller", "ha-ops-agent"):  # (a pod's service account must exist to admit it)
            made = kubectl(klab, "apply", "-f", str(base / f"serviceaccount-{account}.yaml"))
            assert made.returncode == 0, made.stderr
        applied = kubectl(klab, "apply", "--dry-run=server", "-k", str(base))
        assert applied.returncode == 0, applied.stderr
        assert "deployment.apps/ha-ops-controller created (server dry run)" in applied.stdout, applied.stdout
        assert "PodSecurity" not in applied.stderr, applied.stderr  # (a workload's violation is a warning here)
        for kind, name, namespace in (("deployment", "ha-ops-controller", namespaces["namespace"]),
                                      ("daemonset", "ha-ops-agent", namespaces["agent_namespace"])):  # fmt: skip
            workload = yaml.safe_load((base / f"{kind}-{name}.yaml").read_text())
            # (The priority classes are cluster-wide objects this dry run does not make; Pod Security ignores them.)
            template = {k: v for k, v in workload["spec"]["template"]["spec"].items() if k != "priorityClassName"}
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{name}-psa", "namespace": namespace},
                   "spec": template | {"nodeName": "ctl1"}}  # fmt: skip
            admitted = kubectl(klab, "create", "--dry-run=server", "-f", "-", stdin=json.dumps(pod))
            assert admitted.returncode == 0, (kind, admitted.stderr)
            rooted = json.loads(json.dumps(pod))
            rooted["spec"]["securityContext"] |= {"runAsNonRoot": False, "runAsUser": 0}
            refused = kubectl(klab, "create", "--dry-run=server", "-f", "-", stdin=json.dumps(rooted))
            assert refused.returncode != 0 and 'violates PodSecurity "restricted:latest"' in refused.stderr, (
                kind, refused.stderr)  # fmt: skip
            print(f"\n{kind} {name} in {namespace}: admitted under restricted; as root: {refused.stderr.strip()}")
    finally:
        for name in namespaces.values():
            kubectl(klab, "delete", "namespace", name, "--ignore-not-found", "--wait=false")


@pytest.fixture(scope="module")
def image(klab: Lab, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The ha-ops image, built from this checkout (scripts/image.sh) and loaded into the kubelet nodes' containerd;
    named by digest, as the HA policy requires."""
    tarball = tmp_path_factory.mktemp("image") / "ha-ops.tar"
    built = subprocess.run(["bash", str(REPO / "scripts" / "image.sh"), str(tarball)], capture_output=True, text=True,
                           timeout=600)  # fmt: skip
    assert built.returncode == 0, built.stdout + built.stderr
    return f"localhost/ha-ops/ha-ops@{kubelets.import_image(klab.ctx, tarball)}"


def pod_log(klab: Lab, pod: dict) -> str:
    """A container's log, read where its kubelet writes it (the API server cannot reach kubelets by name here)."""
    node, meta = pod["spec"].get("nodeName", ""), pod["metadata"]
    folder = kubelets.folder(klab.ctx, node) / "var-log-pods" / f"{meta['namespace']}_{meta['name']}_{meta['uid']}"
    return "\n".join(f.read_text()[-4000:] for f in sorted(folder.glob("*/*.log")))


def test_the_k8s_layer_stack_runs_ha_ops_in_real_containers_and_the_controllers_fail_over(
    klab: Lab, api: Client, image: str, tmp_path: Path
) -> None:
    """infra/k8s through the built CLI and the built pulumi-kubernetes provider, against the lab's API server, with
    the image built from this checkout: the agent on every GPU node (KWOK), the controller's 2 replicas as real
    containers on the kubelet nodes ctl1 and ctl2 (read-only root file system, their pod names as ids, the Lease
    and state in the API). The leader's container is killed (SIGKILL, a crash) while a node it took out is held:
    the other replica leads within 5 s, and the audit shows every action once. Destroy removes everything."""
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump(klab.spec.model_dump(mode="json") | {"images": {"agent": image,
                                        "controller": image}}, sort_keys=False))  # fmt: skip
    engine = PulumiEngine(tmp_path / "state")
    program = REPO / "infra" / "k8s"
    engine.select_stack(program, "lab")
    # The controllers on the kubelet nodes ctl1 and ctl2; the lab's Prometheus reads rule files (no Operator); the
    # agent also on the GPU kubelet node (its taint keeps the lab's pretend workloads away), reading fake GPUs.
    layer = {"controller_node_selector": {"ha-ops.io/controller": "true"}, "prometheus_operator": False,
             "agent_tolerations": [{"key": kubelets.LAB_LABEL, "operator": "Exists", "effect": "NoSchedule"}],
             "agent_fake_gpus_dir": str(klab.ctx.in_node("gpus")),
             # Certificates of a minute (the least the layer takes), so that the test sees them renewed; the audit
             # entries shipped to the lab's collector on the monitoring node.
             "certificate_lifetime_s": 60,
             "audit_sink": {"address": audit_sink.address(klab.ctx), "port": audit_sink.PORT}}  # fmt: skip
    engine.set_config(program, "lab", {"spec": str(spec_file), "kubeconfig": str(kubernetes.kubeconfig_path(klab.ctx)),
                                       "layer": json.dumps(layer)})  # fmt: skip
    namespace, agent_namespace = "ha-ops", "ha-ops-agent"
    controllers: dict[str, dict] = {}
    agents: dict[str, dict] = {}
    klab.use_controllers(False)  # the lab's own controllers (for Slurm) stopped: the layer's pods are the ones acting
    audit_key = audit_key_secret(api, namespace)
    pki = layer_pki(api, namespace, agent_namespace, lab_tls.folder(klab.ctx))
    try:
        update = engine.up(program, "lab")
        assert update["result"] == "succeeded", update
        outputs = engine.outputs(program, "lab")
        assert (outputs["namespace"], outputs["agent_namespace"]) == (namespace, agent_namespace)
        # Pod Security: the controllers' namespace `restricted`; the agents' `privileged` here, for the lab's hostPath
        # of fake GPUs alone (with NVML it is `restricted` too: test_the_layer_meets_pod_security_...).
        for name, level in ((namespace, "restricted"), (agent_namespace, "privileged")):
            labels = api.get(Namespace, name).to_dict()["metadata"]["labels"]
            assert labels["pod-security.kubernetes.io/enforce"] == level, (name, labels)

        def pods(app: str) -> dict[str, dict]:
            where = agent_namespace if app == "ha-ops-agent" else namespace
            found = [p.to_dict() for p in api.list(Pod, namespace=where, labels={"app.kubernetes.io/name": app})]
            return {p["metadata"]["name"]: p for p in found if p["status"].get("phase") == "Running"}

        gpu_nodes = {str(n.metadata.name) for n in api.list(Node, labels={"type": "kwok"}) if n.metadata}
        every_gpu_node = gpu_nodes | {GPU_KUBELET}

        def on_nodes(found: dict[str, dict]) -> set[str]:
            return {p["spec"]["nodeName"] for p in found.values()}

        agents = wait_for("an agent Running on every GPU node (Ready on the real one)",
                          lambda: (p := pods("ha-ops-agent")) and on_nodes(p) >= every_gpu_node and p,
                          timeout=120, interval=1.0)  # fmt: skip
        assert on_nodes(agents) == every_gpu_node
        [real_agent] = [p for p in agents.values() if p["spec"]["nodeName"] == GPU_KUBELET]
        [status] = real_agent["status"]["containerStatuses"]
        assert status["containerID"].startswith("containerd://") and status["imageID"].endswith(image.split("@")[1])
        agent_container_keeps_its_nodes_condition(klab, api)

        def ready_controllers() -> dict[str, dict] | None:
            running = pods("ha-ops-controller")
            ready = {n: p for n, p in running.items() if all(c.get("ready") for c in p["status"]["containerStatuses"])}
            return ready if len(ready) == 2 else None

        controllers = wait_for("2 controllers Running and Ready (their /healthz answering)", ready_controllers,
                               timeout=120, interval=1.0)  # fmt: skip
        assert on_nodes(controllers) == {"ctl1", "ctl2"}
        for pod in controllers.values():  # real containers of containerd, from the image built here
            [status] = pod["status"]["containerStatuses"]
            assert status["containerID"].startswith("containerd://") and status["imageID"].endswith(image.split("@")[1])
        agent_may_write_only_its_own_nodes_condition(klab, api, agent_namespace, {n: p["spec"]["nodeName"]
                                                                             for n, p in agents.items()})  # fmt: skip
        assert {str(pc.metadata.name) for pc in api.list(PriorityClass) if pc.metadata} >= {
            "critical", "normal", "preemptible-training"}  # fmt: skip
        controller_may_label_only_its_own_pods(klab, api, namespace, (agent_namespace, next(iter(agents))),
                                               next(iter(controllers)))  # fmt: skip
        controllers_issue_certificates(api, (namespace, agent_namespace), controllers, real_agent, pki, tmp_path)
        controllers_fail_over(klab, api, namespace, controllers, sorted(gpu_nodes), audit_key, pki)
        own_certificates_renewed(controllers, pki)
    except BaseException:
        real_pods = [*controllers.values(), *(p for p in agents.values() if p["spec"]["nodeName"] == GPU_KUBELET)]
        for pod in real_pods:
            print(f"--- {pod['metadata']['name']} on {pod['spec']['nodeName']}\n{pod_log(klab, pod)}")
        raise
    finally:
        klab.use_controllers(True)
        gone = engine.destroy(program, "lab")
    assert gone["result"] == "succeeded", gone
    for name in (namespace, agent_namespace):
        try:
            left = api.get(Namespace, name)
            assert left.status is not None and left.status.phase == "Terminating"
        except ApiError as exc:
            assert exc.status.code == 404


def agent_container_keeps_its_nodes_condition(klab: Lab, api: Client) -> None:
    """The agent's pod on the GPU kubelet node, a real container reading the node's (fake) GPUs through its
    hostPath: its verdict reaches the node's GpuHealthy condition, written with the pod's own token, as a GPU falls
    off the bus and comes back."""

    def condition(status: str) -> dict | None:
        found = [c for c in api.get(Node, GPU_KUBELET).to_dict()["status"].get("conditions") or []
                 if c["type"] == CONDITION]  # fmt: skip
        return found[0] if found and found[0]["status"] == status else None

    wait_for(f"the agent container's {CONDITION}=True on {GPU_KUBELET}", lambda: condition("True"), timeout=60,
             interval=0.5)  # fmt: skip
    gpus = klab.node(GPU_KUBELET).gpus()
    gpus.inject("fallen_off_bus", 2)
    try:
        started = time.monotonic()
        unhealthy = wait_for(f"{CONDITION}=False on {GPU_KUBELET}", lambda: condition("False"), timeout=30,
                             interval=0.2)  # fmt: skip
        print(
            f"\nthe agent container set {CONDITION}=False {time.monotonic() - started:.1f} s after the fault: "
            f"{unhealthy['reason']}: {unhealthy['message']}"
        )
        assert "79" in unhealthy["message"], unhealthy
    finally:
        gpus.clear()
    wait_for(f"{CONDITION}=True again on {GPU_KUBELET}", lambda: condition("True"), timeout=60, interval=0.5)


def controller_may_label_only_its_own_pods(klab: Lab, api: Client, namespace: str, agent: tuple[str, str],
                                           controller: str) -> None:  # fmt: skip
    """With the controllers' service account: another label of a controller pod is refused by the layer's admission
    policy (RBAC alone would allow it); the label ha-ops.io/leader of an agent's pod, in the agents' namespace, by
    RBAC (the controllers' Role is in their own namespace only; in one namespace for both, the admission policy
    refuses it: "may label controller pods only")."""
    request = ServiceAccount.Token(metadata=ObjectMeta(name="ha-ops-controller", namespace=namespace),
                                   spec=TokenRequestSpec(audiences=[], expirationSeconds=600))  # fmt: skip
    token = api.create(request, "ha-ops-controller", namespace=namespace).status.token
    agent_namespace, agent_pod = agent
    with Client(config=KubeConfig.from_dict(token_kubeconfig(klab, token, "controller")), trust_env=False) as as_it:
        refused_writes = [
            (agent_namespace, agent_pod, {LEADER_LABEL: "true"}, "cannot patch resource"),
            (namespace, controller, {"tier": "x"}, f"may change the label {LEADER_LABEL} only"),
        ]
        for where, pod, labels, refusal in refused_writes:
            with pytest.raises(ApiError) as refused:
                as_it.patch(Pod, pod, {"metadata": {"labels": labels}}, namespace=where,
                            patch_type=PatchType.MERGE)  # fmt: skip
            assert refusal in (refused.value.status.message or ""), refused.value.status


def service_endpoints(api: Client, namespace: str) -> set[str]:
    """The ready addresses of the controllers' Service (its EndpointSlices, as kube-controller-manager keeps them)."""
    slices = api.list(EndpointSlice, namespace=namespace, labels={"kubernetes.io/service-name": "ha-ops-controller"})
    return {address for s in slices for e in s.endpoints or [] if e.conditions and e.conditions.ready
            for address in e.addresses}  # fmt: skip


def controllers_fail_over(
    klab: Lab, api: Client, namespace: str, pods: dict[str, dict], gpu_nodes: list[str], audit_key: bytes,
    pki: LayerPki,
) -> None:  # fmt: skip
    """Agents report to both controller pods over mutual TLS (a standby answers 503); an XID 79 on one node; once
    the leader took it out, the leader's container is killed and the Lease must pass to the other pod within 5 s."""
    urls = {name: f"https://{p['status']['podIP']}:{controller_port(klab.spec)}" for name, p in pods.items()}

    def holder() -> str:
        return str(api.get(LeaseObject, "ha-ops-controller", namespace=namespace).spec.holderIdentity)

    leader = wait_for("a controller pod holding the Lease", lambda: (h := holder()) in pods and h, timeout=30,
                      interval=0.2)  # fmt: skip
    standby = next(name for name in pods if name != leader)
    # The Service (the agents' one URL) sends to the leader alone: it labels its own pod while it leads.
    ip = {name: p["status"]["podIP"] for name, p in pods.items()}
    wait_for("the Service at the leader only", lambda: service_endpoints(api, namespace) == {ip[leader]}, timeout=20,
             interval=0.2)  # fmt: skip
    faulty = gpu_nodes[0]
    scheduler = KubernetesScheduler(api, KubernetesOptions(pool="gpu"))
    with agents_reporting(gpu_nodes, [f"{u}/v1/reports" for u in urls.values()], lambda n: n == faulty,
                          pki.agent):  # fmt: skip
        wait_for("the leader taking the faulty node out", lambda: scheduler.node(faulty).drained, timeout=30,
                 interval=0.3)  # fmt: skip
        [status] = pods[leader]["status"]["containerStatuses"]
        killed_at = time.monotonic()
        kubelets.ctr(klab.ctx, pods[leader]["spec"]["nodeName"], "tasks", "kill", "--signal", "SIGKILL",
                     status["containerID"].removeprefix("containerd://"))  # fmt: skip
        wait_for("the other pod holding the Lease", lambda: holder() == standby, timeout=15, interval=0.1)
        takeover_s = time.monotonic() - killed_at
        wait_for("the new leader answering", lambda: leading(urls[standby], pki.operator.get()), timeout=10,
                 interval=0.2)  # fmt: skip
        print(f"\nleader pod {leader} killed (SIGKILL): {standby} held the Lease {takeover_s:.1f} s later")
        assert takeover_s <= 5.0
        # The new leader labelled, the old pod (its container restarted, a standby now) unlabelled by itself.
        wait_for("the Service at the new leader only", lambda: service_endpoints(api, namespace) == {ip[standby]},
                 timeout=30, interval=0.2)  # fmt: skip
        print(f"the Service sends to {standby} alone {time.monotonic() - killed_at:.1f} s after the kill")
        assert scheduler.node(faulty).drained  # the state came with it: not returned, not drained again
    audit = AuditLog(ConfigMapDocuments(api, namespace, "ha-ops-controller"))

    def drain_audited() -> list[dict]:
        # A drain's entry is written with its wave's results: killed within that flush, the old leader wrote none,
        # and the new one writes it once it has run the pending drain again (finding the node drained).
        found = [json.loads(line) for line in audit.text().splitlines()]
        return found if ("drain", faulty) in [(e["what"], e["node"]) for e in found] else []

    entries = wait_for("the drain in the audit log", drain_audited, timeout=10, interval=0.2)
    intents = [e["intent"] for e in entries if e.get("intent")]
    assert len(intents) == len(set(intents)), entries
    assert [(e["what"], e["node"]) for e in entries].count(("drain", faulty)) == 1, entries
    # Keyed with the Secret's key, which both replicas mounted: the chain verifies with it and not without.
    assert {e.get("mac") for e in entries} == {"hmac-sha256"}
    assert verify_text(audit.text(), key=audit_key) == []
    assert verify_text(audit.text(), key=b"x" * 32) != []
    # Every entry, shipped by the pods (TLS with their own certificates, named by the Service) to the collector.
    local = {(e["seq"], e["hash"]) for e in map(json.loads, audit.text().splitlines())}

    def shipped() -> set:
        lines = audit_sink.shipped_log(klab.ctx).read_text().splitlines() if audit_sink.shipped_log(
            klab.ctx).exists() else []  # fmt: skip
        return {(e["seq"], e["hash"]) for e in map(json.loads, lines) if e.get("hash")}

    wait_for("the layer's audit entries at the collector", lambda: local <= shipped(), timeout=20, interval=0.5)
    print(f"\n{len(local)} audit entries of the controller pods shipped to the collector on the monitoring node")
    scheduler.resume(faulty)


def audit_key_secret(api: Client, namespace: str) -> bytes:
    """The controllers' audit key, created as an operator would before the first `pulumi up` (docs/security.md):
    the layer's namespace and a Secret in it. pulumi-kubernetes 4.25 then adopts the namespace (server-side apply)."""
    import base64
    import secrets

    from lightkube.resources.core_v1 import Secret

    key = secrets.token_hex(32).encode()
    with suppress(ApiError):  # (there already, from a run that stopped before its destroy)
        api.create(Namespace(metadata=ObjectMeta(name=namespace)))
    with suppress(ApiError):
        api.delete(Secret, "ha-ops-controller-audit-key", namespace=namespace)
    api.create(Secret(metadata=ObjectMeta(name="ha-ops-controller-audit-key", namespace=namespace),
                      data={"key": base64.b64encode(key).decode()}))  # fmt: skip
    return key


class LayerPki:
    """The layer's certificates as an operator sets them up (docs/security.md): the cluster CA (the lab's, which
    its audit sink trusts), the controllers' issuing CA in the Secret ha-ops-issuer, the CA in the ConfigMap
    ha-ops-ca; and, for the test's own callers, an operator's certificate and the agents' (as the ha_ops_pki role
    would issue them; named `layer-...` beside the lab's own)."""

    def __init__(self, directory: Path) -> None:
        self.ca = CertificateAuthority(directory)
        self.ca.issue_issuer()
        self.operator = ReloadingContext(self.files("layer-operator", "alice", tls.OPERATORS), server=False)
        self._agents: dict[str, ReloadingContext] = {}

    def files(self, name: str, cn: str, role: str) -> TlsFiles:
        paths = self.ca.issue(name, cn, groups=(role,))
        return TlsFiles(ca_file=self.ca.paths.cert, cert_file=paths.cert, key_file=paths.key)

    def agent(self, node: str) -> ReloadingContext:
        if node not in self._agents:
            self._agents[node] = ReloadingContext(self.files(f"layer-agent-{node}", node, tls.AGENTS), server=False)
        return self._agents[node]

    def verifying(self) -> ssl.SSLContext:
        """Verifies a controller with the cluster CA and presents nothing (the enrollment port)."""
        return ssl.create_default_context(cafile=str(self.ca.paths.cert))


def layer_pki(api: Client, namespace: str, agent_namespace: str, directory: Path) -> LayerPki:
    """The issuer's Secret in the controllers' namespace, the CA's ConfigMap in the agents' (which mount it)."""
    import base64

    from lightkube.resources.core_v1 import ConfigMap, Secret

    pki = LayerPki(directory)
    d = pki.ca.directory

    def b64(name: str) -> str:
        return base64.b64encode((d / name).read_bytes()).decode()

    for name in (namespace, agent_namespace):
        with suppress(ApiError):
            api.create(Namespace(metadata=ObjectMeta(name=name)))
    for kind, name, where in ((Secret, "ha-ops-issuer", namespace), (ConfigMap, "ha-ops-ca", agent_namespace)):
        with suppress(ApiError):
            api.delete(kind, name, namespace=where)
    api.create(
        Secret(
            metadata=ObjectMeta(name="ha-ops-issuer", namespace=namespace),
            data={"tls.crt": b64("issuer.crt"), "tls.key": b64("issuer.key"), "ca.crt": b64("ca.crt")},
        )
    )
    api.create(ConfigMap(metadata=ObjectMeta(name="ha-ops-ca", namespace=agent_namespace),
                         data={"ca.crt": (d / "ca.crt").read_text()}))  # fmt: skip
    return pki


def pod_token(api: Client, namespace: str, account: str, pod: dict, audiences: list[str] | None) -> str:
    """A token of `account` bound to `pod` (so it names the pod's node), as kubelet projects one into the pod."""
    bound = BoundObjectReference(apiVersion="v1", kind="Pod", name=pod["metadata"]["name"], uid=pod["metadata"]["uid"])
    request = ServiceAccount.Token(metadata=ObjectMeta(name=account, namespace=namespace),
                                   spec=TokenRequestSpec(boundObjectRef=bound, expirationSeconds=600,
                                                         audiences=audiences))  # fmt: skip
    return str(api.create(request, account, namespace=namespace).status.token)


def controllers_issue_certificates(
    api: Client, namespaces: tuple[str, str], pods: dict[str, dict], agent_pod: dict, pki: LayerPki, tmp_path: Path
) -> None:
    """The controller containers enroll a token of the agent's pod (reviewed by the real API server) for that pod's
    node and no other; refuse other accounts' and audiences' tokens; renew over mutual TLS, keeping the identity;
    and their own certificates, which they issued themselves at start, verify with the cluster CA at their pod's
    address. (In the lab the agent container cannot reach the controllers' Service, with no cluster DNS or Service
    proxy here, so the test presents the token the pod would.)"""
    from cryptography import x509

    from ha_ops.errors import TransportError
    from ha_ops.remediation.certificate_client import enroll, renew
    from ha_ops.security.tls import Enrollment

    enroll_urls = [f"https://{p['status']['podIP']}:8801" for p in pods.values()]
    api_urls = [f"https://{p['status']['podIP']}:8800" for p in pods.values()]
    node = agent_pod["spec"]["nodeName"]
    files = TlsFiles(ca_file=pki.ca.paths.cert, cert_file=tmp_path / "enrolled.crt", key_file=tmp_path / "enrolled.key")
    token_file = tmp_path / "token"
    namespace, agent_namespace = namespaces
    token_file.write_text(pod_token(api, agent_namespace, "ha-ops-agent", agent_pod, ["ha-ops-controller"]))
    enroll(files, Enrollment(urls=enroll_urls, token_file=token_file))
    cert = x509.load_pem_x509_certificates(files.cert_file.read_bytes())[0]
    assert cert.subject.rfc4514_string() == f"CN={node},O=ha-ops:agents", cert.subject
    refused = {
        "the controller's own account": (pod_token(api, namespace, "ha-ops-controller", next(iter(pods.values())),
                                                   ["ha-ops-controller"]), "not the agents' service account"),
        "the API server's audience": (pod_token(api, agent_namespace, "ha-ops-agent", agent_pod, None), "not valid"),
    }  # fmt: skip
    for what, (token, why) in refused.items():
        token_file.write_text(token)
        with pytest.raises(TransportError) as refusal:
            enroll(files.model_copy(update={"cert_file": tmp_path / "x.crt", "key_file": tmp_path / "x.key"}),
                   Enrollment(urls=enroll_urls, token_file=token_file))  # fmt: skip
        assert "HTTP 403" in str(refusal.value) and why in str(refusal.value), (what, refusal.value)
    # The enrolled certificate reports for its node, and not for another, to whichever pod leads.
    context = ReloadingContext(files, server=False)
    post = HttpPoster([f"{u}/v1/reports" for u in api_urls], timeout=5.0, context=context)
    post(agent_report(node, 1, False))
    with pytest.raises(ConnectionError, match="HTTP 403"):
        post(agent_report("gpu1" if node != "gpu1" else "gpu2", 1, False))
    post.close()
    before = cert.serial_number
    renew(files, api_urls)
    renewed = x509.load_pem_x509_certificates(files.cert_file.read_bytes())[0]
    assert renewed.subject == cert.subject and renewed.serial_number != before
    # Nothing is answered on the API's port without a certificate of the CA.
    with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
        http_json(f"{api_urls[0]}/healthz", context=pki.verifying())
    issued = sum(metric(f"{u}/metrics", pki, "enrollment") for u in enroll_urls)
    assert issued >= 1
    print(f"\nthe controller pods enrolled {node} by its pod's token ({issued:g} enrollment(s)) and renewed it")


def metric(url: str, pki: LayerPki, how: str) -> float:
    """ha_ops_certificates_issued_total{how=...} of one controller pod, read on its enrollment port (verified with
    the cluster CA at the pod's address: its own certificate names it)."""
    with urllib.request.urlopen(url, timeout=5, context=pki.verifying()) as answer:
        text = answer.read().decode()
    found = [line.rsplit(" ", 1)[1] for line in text.splitlines()
             if line.startswith("ha_ops_certificates_issued_total{") and f'how="{how}"' in line]  # fmt: skip
    return float(found[0]) if found else 0.0


def own_certificates_renewed(pods: dict[str, dict], pki: LayerPki) -> None:
    """Each controller pod's own certificate (60 s here) renewed by the pod itself past two thirds of its life."""
    for pod in pods.values():
        url = f"https://{pod['status']['podIP']}:8801/metrics"
        wait_for(f"{pod['metadata']['name']} renewing its own certificate",
                 lambda u=url: metric(u, pki, "own") >= 2, timeout=75, interval=2)  # fmt: skip


def token_kubeconfig(klab: Lab, token: str, user: str) -> dict:
    """The lab's API server and CA, and a service account's token as the user."""
    admin = yaml.safe_load(kubernetes.kubeconfig_path(klab.ctx).read_text())
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": user,
        "clusters": admin["clusters"],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": {"cluster": admin["clusters"][0]["name"], "user": user}}],
    }


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
    as_agent = token_kubeconfig(klab, answer.status.token, "agent")
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


def checkpointing_job(api: Client, namespace: str, name: str, checkpoint: str) -> dict:
    """A Job under the job contract (its checkpoint path in HA_OPS_CHECKPOINT_DIR); its first pod once Running."""
    job = _template(name)
    job["spec"]["containers"][0]["env"] = [{"name": "HA_OPS_CHECKPOINT_DIR", "value": checkpoint}]
    manifest = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": namespace},
                "spec": {"backoffLimit": 3, "template": job}}  # fmt: skip
    api.apply(codecs.from_dict(manifest), force=True)
    [first] = wait_for("the Job's pod Running", lambda: _pods(api, namespace, name), timeout=60, interval=0.5)
    return first


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
    first = checkpointing_job(api, "ml", "train", checkpoint)
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
    # With kube-controller-manager's own taint for a cordon, in the same write: it has nothing left to write.
    assert {"key": UNSCHEDULABLE_TAINT_KEY, "effect": "NoSchedule"} in facts["spec"]["taints"]
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
    assert not [t for t in facts["spec"].get("taints") or [] if t["key"] in (TAINT_KEY, UNSCHEDULABLE_TAINT_KEY)]
    assert [c["status"] for c in facts["status"]["conditions"] if c["type"] == CONDITION] == ["True"]
    with pytest.raises(UnknownNode):
        scheduler.node("gpu99")
    for namespace in ("ml", "serving"):
        api.delete(Namespace, namespace)


class StaleCopy:
    """A node watch that has not seen the node's latest version (what a write must survive)."""

    def __init__(self, node: dict) -> None:
        self.stored = {f"/{node['metadata']['name']}": node}

    def get(self, key: str) -> dict | None:
        return self.stored.get(key)

    def put(self, key: str, obj: dict) -> None:
        self.stored[key] = obj


def test_the_api_servers_403_409_and_429_are_retried_as_it_asks_then_named(
    klab: Lab, api: Client, tmp_path: Path
) -> None:
    """Refusals from the real API server, not a fake: 429 from API Priority and Fairness (a priority level with no
    seats for the controller's service account) is retried after the server's Retry-After and succeeds once the
    server lets it through; 409 from a write carrying a stale resourceVersion is read again and lands; 403 from an
    account without RBAC is tried twice more, then named. Unknown nodes and nodes of another pool are refused."""
    ns = "hao-refusals"
    node = sorted(kubernetes.ready_nodes(api))[0]
    waits: list[float] = []
    throttle = [
        {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
         "metadata": {"name": ns},
         "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 0, "lendablePercent": 0,
                                                 "borrowingLimitPercent": 0, "limitResponse": {"type": "Reject"}}}},
        {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema", "metadata": {"name": ns},
         "spec": {"priorityLevelConfiguration": {"name": ns}, "matchingPrecedence": 100,
                  "distinguisherMethod": {"type": "ByUser"},
                  "rules": [{"subjects": [{"kind": "ServiceAccount",
                                           "serviceAccount": {"name": "ha-ops-controller", "namespace": ns}}],
                             "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                                                "clusterScope": True, "namespaces": ["*"]}]}]}},
    ]  # fmt: skip
    clients = ExitStack()
    try:
        allowed = Client(KubeConfig.from_file(controller_kubeconfig(klab, api, tmp_path / "c.kubeconfig", ns)))
        clients.callback(allowed.close)
        for manifest in throttle:
            api.apply(codecs.from_dict(manifest), force=True)

        def recorded(seconds: float) -> None:
            waits.append(seconds)
            time.sleep(seconds)

        # The account's priority level has one seat (no shares of its own, nothing borrowed); other readers with the
        # same account keep it busy, so the scheduler's requests are refused with 429 from time to time.
        stop = threading.Event()
        hammers = Client(KubeConfig.from_file(tmp_path / "c.kubeconfig"))

        def hammer() -> None:
            while not stop.is_set():
                with suppress(ApiError, httpx2.HTTPStatusError):  # (refused too, as they should be)
                    list(hammers.list(Node))

        threads = [threading.Thread(target=hammer, daemon=True) for _ in range(6)]
        for thread in threads:
            thread.start()
        throttled = KubernetesScheduler(allowed, KubernetesOptions(pool="gpu", retries=20), sleep=recorded)
        try:
            wait_for("a read refused with 429 and retried", lambda: throttled.node(node).name == node and waits,
                     timeout=60, interval=0.1)  # fmt: skip
        finally:
            stop.set()
            for thread in threads:
                thread.join(10)
            hammers.close()
        # Each retry waited as long as the server's Retry-After said (not the 0.2 s of the backoff without one),
        # and the read then succeeded.
        assert all(w >= 1.0 for w in waits), waits
        print(f"\n429: {len(waits)} refusals, each retried after {sorted(set(waits))} s (Retry-After)")

        # 409: a write from a stale copy of the node (as a watch that is behind holds it), against the real server.
        admin = KubernetesScheduler(api, KubernetesOptions(pool="gpu"), sleep=recorded)
        stale = api.get(Node, node).to_dict()
        api.patch(Node, node, {"metadata": {"labels": {"hao-refusals": "bumped"}}})  # the node moves on
        admin._node_cache = StaleCopy(stale)  # type: ignore[assignment]
        waits.clear()
        admin.drain(node, "ha-ops: refusals test")
        assert len(waits) == 1, waits  # one 409, then a fresh read and the write lands
        assert api.get(Node, node).spec.unschedulable is True  # type: ignore[union-attr]
        admin.resume(node)

        # 403: an account without RBAC, tried twice more (bindings take a moment to reach every server), then named.
        nobody_ns = f"{ns}-nobody"
        nobody = Client(KubeConfig.from_file(controller_kubeconfig(klab, api, tmp_path / "n.kubeconfig", nobody_ns,
                                                                   rbac=False)))  # fmt: skip
        clients.callback(nobody.close)
        waits.clear()
        refused = KubernetesScheduler(nobody, KubernetesOptions(pool="gpu"), sleep=recorded)
        with pytest.raises(KubernetesError, match=rf"get node {node}: 403 .*forbidden"):
            refused.node(node)
        assert len(waits) == 2, waits
        # Bad input: a clean error naming the node, never a traceback from the client.
        with pytest.raises(UnknownNode, match="no node 'gpu99'"):
            admin.node("gpu99")
        with pytest.raises(UnknownNode, match="'ctl1' is in pool None, not 'gpu'"):
            admin.node("ctl1")  # a real kubelet node, outside the GPU pool
    finally:
        clients.close()
        for kind, name in ((FlowSchema, ns), (PriorityLevelConfiguration, ns), (ClusterRoleBinding, f"{ns}-nodes"),
                           (ClusterRole, f"{ns}-nodes"), (Namespace, ns), (Namespace, f"{ns}-nobody")):  # fmt: skip
            with suppress(ApiError):
                api.delete(kind, name)
        api.patch(Node, node, {"metadata": {"labels": {"hao-refusals": None}}})


# --- the remediation controller itself, on Kubernetes -------------------------------------------------------------
CONTROLLER_NAMESPACE = "hao-remediation"


def controller_kubeconfig(klab: Lab, api: Client, path: Path, ns: str = CONTROLLER_NAMESPACE,
                          rbac: bool = True) -> Path:  # fmt: skip
    """A service account with exactly the RBAC infra/k8s gives the controller (none without `rbac`), and a
    kubeconfig with its token: the controllers below run with what they would have in their pods."""
    from ha_ops.iac.k8s_manifests import controller_cluster_role_rules, controller_role_rules

    account = "ha-ops-controller"
    subject = [{"kind": "ServiceAccount", "name": account, "namespace": ns}]
    manifests = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account, "namespace": ns}},
    ]
    manifests += [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "state", "namespace": ns},
         "rules": controller_role_rules()},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "state", "namespace": ns}, "subjects": subject,
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "state"}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": f"{ns}-nodes"},
         "rules": controller_cluster_role_rules()},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": f"{ns}-nodes"}, "subjects": subject,
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": f"{ns}-nodes"}},
    ] if rbac else []  # fmt: skip
    for manifest in manifests:
        api.apply(codecs.from_dict(manifest), force=True)
    request = ServiceAccount.Token(metadata=ObjectMeta(name=account, namespace=ns),
                                   spec=TokenRequestSpec(audiences=[], expirationSeconds=3600))  # fmt: skip
    token = api.create(request, account, namespace=ns).status.token
    path.write_text(yaml.safe_dump(token_kubeconfig(klab, token, "controller")))
    return path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def k8s_controller_config(klab: Lab, me: str, ports: dict[str, int], kubeconfig: Path, marker: Path) -> dict:
    """A controller as infra/k8s configures one (the Kubernetes scheduler; lease and state in the API, no state
    folder), reaching the lab's nodes behind the KWOK nodes over ssh on the management network for the repair
    steps. Validation passes only once `marker` exists: until then the node climbs the ladder to `replace`."""
    from ha_ops.lab import mgmt
    from ha_ops.lab.controllers import LAB_LADDER
    from ha_ops.lab.paths import NODE_DIR
    from ha_ops.lab.sshd import client_key, known_hosts

    gpus = klab.ctx.layout.nodes_with_role("gpu")
    fake = NODE_DIR / "gpus"
    python = sys.executable
    return {
        "id": me, "listen_address": "127.0.0.1", "port": ports[me],
        "peers": [f"http://127.0.0.1:{p}" for name, p in ports.items() if name != me],
        "insecure": True,  # plain HTTP on 127.0.0.1, meant (the layer's own pods speak mutual TLS: see above)
        "scheduler": "kubernetes", "partition": "gpu",
        "kubernetes": {"kubeconfig": str(kubeconfig), "eviction_timeout_s": 5.0,
                       "lease": {"namespace": CONTROLLER_NAMESPACE, "name": "ha-ops-controller"},
                       "state": {"namespace": CONTROLLER_NAMESPACE, "prefix": "ha-ops-controller"}},
        "pools": {"gpu": {"nodes": [n.name for n in gpus if not n.spare], "spares": [n.name for n in gpus if n.spare]}},
        "ladder": LAB_LADDER, "node_poll_s": 1.0,
        "agent_silence_s": 15.0, "blind_after_s": 8.0,  # as the lab's: the agents below report every second
        "heartbeats": {"min_s": 1.0},
        "access": {
            "ssh_key": str(client_key(klab.ctx)), "known_hosts": str(known_hosts(klab.ctx)),
            "addresses": {n.name: str(mgmt.address(klab.ctx, n.name)) for n in gpus},
            "reset_gpu_command": f"{python} -m ha_ops gpu reset --backend fake --fake-dir {fake} --gpu {{gpu}}",
            "reboot_command": f"{python} -m ha_ops gpu reset --backend fake --fake-dir {fake} --all",
            "validate_command": f"test -e {marker} && {python} -m ha_ops health check --config "
                                f"{NODE_DIR / 'agent.yaml'}",
            "command_timeout_s": 30.0, "boot_wait_s": 5.0,
        },
    }  # fmt: skip


def http_json(url: str, body: dict | None = None, context: ssl.SSLContext | None = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="GET" if body is None else "POST",
                                     headers={"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(request, timeout=5, context=context) as answer:
        return json.loads(answer.read())


def leading(url: str, context: ssl.SSLContext | None = None) -> bool:
    try:
        return http_json(f"{url}/v1/state", context=context).get("state") is not None
    except OSError:
        return False


def agent_report(node: str, seq: int, xid79: bool) -> AgentReport:
    """What the agent on `node` sends (ha_ops.health.report): healthy, or an XID 79 on its GPU 1."""
    if not xid79:
        return AgentReport(node=node, seq=seq, agent_id=f"agent-{node}", sent_at=time.time(), state="healthy",
                           action="none", reason="healthy")  # fmt: skip
    message = "XID 79: GPU has fallen off the bus"
    finding = ReportFinding(check="xid", severity="critical", action="reboot_node", message=message, gpu=1, xid=79)
    return AgentReport(node=node, seq=seq, agent_id=f"agent-{node}", sent_at=time.time(), state="unhealthy",
                       action="reboot_node", reason=f"GPU1 xid: {message}", findings=[finding])  # fmt: skip


@contextmanager
def agents_reporting(nodes: list[str], urls: list[str], faulty: Callable[[str], bool],
                     tls_of: Callable[[str], ReloadingContext] | None = None) -> Iterator[None]:  # fmt: skip
    """Each node's agent, as a load generator: a report every second through the agent's own poster (the leader
    first; a standby answers 503, so the next is tried), an XID 79 while `faulty(node)`; with `tls_of`, over mutual
    TLS with the node's agent certificate."""
    stop = threading.Event()

    def agent(node: str) -> None:
        post, seq = HttpPoster(urls, timeout=1.0, context=tls_of(node) if tls_of else None), 0
        try:
            while not stop.is_set():
                seq += 1
                with suppress(ConnectionError):  # no controller leads for a moment (a failover): the next one tries
                    post(agent_report(node, seq, faulty(node)))
                stop.wait(1.0)
        finally:
            post.close()  # (its kept connections)

    threads = [threading.Thread(target=agent, args=(n,), daemon=True) for n in nodes]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)


def test_two_controllers_on_kubernetes_take_out_a_node_move_its_job_and_survive_the_leaders_death(
    klab: Lab, api: Client, tmp_path: Path
) -> None:
    """Line 1 and the failover of line 2 of issue 19, with the controllers as processes (`ha-ops controller run`),
    their RBAC the layer's and their lease and state in the API: an agent's XID 79 report on the node of a
    checkpointing Job; the node cordoned, tainted and its condition set; the Job's pod recreated elsewhere with its
    checkpoint path; the spare in; the node held after failed validations; the leader killed and the standby
    taking over with the state; `controller repaired` returning the node; every action audited once."""
    kubeconfig = controller_kubeconfig(klab, api, tmp_path / "controller.kubeconfig")
    scheduler = KubernetesScheduler(api, KubernetesOptions(pool="gpu"))
    spare = next(n.name for n in klab.ctx.layout.nodes_with_role("gpu") if n.spare)
    scheduler.set_partition_nodes("gpu", [n for n in scheduler.partition_nodes("gpu") if n != spare])
    checkpoint = "/mnt/checkpoints/train-9"
    api.apply(Namespace(metadata=ObjectMeta(name="ml2")), force=True)
    first = checkpointing_job(api, "ml2", "train9", checkpoint)
    node = first["spec"]["nodeName"]

    marker = tmp_path / "repaired"
    ports = {"ctl-a": free_port(), "ctl-b": free_port()}
    urls = {me: f"http://127.0.0.1:{port}" for me, port in ports.items()}
    procs: dict[str, subprocess.Popen] = {}
    for me in ports:
        config = tmp_path / f"{me}.yaml"
        config.write_text(yaml.safe_dump(k8s_controller_config(klab, me, ports, kubeconfig, marker)))
        with (tmp_path / f"{me}.log").open("w") as log:
            procs[me] = subprocess.Popen([sys.executable, "-m", "ha_ops", "controller", "run", "--config",
                                          str(config)], stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    gpu_nodes = [n.name for n in klab.ctx.layout.nodes_with_role("gpu")]

    def tier_label(name: str) -> str | None:
        return (api.get(Node, name).to_dict()["metadata"].get("labels") or {}).get(TIER_LABEL)

    tiers_before = {n: tier_label(n) for n in gpu_nodes if n not in (node, spare)}
    faulty = {"node": ""}  # the node whose agent reports the XID 79, until the node is repaired

    def logs() -> str:
        return "\n".join(f"--- {me}\n" + (tmp_path / f"{me}.log").read_text()[-3000:] for me in ports)

    agents = agents_reporting(gpu_nodes, [f"{u}/v1/reports" for u in urls.values()],
                              lambda n: n == faulty["node"] and not marker.exists())  # fmt: skip
    stack = ExitStack()
    try:
        stack.enter_context(agents)
        leader = wait_for("a leader", lambda: next((me for me, u in urls.items() if leading(u)), None),
                          timeout=30, interval=0.3)  # fmt: skip
        standby = next(me for me in ports if me != leader)
        faulty["node"] = node  # the XID 79

        def taken_out() -> dict | None:
            facts = api.get(Node, node).to_dict()
            conditions = {c["type"]: c for c in facts["status"].get("conditions") or []}
            tainted = [t for t in facts["spec"].get("taints") or [] if t["key"] == TAINT_KEY]
            out = facts["spec"].get("unschedulable") and tainted and conditions.get(CONDITION, {}).get("status")
            return facts if out == "False" else None

        facts = wait_for("the node cordoned, tainted and GpuHealthy=False", taken_out, timeout=30, interval=0.3)
        [condition] = [c for c in facts["status"]["conditions"] if c["type"] == CONDITION]
        assert "XID 79" in condition["message"], condition
        [moved] = wait_for("the Job's pod recreated on another node", lambda: [
            p for p in _pods(api, "ml2", "train9") if p["metadata"]["name"] != first["metadata"]["name"]],
            timeout=60, interval=0.5)  # fmt: skip
        assert moved["spec"]["nodeName"] != node
        assert moved["spec"]["containers"][0]["env"] == [{"name": "HA_OPS_CHECKPOINT_DIR", "value": checkpoint}]
        wait_for("the spare in service", lambda: spare in scheduler.partition_nodes("gpu"), timeout=30, interval=0.3)
        assert not [
            t for t in api.get(Node, spare).to_dict()["spec"].get("taints") or [] if t["key"] == SPARE_TAINT_KEY
        ]

        def phase(url: str) -> str | None:
            """The node's phase, and its rung while one runs (`replace`: held for a person)."""
            state = http_json(f"{url}/v1/state").get("state")
            record = state["nodes"][node] if state else None
            return record and "/".join(filter(None, (record["phase"], record["rung"])))

        wait_for("the node held for replacement", lambda: phase(urls[leader]) == "awaiting_repair/replace",
                 timeout=120, interval=0.5)  # fmt: skip
        # Its incident made it `standard` (issue 22): the tier published as a label, as Slurm gets Weight and features;
        # the nodes without incidents here keep the label they had (none, unless an earlier test's controllers, the
        # layer's pods, published one).
        wait_for("the node labelled with its tier",
                 lambda: tier_label(node) == "standard",
                 timeout=30, interval=0.5)  # fmt: skip
        others = [n for n in gpu_nodes if n not in (node, spare)]
        assert {n: tier_label(n) for n in others} == tiers_before, "a node without incidents was labelled"

        # The leader dies (kill -9, as a pod's container killed): the standby takes over with the shared state.
        killed_at = time.monotonic()
        procs[leader].kill()
        procs[leader].wait(10)
        wait_for("the standby leading", lambda: leading(urls[standby]), timeout=15, interval=0.1)
        takeover_s = time.monotonic() - killed_at
        print(f"\nleader {leader} killed: {standby} led {takeover_s:.1f} s later")
        assert takeover_s <= 5.0, logs()
        assert phase(urls[standby]) == "awaiting_repair/replace"  # the state came with it

        marker.touch()  # the node repaired by a person
        repaired = subprocess.run([sys.executable, "-m", "ha_ops", "controller", "repaired", node, "--url",
                                   urls[standby]], capture_output=True, text=True, timeout=30)  # fmt: skip
        assert repaired.returncode == 0, repaired.stdout + repaired.stderr

        def returned() -> bool:
            facts = api.get(Node, node).to_dict()
            conditions = {c["type"]: c["status"] for c in facts["status"].get("conditions") or []}
            tainted = [t for t in facts["spec"].get("taints") or [] if t["key"] == TAINT_KEY]
            return not facts["spec"].get("unschedulable") and not tainted and conditions.get(CONDITION) == "True"

        wait_for("the node returned", returned, timeout=60, interval=0.5)
        wait_for("the new leader recording it returned (on probation)",
                 lambda: (phase(urls[standby]) or "").startswith("returned"), timeout=15, interval=0.3)  # fmt: skip

        # Every action once, across both leaders; the chain intact and matching the state, read from the API.
        audit = AuditLog(ConfigMapDocuments(api, CONTROLLER_NAMESPACE, "ha-ops-controller"))
        entries = [json.loads(line) for line in audit.text().splitlines()]
        intents = [e["intent"] for e in entries if e.get("intent")]
        assert len(intents) == len(set(intents)), entries
        whats = [(e["what"], e["node"]) for e in entries]
        assert whats.count(("drain", node)) == 1 and whats.count(("resume", node)) == 1, whats
        assert {e["who"].split()[0] for e in entries} == {leader, standby}, whats
        verify = [sys.executable, "-m", "ha_ops", "audit", "verify", "--config", str(tmp_path / f"{standby}.yaml")]
        verified = subprocess.run(verify, capture_output=True, text=True, timeout=30)
        assert verified.returncode == 0 and "chain intact and matching" in verified.stdout, (
            verified.stdout + verified.stderr
        )
    except BaseException:
        print(logs())
        raise
    finally:
        stack.close()
        for proc in procs.values():
            if proc.poll() is None:
                proc.terminate()
                proc.wait(10)
        api.delete(Namespace, "ml2")
        api.delete(Namespace, CONTROLLER_NAMESPACE)
        for kind in (ClusterRoleBinding, ClusterRole):
            api.delete(kind, f"{CONTROLLER_NAMESPACE}-nodes")


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
    # A node without work: the tests before may leave pods ending in namespaces being deleted.
    node = next(n for n in sorted(kubernetes.ready_nodes(api) & set(scheduler.partition_nodes("gpu")))
                if not scheduler.jobs_on(n))  # fmt: skip
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
