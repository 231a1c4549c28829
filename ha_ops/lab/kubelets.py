"""Real Kubernetes nodes in the lab: the spec's `kubernetes.kubelet_nodes` run a kubelet (built from the pinned
Kubernetes module by scripts/tools.sh) with containerd from Debian, inside the node's own namespaces, so the pods
bound there run as real containers. KWOK keeps standing in for the other GPU nodes, for scale; a GPU node named here
registers itself with the labels KWOK's nodes carry, its fake GPUs advertised, and a taint only the agent tolerates.

Per node, everything lives in its folder (`<node>/k8s`): containerd's root and socket, the kubelet's root, the CNI
configuration. The places kubelet and the CNI plugins write whatever their configuration says (/var/lib/kubelet for
the device-plugin socket, /var/log/pods and /var/log/containers, /var/lib/cni) are bind-mounted from the node's
folder inside the node's mount namespace, so two kubelet nodes never share a file and nothing is left on this
machine. Pods get addresses from the CNI bridge plugin, one /24 of 10.245.0.0/16 per node (KWOK's fake pods use
10.244.0.0/16), routed through the management network to this machine and the other kubelet nodes. The
`kubernetes` Service's address (10.96.0.1:443) is on each node's loopback, relayed to the API
server by ha_ops.lab.api_proxy: kubelets and in-cluster clients reach the API as they do on a cluster.

This machine's kernel refuses a negative oom_score_adj even to root (no CAP_SYS_RESOURCE): containerd clamps
the sandbox's -998 to its own (restrict_oom_score_adj), or runc fails every pod with "can't get final child's PID".
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml
from lightkube import Client
from lightkube.resources.core_v1 import Node

from ha_ops.lab import kubernetes, mgmt, netns
from ha_ops.lab.context import LabContext, ServiceDef
from ha_ops.lab.state import LabState
from ha_ops.security.pki import CertificateAuthority
from ha_ops.transport.lab import LabTransport
from ha_ops.util.atomic import write_atomic
from ha_ops.util.proc import run
from ha_ops.util.tools import TOOLS_BIN, MissingTool, tool

POD_CIDR = ipaddress.IPv4Network("10.245.0.0/16")
K8S_NAMESPACE = "k8s.io"  # containerd's namespace for the CRI's images and containers
PAUSE_IMAGE = "localhost/ha-ops/pause:lab"
# Built by `make setup` (scripts/image.sh --pause): no registry serves registry.k8s.io/pause here.
PAUSE_TARBALL = TOOLS_BIN.parent / "images" / "pause-lab.tar"
CNI_PLUGINS = Path("/usr/lib/cni")  # Debian's containernetworking-plugins
LABEL_PREFIX = "ha-ops.io/"
LAB_LABEL = "ha-ops.io/lab-kubelet"
LAB_TAINT = {"key": LAB_LABEL, "value": "true", "effect": "NoSchedule"}
# What kubelet and the CNI plugins write outside their configured folders: private per node (a bind mount from
# the node's folder in the node's mount namespace).
PRIVATE_DIRS = ("/var/lib/kubelet", "/var/log/pods", "/var/log/containers", "/var/lib/cni")


def names(ctx: LabContext) -> list[str]:
    return list(ctx.spec.kubernetes.kubelet_nodes) if ctx.spec.kubernetes is not None else []


def folder(ctx: LabContext, node: str) -> Path:
    return ctx.node_dir(node) / "k8s"


def runtime_socket(ctx: LabContext, node: str) -> Path:
    return folder(ctx, node) / "containerd.sock"


def pod_subnet(ctx: LabContext, node: str) -> ipaddress.IPv4Network:
    return list(POD_CIDR.subnets(new_prefix=24))[names(ctx).index(node)]


def labels(ctx: LabContext, node: str) -> dict[str, str]:
    """Its failure domain, as on the GPU nodes, and its roles (`ha-ops.io/controller=true`): kubelet may not set
    node-role.kubernetes.io labels on itself. A GPU node also gets the GPU and pool labels KWOK's nodes carry."""
    layout = ctx.layout.node(node)
    out = {**kubernetes.domain_labels(ctx, layout.domain), LAB_LABEL: "true"}
    out.update({f"{LABEL_PREFIX}{role}": "true" for role in layout.roles})
    if layout.gpus:
        out.update(kubernetes.gpu_labels(layout, ctx.spec.gpu_partition))
    return out


def taints(ctx: LabContext, node: str) -> list[dict[str, str]]:
    """A GPU node with a real kubelet keeps the lab's pretend workloads (images that exist nowhere) on the KWOK
    nodes: only pods tolerating LAB_TAINT (the agent, as the lab's layer config says) run there."""
    layout = ctx.layout.node(node)
    return [LAB_TAINT, *kubernetes.spare_taints(layout)] if layout.gpus else []


def gpu_capacity_patch(ctx: LabContext, node: str) -> dict | None:
    """Its fake GPUs as `nvidia.com/gpu` in the node's status, as a device plugin would advertise them (an extended
    resource the kubelet keeps); None for a node without GPUs."""
    gpus = ctx.layout.node(node).gpus
    if not gpus:
        return None
    advertised = {kubernetes.GPU_RESOURCE: str(gpus)}
    return {"status": {"capacity": advertised, "allocatable": advertised}}


def prepare(ctx: LabContext) -> None:
    """Each node's client certificate (system:node:<name> in system:nodes), kubeconfig, containerd, kubelet and CNI
    configuration."""
    if not names(ctx):
        return
    pki = kubernetes.folder(ctx) / "pki"
    ca = CertificateAuthority(pki)
    server = kubernetes.in_node_server(ctx)
    for node in names(ctx):
        base = folder(ctx, node)
        for sub in ("cni", "kubelet", "containerd", *(p.strip("/").replace("/", "-") for p in PRIVATE_DIRS)):
            (base / sub).mkdir(parents=True, exist_ok=True)
        cert = ca.issue(f"kubelet-{node}", f"system:node:{node}", groups=("system:nodes",))
        config = kubernetes.kubeconfig(server, ca.paths.cert, cert.cert, cert.key, f"system:node:{node}")
        write_atomic(base / "kubelet.kubeconfig", yaml.safe_dump(config, sort_keys=False), mode=0o600)
        write_atomic(base / "containerd.toml", _containerd_config(ctx, node))
        write_atomic(base / "kubelet.yaml", yaml.safe_dump(_kubelet_config(ctx, node), sort_keys=False))
        write_atomic(base / "cni" / "10-lab.conflist", json.dumps(_cni_config(ctx, node), indent=1))


def _containerd_config(ctx: LabContext, node: str) -> str:
    base = folder(ctx, node) / "containerd"
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{base / "root"}"
state = "{base / "state"}"
[grpc]
  address = "{runtime_socket(ctx, node)}"
[plugins."io.containerd.internal.v1.opt"]
  path = "{base / "opt"}"
[{cri}]
  sandbox_image = "{PAUSE_IMAGE}"
  disable_apparmor = true
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
[{cri}.cni]
  bin_dir = "{CNI_PLUGINS}"
  conf_dir = "{folder(ctx, node) / "cni"}"
[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"
[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[{cri}.containerd.runtimes.runc.options]
  BinaryName = "/usr/sbin/runc"
  SystemdCgroup = false
"""


def _kubelet_config(ctx: LabContext, node: str) -> dict:
    ca = kubernetes.folder(ctx) / "pki" / "ca.crt"
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(ca)}},
        "authorization": {"mode": "Webhook"},
        "readOnlyPort": 0,
        "healthzPort": 0,
        "containerRuntimeEndpoint": f"unix://{runtime_socket(ctx, node)}",
        "podLogsDir": "/var/log/pods",
        # This machine: cgroup v1 with no hugetlb controller, no swap accounting, no systemd; the lab's nodes
        # share one kernel, so node allocatable and eviction thresholds would only measure the machine.
        "cgroupDriver": "cgroupfs",
        "cgroupsPerQOS": False,
        "enforceNodeAllocatable": [],
        "failSwapOn": False,
        "failCgroupV1": False,
        "evictionHard": {},
        "imageGCHighThresholdPercent": 100,
        "localStorageCapacityIsolation": False,
        "makeIPTablesUtilChains": False,
        "resolvConf": "",  # no cluster DNS in the lab: pods get no resolver rather than this machine's
        "serializeImagePulls": False,
    }  # fmt: skip


def _cni_config(ctx: LabContext, node: str) -> dict:
    subnet = pod_subnet(ctx, node)
    return {
        "cniVersion": "0.4.0",
        "name": "lab",
        "plugins": [
            {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": False, "hairpinMode": True,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": str(subnet)}]],
                      "routes": [{"dst": "0.0.0.0/0"}]}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }  # fmt: skip


def api_nodes(ctx: LabContext) -> list[str]:
    """The nodes that reach the API through the `kubernetes` Service's address: the kubelet nodes, and the controller
    nodes when the lab's remediation controllers act on Kubernetes."""
    if not kubernetes.enabled(ctx):
        return []
    controllers = (
        [n.name for n in ctx.layout.nodes_with_role("controller")] if kubernetes.controllers_use_it(ctx) else []
    )
    return [*names(ctx), *(n for n in controllers if n not in names(ctx))]


def network(ctx: LabContext, state: LabState) -> None:
    """On each node that reaches the API: the Service address on loopback. On each kubelet node also forwarding for
    its pods, and the private folders."""
    for node in api_nodes(ctx):
        netns.ip("addr", "replace", f"{kubernetes.service_ip(ctx)}/32", "dev", "lo", netns=ctx.netns(node))
    for node in names(ctx):
        ns = ctx.netns(node)
        netns.sysctl(ns, "net.ipv4.ip_forward", "1")
        holder = state.nodes[node].holder_pid
        assert holder is not None
        transport = LabTransport(node, holder)
        # A routed pod network: each node's pod /24 through its management address, from this machine (the
        # operator's, as with a BGP-announced pod network), from the other kubelet nodes, and from the monitoring
        # node (Prometheus' scrapes, the audit sink's answers to the controller pods).
        via = str(mgmt.address(ctx, node))
        monitoring = ctx.spec.monitoring.host.name
        peers = [o for o in names(ctx) if o != node] + ([monitoring] if monitoring not in names(ctx) else [])
        for other in [None, *(ctx.netns(o) for o in peers)]:
            netns.ip("route", "replace", str(pod_subnet(ctx, node)), "via", via, netns=other)
        for path in PRIVATE_DIRS:
            Path(path).mkdir(parents=True, exist_ok=True)  # the mount point: an empty folder on this machine
            private = folder(ctx, node) / path.strip("/").replace("/", "-")
            if not transport.run(["mountpoint", "-q", path], check=False, timeout=5).ok:
                transport.run(["mount", "--bind", str(private), path], check=True, timeout=5)


def relay_services(ctx: LabContext) -> list[ServiceDef]:
    """The API relay: the Service address on every node of api_nodes, to the API server on this machine's loopback
    (started before the kubelets and the controllers that need it)."""
    if not api_nodes(ctx):
        return []
    relay = [sys.executable, "-m", "ha_ops.lab.api_proxy", "--target",
             f"{kubernetes.LOOPBACK}:{ctx.spec.kubernetes.api_port}"]  # type: ignore[union-attr]  # fmt: skip
    for node in api_nodes(ctx):
        relay += ["--listen", f"{ctx.netns(node)}={kubernetes.service_ip(ctx)}:{kubernetes.SERVICE_PORT}"]
    return [ServiceDef("host", "kube-api-proxy", relay, ctx.paths.host_logs / "kube-api-proxy.log")]


def runtime_services(ctx: LabContext) -> list[ServiceDef]:
    """containerd on each kubelet node."""
    out = []
    for node in names(ctx):
        argv = ["containerd", "--config", str(folder(ctx, node) / "containerd.toml")]
        out.append(ServiceDef(node, "containerd", argv, ctx.node_dir(node) / "log" / "containerd.log"))
    return out


def kubelet_services(ctx: LabContext) -> list[ServiceDef]:
    out = []
    for node in names(ctx):
        base = folder(ctx, node)
        address = ctx.layout.node(node).address
        node_labels = ",".join(f"{k}={v}" for k, v in labels(ctx, node).items())
        node_taints = ",".join(f"{t['key']}={t['value']}:{t['effect']}" for t in taints(ctx, node))
        argv = [str(tool("kubelet")), f"--config={base / 'kubelet.yaml'}",
                f"--kubeconfig={base / 'kubelet.kubeconfig'}", f"--root-dir={base / 'kubelet'}",
                f"--hostname-override={node}", f"--node-ip={address}", f"--node-labels={node_labels}",
                *([f"--register-with-taints={node_taints}"] if node_taints else []), "--v=1"]  # fmt: skip
        out.append(ServiceDef(node, "kubelet", argv, ctx.node_dir(node) / "log" / "kubelet.log"))
    return out


def _ctr(socket: Path, *args: str) -> list[str]:
    return ["ctr", "--address", str(socket), "--namespace", K8S_NAMESPACE, *args]


def ctr(ctx: LabContext, node: str, *args: str, timeout: float = 120) -> str:
    return run(_ctr(runtime_socket(ctx, node), *args), check=True, timeout=timeout).stdout


def has_image(ctx: LabContext, node: str, reference: str) -> bool:
    return reference in ctr(ctx, node, "images", "list", "--quiet").split()


def import_image(ctx: LabContext, tarball: Path, nodes: list[str] | None = None) -> str:
    """Load an OCI archive into the runtime of each kubelet node (in parallel); returns the image's manifest digest
    (`sha256:...`), by which a pod can name it (`name@sha256:...`, as the HA policy requires)."""
    targets = names(ctx) if nodes is None else nodes
    if not tarball.is_file():
        raise MissingTool(f"{tarball} is missing: build it with scripts/image.sh (part of `make setup`)")

    manifest = json.loads(run(["tar", "-xOf", str(tarball), "index.json"], check=True).stdout)["manifests"][0]
    name = manifest["annotations"]["org.opencontainers.image.ref.name"].rpartition(":")[0]

    def load(node: str) -> None:
        # --digests with the image's name: also `name@sha256:...`, the reference the CRI looks up for a digest.
        ctr(ctx, node, "images", "import", "--digests", "--base-name", name, str(tarball))

    with ThreadPoolExecutor(max_workers=max(1, len(targets))) as pool:
        list(pool.map(load, targets))
    return str(manifest["digest"])


def ensure_pause_image(ctx: LabContext) -> None:
    missing = [n for n in names(ctx) if not has_image(ctx, n, PAUSE_IMAGE)]
    if missing:
        import_image(ctx, PAUSE_TARBALL, missing)


def problems(api: Client, ctx: LabContext) -> list[str]:
    """Kubelet nodes that are not registered and Ready."""
    missing = sorted(set(names(ctx)) - kubernetes.ready_nodes(api, {LAB_LABEL: "true"}))
    return [f"kubelet node(s) not Ready: {', '.join(missing)}"] if missing else []


def advertise_gpus(api: Client, ctx: LabContext) -> None:
    """The GPU kubelet nodes' fake GPUs in their status (no device plugin here to do it)."""
    for node in names(ctx):
        patch = gpu_capacity_patch(ctx, node)
        if patch is not None:
            api.patch(Node.Status, node, patch)


def stop_containers(root: Path) -> list[str]:
    """For `lab down`, before the daemons are killed: every container of every kubelet node of the lab at `root`,
    killed and deleted through its containerd, so runc removes their cgroups (a killed shim leaves them behind)."""
    removed = []
    for socket in sorted(root.glob("nodes/*/k8s/containerd.sock")):
        tasks = run(_ctr(socket, "tasks", "list", "--quiet"), check=False, timeout=10)
        for task in tasks.stdout.split() if tasks.ok else []:
            run(_ctr(socket, "tasks", "kill", "--signal", "SIGKILL", task), check=False, timeout=10)
            run(_ctr(socket, "tasks", "delete", "--force", task), check=False, timeout=10)
            removed.append(f"container {task[:12]} ({socket.parent.parent.name})")
    for parent in Path("/sys/fs/cgroup").glob(f"*/{K8S_NAMESPACE}"):
        with contextlib.suppress(OSError):  # still in use (another lab's containers): left as it is
            parent.rmdir()
    return removed
