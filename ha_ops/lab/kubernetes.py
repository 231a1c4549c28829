"""Kubernetes in the lab, for a spec with a `kubernetes:` section: etcd, kube-apiserver, kube-controller-manager and
kube-scheduler on loopback, built by scripts/tools.sh. TLS everywhere from the lab's CA (etcd too), RBAC on, each
component with its own client certificate, and an admin kubeconfig at <lab>/kubeconfig. KWOK stands in for the
kubelets: the spec's GPU nodes are registered as Nodes with their GPUs (`nvidia.com/gpu`) and failure-domain labels,
KWOK keeps them Ready and turns pods bound to them Running: KWOK is their kubelet, so a GPU node the lab's BMC powers
off leaves KWOK's care (`power`) and the node lifecycle controller finds it gone, as it would a real one.

With `remediation.scheduler: kubernetes` the lab's remediation controllers act through this API as their own user
(`ha-ops:controller`, with exactly the RBAC infra/k8s gives the controller's service account), lease and state kept
in the API; they reach it through the relay on their nodes (ha_ops.lab.kubelets)."""

from __future__ import annotations

import base64
import dataclasses
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx2
import yaml
from lightkube import ApiError, Client, codecs
from lightkube.resources.core_v1 import Namespace, Node
from lightkube.resources.rbac_authorization_v1 import ClusterRoleBinding

from ha_ops.lab import kwok
from ha_ops.lab.context import LabContext, ServiceDef
from ha_ops.lab.pki import service_account_keys
from ha_ops.schedulers.kubernetes import POOL_LABEL, SPARE_LABEL, SPARE_TAINT_KEY, client_from_kubeconfig
from ha_ops.security.pki import CertificateAuthority
from ha_ops.spec.layout import NodeLayout
from ha_ops.util.atomic import write_atomic
from ha_ops.util.tools import tool

# KWOK manages the Nodes with this label at "fake"; the lab's BMC sets it to "powered-off" for a node it powers off.
# A label, not KWOK's usual annotation: KWOK 0.8 drops a node that leaves its label selector but keeps renewing the
# lease of one whose annotation changed.
KWOK_LABEL = "kwok.x-k8s.io/node"
ZONE_LABEL = "topology.kubernetes.io/zone"
RACK_LABEL = "topology.ha-ops.io/rack"
DOMAIN_LABEL = "topology.ha-ops.io/failure-domain"
GPU_RESOURCE = "nvidia.com/gpu"
LOOPBACK = "127.0.0.1"
SERVICE_PORT = 443
CONTROLLER_USER = "ha-ops:controller"
CONTROLLER_NAMESPACE = "ha-ops"


def node_count(ctx: LabContext) -> int:
    """The GPU nodes the lab's Kubernetes holds: the spec's and the extra KWOK ones."""
    assert ctx.spec.kubernetes is not None
    return len(ctx.layout.nodes_with_role("gpu")) + ctx.spec.kubernetes.extra_kwok_nodes


def enabled(ctx: LabContext) -> bool:
    return ctx.spec.kubernetes is not None


def folder(ctx: LabContext) -> Path:
    return ctx.paths.root / "kubernetes"


def kubeconfig_path(ctx: LabContext) -> Path:
    """The admin kubeconfig (group system:masters), for people and tests."""
    return ctx.paths.root / "kubeconfig"


def service_ip(ctx: LabContext) -> str:
    """The `kubernetes` Service's address, on the loopback of each node that reaches the API (ha_ops.lab.kubelets)."""
    assert ctx.spec.kubernetes is not None
    return str(next(ctx.spec.kubernetes.service_cidr.hosts()))


def in_node_server(ctx: LabContext) -> str:
    """The API as a node of the lab reaches it: the Service address, relayed to the API server."""
    return f"https://{service_ip(ctx)}:{SERVICE_PORT}"


def controllers_use_it(ctx: LabContext) -> bool:
    """Whether the lab's remediation controllers act on Kubernetes (`remediation.scheduler: kubernetes`)."""
    return enabled(ctx) and ctx.spec.remediation is not None and ctx.spec.scheduler == "kubernetes"


def controller_kubeconfig_path(ctx: LabContext) -> Path:
    return folder(ctx) / "controller.kubeconfig"


def _ports(ctx: LabContext) -> tuple[int, int]:
    assert ctx.spec.kubernetes is not None
    return ctx.spec.kubernetes.api_port, ctx.spec.kubernetes.etcd_port


def api_server(ctx: LabContext) -> str:
    return f"https://{LOOPBACK}:{_ports(ctx)[0]}"


# Each component's client identity: (file name, CN = user, O = groups). The built-in ClusterRoles bind the
# controller manager's and the scheduler's users; KWOK and the admin act for the whole cluster.
CLIENTS = {
    "admin": ("kubernetes-admin", ("system:masters",)),
    "controller-manager": ("system:kube-controller-manager", ()),
    "scheduler": ("system:kube-scheduler", ()),
    "kwok": ("ha-ops:kwok", ("system:masters",)),
}


def prepare(ctx: LabContext) -> None:
    """Certificates, keys and kubeconfigs (kept when they exist, so a lab brought up again keeps its identities)."""
    if not enabled(ctx):
        return
    assert ctx.spec.kubernetes is not None
    pki = folder(ctx) / "pki"
    ca = CertificateAuthority(pki)
    ca.ensure(f"ha-ops lab {ctx.spec.name} CA")
    names = (LOOPBACK, "localhost", service_ip(ctx), "kubernetes", "kubernetes.default", "kubernetes.default.svc")
    ca.issue("apiserver", "kube-apiserver", server_names=names, client=False)
    ca.issue("etcd", "etcd", server_names=(LOOPBACK, "localhost"), client=False)
    ca.issue("apiserver-etcd-client", "kube-apiserver-etcd-client")
    service_account_keys(pki)
    for name, (user, groups) in CLIENTS.items():
        cert = ca.issue(f"client-{name}", user, groups=groups)
        config = kubeconfig(api_server(ctx), ca.paths.cert, cert.cert, cert.key, user)
        path = kubeconfig_path(ctx) if name == "admin" else folder(ctx) / f"{name}.kubeconfig"
        write_atomic(path, yaml.safe_dump(config, sort_keys=False), mode=0o600)
    if controllers_use_it(ctx):
        cert = ca.issue("client-controller", CONTROLLER_USER)
        config = kubeconfig(in_node_server(ctx), ca.paths.cert, cert.cert, cert.key, CONTROLLER_USER)
        write_atomic(controller_kubeconfig_path(ctx), yaml.safe_dump(config, sort_keys=False), mode=0o600)
    write_atomic(folder(ctx) / "kwok.yaml", yaml.safe_dump(kwok.configuration(node_count(ctx)), sort_keys=False))


def grant_controllers(ctx: LabContext, api: Client) -> None:
    """The controllers' namespace and their user's RBAC: the very rules infra/k8s binds to the controller's service
    account (nodes, pods, evictions, jobs cluster-wide; its Lease and ConfigMaps in its namespace)."""
    if not controllers_use_it(ctx):
        return
    from ha_ops.iac.k8s_manifests import controller_cluster_role_rules, controller_role_rules

    rbac = "rbac.authorization.k8s.io"
    subjects = [{"apiGroup": rbac, "kind": "User", "name": CONTROLLER_USER}]
    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": CONTROLLER_NAMESPACE}}
    ]
    for kind, rules in (("Role", controller_role_rules()), ("ClusterRole", controller_cluster_role_rules())):
        meta = {"name": "ha-ops-lab-controller", **({"namespace": CONTROLLER_NAMESPACE} if kind == "Role" else {})}
        objects += [{"apiVersion": f"{rbac}/v1", "kind": kind, "metadata": meta, "rules": rules},
                    {"apiVersion": f"{rbac}/v1", "kind": f"{kind}Binding", "metadata": meta, "subjects": subjects,
                     "roleRef": {"apiGroup": rbac, "kind": kind, "name": meta["name"]}}]  # fmt: skip
    for obj in objects:
        api.apply(codecs.from_dict(obj), force=True)


def kwok_node(ctx: LabContext, name: str) -> bool:
    """A GPU node whose kubelet KWOK plays (not one with a real kubelet)."""
    assert ctx.spec.kubernetes is not None
    layout = {n.name: n for n in ctx.layout.nodes_with_role("gpu")}
    return name in layout and name not in ctx.spec.kubernetes.kubelet_nodes


def power(ctx: LabContext, name: str, on: bool) -> None:
    """A KWOK node's power, as its kubelet would follow it: off, KWOK stops managing the node (no lease renewals, no
    status), so the node lifecycle controller marks it NotReady after its grace period and taints it unreachable, as
    for a real node that died; on, KWOK takes it back and it is Ready again. Nothing for other nodes (a real
    kubelet dies with its node's processes)."""
    if not enabled(ctx) or not kwok_node(ctx, name):
        return
    patch = {"metadata": {"labels": {KWOK_LABEL: "fake" if on else "powered-off"}}}
    with client(ctx, timeout=10) as api:
        api.patch(Node, name, patch)


# Started once the API server's RBAC bootstrap is done (api_ready): a controller manager started before it gives up
# after 10 s of 403 from /healthz and exits for good.
COMPONENTS = ("kube-controller-manager", "kube-scheduler", "kwok")


def api_services(ctx: LabContext) -> list[ServiceDef]:
    """etcd and the API server (etcd first: the API server waits for it)."""
    return [s for s in services(ctx) if s.service not in COMPONENTS]


def component_services(ctx: LabContext) -> list[ServiceDef]:
    """The controller manager, the scheduler and KWOK (COMPONENTS)."""
    return [s for s in services(ctx) if s.service in COMPONENTS]


def services(ctx: LabContext) -> list[ServiceDef]:
    """The control plane and KWOK, as root-namespace daemons on loopback, in start order."""
    if not enabled(ctx):
        return []
    assert ctx.spec.kubernetes is not None
    k8s, logs = folder(ctx), ctx.paths.host_logs
    pki = k8s / "pki"
    api_port, etcd_port = _ports(ctx)
    peer = f"http://{LOOPBACK}:{etcd_port + 1}"
    etcd = [
        str(tool("etcd")), "--name", "lab", "--data-dir", str(k8s / "etcd"),
        "--listen-client-urls", f"https://{LOOPBACK}:{etcd_port}",
        "--advertise-client-urls", f"https://{LOOPBACK}:{etcd_port}",
        "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", f"lab={peer}",
        "--cert-file", str(pki / "etcd.crt"), "--key-file", str(pki / "etcd.key"),
        "--trusted-ca-file", str(pki / "ca.crt"), "--client-cert-auth",
        "--quota-backend-bytes", str(2 * 1024**3), "--log-level", "warn",
    ]  # fmt: skip
    apiserver = [
        str(tool("kube-apiserver")),
        f"--etcd-servers=https://{LOOPBACK}:{etcd_port}", f"--etcd-cafile={pki / 'ca.crt'}",
        f"--etcd-certfile={pki / 'apiserver-etcd-client.crt'}", f"--etcd-keyfile={pki / 'apiserver-etcd-client.key'}",
        f"--bind-address={LOOPBACK}", f"--advertise-address={LOOPBACK}", f"--secure-port={api_port}",
        f"--tls-cert-file={pki / 'apiserver.crt'}", f"--tls-private-key-file={pki / 'apiserver.key'}",
        f"--client-ca-file={pki / 'ca.crt'}", "--authorization-mode=Node,RBAC", "--anonymous-auth=false",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={pki / 'sa.pub'}", f"--service-account-signing-key-file={pki / 'sa.key'}",
        f"--service-cluster-ip-range={ctx.spec.kubernetes.service_cidr}", f"--cert-dir={k8s / 'apiserver-certs'}",
        # Endpoints may not hold a loopback address: the `kubernetes` Service gets none, instead of an error loop.
        "--endpoint-reconciler-type=none", "--profiling=false",
    ]  # fmt: skip

    def component(name: str, binary: str, *extra: str) -> list[str]:
        config = k8s / f"{name}.kubeconfig"
        return [str(tool(binary)), f"--kubeconfig={config}", f"--authentication-kubeconfig={config}",
                f"--authorization-kubeconfig={config}", "--leader-elect=false", "--secure-port=0",
                f"--bind-address={LOOPBACK}", *extra]  # fmt: skip

    controller_manager = component(
        "controller-manager", "kube-controller-manager",
        f"--service-account-private-key-file={pki / 'sa.key'}", f"--root-ca-file={pki / 'ca.crt'}",
        "--use-service-account-credentials=true", f"--cert-dir={k8s / 'controller-manager-certs'}",
        f"--node-monitor-grace-period={kwok.node_monitor_grace_s(node_count(ctx))}s", "--node-monitor-period=2s",
        # Its client's default rate (20/s, bursts of 30) clears a large lab's not-ready taints a few a second.
        "--kube-api-qps=200", "--kube-api-burst=400",
    )  # fmt: skip
    scheduler = component("scheduler", "kube-scheduler")
    kwok_argv = [
        str(tool("kwok")), f"--kubeconfig={k8s / 'kwok.kubeconfig'}", f"--config={tool('kwok-stages.yaml')}",
        f"--config={k8s / 'kwok.yaml'}",
        "--manage-all-nodes=false", f"--manage-nodes-with-label-selector={KWOK_LABEL}=fake",
        f"--node-ip={LOOPBACK}", "--cidr=10.244.0.1/16", f"--server-address={LOOPBACK}:{api_port + 2}",
        f"--node-lease-duration-seconds={kwok.lease_s(node_count(ctx))}",
    ]  # fmt: skip
    return [
        ServiceDef("host", "etcd", etcd, logs / "etcd.log"),
        ServiceDef("host", "kube-apiserver", apiserver, logs / "kube-apiserver.log"),
        ServiceDef("host", "kube-controller-manager", controller_manager, logs / "kube-controller-manager.log"),
        ServiceDef("host", "kube-scheduler", scheduler, logs / "kube-scheduler.log"),
        ServiceDef("host", "kwok", kwok_argv, logs / "kwok.log"),
    ]


def kubeconfig(server: str, ca: Path, cert: Path, key: Path, user: str) -> dict[str, Any]:
    """A kubeconfig with the certificates inlined (kubectl, client libraries and the components all read it)."""

    def b64(path: Path) -> str:
        return base64.b64encode(path.read_bytes()).decode()

    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "lab", "cluster": {"server": server, "certificate-authority-data": b64(ca)}}],
        "users": [{"name": user, "user": {"client-certificate-data": b64(cert), "client-key-data": b64(key)}}],
        "contexts": [{"name": user, "context": {"cluster": "lab", "user": user}}],
        "current-context": user,
    }


def client(ctx: LabContext, timeout: float = 30.0, identity: str = "admin") -> Client:
    """A lightkube client as `identity` (admin, or one of CLIENTS' components)."""
    path = kubeconfig_path(ctx) if identity == "admin" else folder(ctx) / f"{identity}.kubeconfig"
    return client_from_kubeconfig(path, timeout_s=timeout)


def api_ready(api: Client) -> bool:
    """The API answers and its bootstrap is done: the system namespaces, and the RBAC bindings of the components
    (before them the scheduler and the controller manager are refused; seen in CI)."""
    try:
        if not {n.metadata.name for n in api.list(Namespace) if n.metadata} >= {"default", "kube-system"}:
            return False
        bindings = {b.metadata.name for b in api.list(ClusterRoleBinding) if b.metadata}
        return {"system:kube-scheduler", "system:kube-controller-manager"} <= bindings
    except (ApiError, httpx2.HTTPError, OSError):
        return False


def gpu_labels(node: NodeLayout, pool: str) -> dict[str, str]:
    """What a GPU node carries as GPU feature discovery and ha-ops label it: its GPUs, its pool, a spare's mark."""
    return {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": node.gpu_model or "unknown", POOL_LABEL: pool,
            **({SPARE_LABEL: "true"} if node.spare else {})}  # fmt: skip


def spare_taints(node: NodeLayout) -> list[dict[str, str]]:
    """A spare carries the spare taint until it stands in."""
    return [{"key": SPARE_TAINT_KEY, "value": "true", "effect": "NoSchedule"}] if node.spare else []


def node_object(node: NodeLayout, domain_labels: dict[str, str], pool: str) -> dict[str, Any]:
    """A GPU node as KWOK manages it: its GPUs as allocatable `nvidia.com/gpu`, its failure domain as labels, its
    pool as ha-ops labels it (schedulers/kubernetes.py)."""
    capacity = {"cpu": str(node.cpus), "memory": f"{node.memory_mb}Mi", "pods": "110", GPU_RESOURCE: str(node.gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node.name,
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                KWOK_LABEL: "fake",
                "kubernetes.io/hostname": node.name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                **gpu_labels(node, pool),
                **domain_labels,
            },
        },
        "spec": {"taints": spare_taints(node)},
        "status": {"capacity": capacity, "allocatable": capacity},
    }


def gpu_nodes(ctx: LabContext) -> list[dict[str, Any]]:
    """The Node objects of the spec's GPU nodes (but those with a real kubelet: they register themselves), plus
    `extra_kwok_nodes` more spread over the same domains."""
    assert ctx.spec.kubernetes is not None
    real = ctx.layout.nodes_with_role("gpu")
    pool = ctx.spec.gpu_partition
    out = [node_object(n, domain_labels(ctx, n.domain), pool) for n in real
           if n.name not in ctx.spec.kubernetes.kubelet_nodes]  # fmt: skip
    for i in range(ctx.spec.kubernetes.extra_kwok_nodes):
        model = real[i % len(real)]
        extra = dataclasses.replace(model, name=f"kwok-gpu{i + 1}", spare=False)
        out.append(node_object(extra, domain_labels(ctx, extra.domain), pool))
    return out


def domain_labels(ctx: LabContext, domain: str) -> dict[str, str]:
    d = ctx.spec.domain(domain)
    return {ZONE_LABEL: d.zone, RACK_LABEL: d.rack, DOMAIN_LABEL: d.name}


def register_nodes(ctx: LabContext, api: Client) -> int:
    """Create the GPU nodes that are not registered yet; returns how many were created."""
    have = {n.metadata.name for n in api.list(Node, labels={"type": "kwok"}) if n.metadata}

    def create(node: dict[str, Any]) -> int:
        try:
            api.create(codecs.from_dict(node))
            return 1
        except ApiError as exc:
            if exc.status.code != 409:  # created meanwhile
                raise
            return 0

    # Several at once: one at a time, 25,000 nodes took minutes of round trips.
    with ThreadPoolExecutor(max_workers=8) as pool:
        return sum(pool.map(create, [n for n in gpu_nodes(ctx) if n["metadata"]["name"] not in have]))


def ready_nodes(api: Client, labels: dict[str, str] | None = None) -> set[str]:
    """The Ready nodes among those with `labels` (default: KWOK's)."""
    ready = set()
    for node in api.list(Node, labels=labels or {"type": "kwok"}):
        conditions = node.status.conditions if node.status and node.status.conditions else []
        if node.metadata and any(c.type == "Ready" and c.status == "True" for c in conditions):
            ready.add(str(node.metadata.name))
    return ready


def problems(ctx: LabContext, api: Client | None = None) -> list[str]:
    """What keeps the lab's Kubernetes from being usable: the API not ready, GPU nodes not Ready."""
    if not enabled(ctx):
        return []
    if api is None:
        with client(ctx, timeout=10) as own:
            return problems(ctx, own)
    if not api_ready(api):
        return [f"kube-apiserver at {api_server(ctx)} not ready"]
    want = {n["metadata"]["name"] for n in gpu_nodes(ctx)}
    missing = sorted(want - ready_nodes(api))
    return [f"{len(missing)} GPU node(s) not Ready in Kubernetes: {', '.join(missing[:5])}"] if missing else []


def summary(ctx: LabContext) -> dict[str, Any]:
    """For `lab status`: the API server and the kubeconfig."""
    return {"api_server": api_server(ctx), "kubeconfig": str(kubeconfig_path(ctx))} if enabled(ctx) else {}
