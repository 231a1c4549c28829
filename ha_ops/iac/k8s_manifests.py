"""The Kubernetes objects of the ha-ops layer as plain data, spelt as the Kubernetes API spells them.

Pure, no Pulumi. `layer_objects` is the one list both install paths are made from: ClusterK8sLayer turns each
object into a Pulumi resource, and `kustomize_base` writes them as a Kustomize base (`ha-ops k8s render`). Names
are fixed, not generated: agents reach the controller by its Service's DNS name and Prometheus finds the rules by
name.

Over 400 lines because it is the layer's one list of objects: the Pod specs, RBAC, NetworkPolicies and rules are
checked against each other here (a port the Service, the probes and the policy must share), and two install paths
must produce the same objects; split by kind, each part would import the others' names.
"""

from __future__ import annotations

import copy
import ipaddress
from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ha_ops.errors import SpecError
from ha_ops.health.config import AgentConfig
from ha_ops.iac.pod_security import looser, namespace_labels, problems_at
from ha_ops.iac.policy import check_images
from ha_ops.iac.violations import enforce
from ha_ops.monitoring.rules import rules_yaml
from ha_ops.remediation.config import ControllerConfig
from ha_ops.remediation.k8s_lease import LEADER_LABEL
from ha_ops.schedulers.kubernetes import SPARE_TAINT_KEY, TAINT_KEY
from ha_ops.spec.layout import compute_layout
from ha_ops.spec.load import validation_problems
from ha_ops.spec.model import ClusterSpec, Images

PART_OF = {"app.kubernetes.io/part-of": "ha-ops"}
AGENT = "ha-ops-agent"
CONTROLLER = "ha-ops-controller"
AGENT_LABELS = {"app.kubernetes.io/name": AGENT, **PART_OF}
CONTROLLER_LABELS = {"app.kubernetes.io/name": CONTROLLER, **PART_OF}
AGENT_CONFIG_PATH = "/etc/ha-ops/agent.yaml"
CONTROLLER_CONFIG_PATH = "/etc/ha-ops/controller.yaml"
# The audit key's Secret, mounted read-only (`key` in it); not under the config's mount, a ConfigMap volume.
AUDIT_KEY_DIR = "/run/secrets/ha-ops-audit"
# The controllers' issuing CA (its Secret: tls.crt, tls.key and the cluster CA's ca.crt, as cert-manager writes a CA
# Secret), the cluster CA for the agents (a ConfigMap: no key in it), the certificates each pod holds (an emptyDir,
# issued at start and renewed by the pod itself), and the agent's projected token for enrollment.
ISSUER_DIR = "/run/secrets/ha-ops-issuer"
CA_DIR = "/run/ha-ops/ca"
TLS_DIR = "/run/ha-ops/tls"
TOKEN_DIR = "/run/ha-ops/token"
AUDIT_MARKER_DIR = "/run/ha-ops/audit"
ENROLL_PORT = 8801
ENROLL_AUDIENCE = "ha-ops-controller"
IMAGE_UID = 65532  # the image's user (scripts/image.sh): the Secret's files are made readable by its group
RULES_FILE = "ha-ops-rules.yml"
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"  # a namespace's name (RFC 1123 label)
CONTROLLER_POD_SECURITY = "restricted"
DEFAULT_CONTROLLER_PORT = 8800

# Ordered from what must never be evicted to what yields first. The ha-ops agent and controller run as "critical"
# (below Kubernetes' own system classes, 2e9): preemptible training gives way to them and to normal jobs.
PRIORITY_CLASSES: dict[str, dict[str, Any]] = {
    "critical": {
        "value": 1_000_000,
        "preemptionPolicy": "PreemptLowerPriority",
        "description": "ha-ops agent and remediation controller: must run for the cluster to heal itself",
    },
    "normal": {"value": 1_000, "preemptionPolicy": "PreemptLowerPriority", "description": "ordinary jobs"},
    "preemptible-training": {
        "value": 100,
        # Training jobs checkpoint and requeue; they never push anything else off a node.
        "preemptionPolicy": "Never",
        "description": "checkpointing training jobs: preempted first, never preempt others",
    },
}


class AuditSinkTarget(BaseModel):
    """A central syslog-over-TLS collector (rsyslog, syslog-ng, a SIEM) for the controllers' audit entries."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    address: str = Field(min_length=1, max_length=253)
    port: int = Field(6514, ge=1, le=65535)


class K8sLayerConfig(BaseModel):
    """How the layer fits the Kubernetes cluster it lands on (what the spec does not say)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    # The controllers' namespace, labelled Pod Security `restricted`; the agents run in a namespace of their own,
    # labelled with the least level they need (agent_pod_security), so that a lab's hostPath for fake GPUs, or a
    # device plugin's socket, never loosens the controllers'. The same name for both puts both in one namespace,
    # labelled with the looser level.
    namespace: str = Field("ha-ops", min_length=1, max_length=63, pattern=DNS_LABEL)
    agent_namespace: str = Field("ha-ops-agent", min_length=1, max_length=63, pattern=DNS_LABEL)
    monitoring_namespace: str = "monitoring"
    prometheus_pod_labels: dict[str, str] = Field(default_factory=lambda: {"app.kubernetes.io/name": "prometheus"})
    # The API server is not a pod, so only an address block can name it; narrow this to its endpoints.
    api_server_cidrs: list[str] = Field(default_factory=lambda: ["0.0.0.0/0"], min_length=1)
    api_server_ports: list[int] = Field(default_factory=lambda: [443, 6443], min_length=1)
    gpu_node_label: str = "nvidia.com/gpu.present"  # set by NVIDIA's GPU feature discovery
    controller_replicas: int = Field(default=2, ge=2)
    # Where the controllers run, e.g. system nodes away from the GPU nodes they drain (empty: any node).
    controller_node_selector: dict[str, str] = Field(default_factory=dict)
    # The Prometheus Operator's PrometheusRule and PodMonitor (kube-prometheus-stack and most clusters); false: the
    # rules in a ConfigMap for a Prometheus that reads rule files, and scrape jobs of its own.
    prometheus_operator: bool = True
    # More tolerations for the agent, for the cluster's own taints on GPU nodes (it already tolerates NVIDIA's,
    # cordons and ha-ops' own).
    agent_tolerations: list[dict[str, str]] = Field(default_factory=list)
    # Clusters without GPUs (a lab): the agent reads fake GPUs (`ha-ops gpu fake-init`) from this folder on each
    # node instead of NVML, mounted read-only. Empty: NVML, as on any GPU node.
    agent_fake_gpus_dir: str = ""
    # The Secret holding the controllers' audit key (its `key`: 32 bytes or more, the same for both replicas), which
    # keys the audit chain (HMAC-SHA256): someone who can write the audit ConfigMaps but not read this Secret cannot
    # rewrite the log unseen. The operator creates it once, as any credential (docs/security.md); until it exists the
    # controller pods wait to start. None: an unkeyed chain (anyone who can write the ConfigMaps can rewrite it).
    audit_key_secret: str | None = "ha-ops-controller-audit-key"
    # Mutual TLS between the agents and the controllers, with certificates the controllers issue themselves
    # (ha_ops.remediation.certificates): the Secret holding their issuing CA (`tls.crt`, `tls.key`, and the cluster
    # CA as `ca.crt`; `ha-ops pki issuer` makes it) and the ConfigMap holding the cluster CA for the agents
    # (`ca.crt`). The operator creates both once, as the audit key (docs/security.md); the pods wait for them. Each
    # agent pod is enrolled with its service account token for the node the API server binds it to, and every
    # certificate is renewed by its holder through the controllers. None: plain HTTP, unauthenticated, which needs
    # `insecure: true` as well (secure by default: the controllers and agents then say so at every start).
    issuer_secret: str | None = "ha-ops-issuer"
    insecure: bool = False
    ca_config_map: str = "ha-ops-ca"
    certificate_lifetime_s: float = Field(default=86_400.0, ge=60, le=7 * 86_400)
    # Ship every audit entry to a central collector as syslog over TLS (ha_ops.remediation.audit_sink), a copy that
    # outlives the ConfigMaps. The controllers present their own certificates, which name the Service
    # (`ha-ops-controller.<namespace>.svc`: the collector's permitted peer), and verify the collector's with the
    # cluster CA; so it needs issuer_secret. None: the log stays in the ConfigMaps.
    audit_sink: AuditSinkTarget | None = None

    @model_validator(mode="after")
    def _sink_needs_certificates(self) -> K8sLayerConfig:
        if self.issuer_secret is None and not self.insecure:
            raise ValueError("issuer_secret: null serves the controllers' API over plain HTTP (anyone in the "
                             "cluster may report, mark nodes repaired or drain them); set insecure: true as well "
                             "to mean it")  # fmt: skip
        if self.audit_sink is not None and self.issuer_secret is None:
            raise ValueError("audit_sink: needs issuer_secret (the controllers' certificates, to ship over TLS)")
        return self


# Pod Security `restricted` for both pods (issue 44, finding 11). The container: no privilege escalation, every
# capability dropped, a read-only root file system.
NO_PRIVILEGE: dict[str, Any] = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                "capabilities": {"drop": ["ALL"]}}  # fmt: skip
# The pod: the image's user, and its group owning the Secrets' files (0440, readable by the pod's user alone); the
# container runtime's default seccomp profile.
NON_ROOT: dict[str, Any] = {"runAsUser": IMAGE_UID, "runAsGroup": IMAGE_UID, "runAsNonRoot": True,
                            "fsGroup": IMAGE_UID, "seccompProfile": {"type": "RuntimeDefault"}}  # fmt: skip


def controller_port(spec: ClusterSpec) -> int:
    return spec.remediation.port if spec.remediation is not None else DEFAULT_CONTROLLER_PORT


def service_names(cfg: K8sLayerConfig) -> list[str]:
    """The controllers' Service as pods may name it: what the controllers' own certificates serve at."""
    short = f"{CONTROLLER}.{cfg.namespace}"
    return [CONTROLLER, short, f"{short}.svc", f"{short}.svc.cluster.local"]


def agent_account(cfg: K8sLayerConfig) -> str:
    """The agents' service account as the API server names it: the user their tokens authenticate as."""
    return f"system:serviceaccount:{cfg.agent_namespace}:{AGENT}"


def controller_url(spec: ClusterSpec, cfg: K8sLayerConfig) -> str:
    scheme = "https" if cfg.issuer_secret else "http"
    return f"{scheme}://{CONTROLLER}.{cfg.namespace}.svc:{controller_port(spec)}/v1/reports"


def _pod_tls(ca_dir: str) -> dict[str, str]:
    return {"ca_file": f"{ca_dir}/ca.crt", "cert_file": f"{TLS_DIR}/tls.crt", "key_file": f"{TLS_DIR}/tls.key"}


def agent_config_yaml(spec: ClusterSpec, cfg: K8sLayerConfig) -> str:
    """The agent's config, checked by the agent's own model so that a drift in its schema fails here, not on nodes.
    `node` is replaced per pod by `--node $(NODE_NAME)`."""
    reporting: dict[str, Any] = {"urls": [controller_url(spec, cfg)]}
    if cfg.issuer_secret:
        enroll_url = f"https://{CONTROLLER}.{cfg.namespace}.svc:{ENROLL_PORT}"
        enroll = {"urls": [enroll_url], "token_file": f"{TOKEN_DIR}/token"}
        reporting.update(tls=_pod_tls(CA_DIR), renew=True, enroll=enroll)
    else:
        reporting["insecure"] = True  # (the layer's insecure: true)
    data = {
        "node": "set-by-node-flag",
        **({"backend": "fake", "fake_dir": fake} if (fake := cfg.agent_fake_gpus_dir) else {"backend": "nvml"}),
        "metrics": {"address": "0.0.0.0", "port": spec.monitoring.agent_port},
        # On Kubernetes the controller acts; the agent reports, and keeps its node's GpuHealthy condition.
        "slurm": {"enabled": False},
        "controller": reporting,
        "kubernetes": {"enabled": True},
    }
    AgentConfig.model_validate(data)
    return yaml.safe_dump(data, sort_keys=False)


def zone_spread_key(spec: ClusterSpec) -> str:
    """Across zones where the spec has several, else across nodes (a required zone rule in one zone would leave
    the second controller pending forever)."""
    zones = {d.zone for d in spec.failure_domains}
    return "topology.kubernetes.io/zone" if len(zones) >= 2 else "kubernetes.io/hostname"


def agent_pod_spec(spec: ClusterSpec, cfg: K8sLayerConfig, image: str) -> dict[str, Any]:
    volumes: list[tuple[dict[str, Any], str]] = [({"name": "config", "configMap": {"name": AGENT}}, "/etc/ha-ops")]
    if cfg.agent_fake_gpus_dir:  # (a lab's fake GPUs, read from the node's own folder)
        fake = {"name": "fake-gpus", "hostPath": {"path": cfg.agent_fake_gpus_dir, "type": "Directory"}}
        volumes.append((fake, cfg.agent_fake_gpus_dir))
    writable: list[tuple[dict[str, Any], str]] = []
    if cfg.issuer_secret:
        # The token proves to the controllers which node the pod is on: its own audience, so it opens nothing else.
        token = {"serviceAccountToken": {"audience": ENROLL_AUDIENCE, "expirationSeconds": 3600, "path": "token"}}
        volumes.append(({"name": "enroll-token", "projected": {"sources": [token]}}, TOKEN_DIR))
        volumes.append(({"name": "ca", "configMap": {"name": cfg.ca_config_map}}, CA_DIR))
        writable.append(({"name": "tls", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}, TLS_DIR))
    mounts = [{"name": v["name"], "mountPath": path, "readOnly": True} for v, path in volumes]
    mounts += [{"name": v["name"], "mountPath": path} for v, path in writable]
    return {
        "serviceAccountName": AGENT,
        # Its token writes one thing: its own node's status (agent_node_restriction), for the GpuHealthy condition.
        "automountServiceAccountToken": True,
        "priorityClassName": "critical",
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": cfg.gpu_node_label, "operator": "In", "values": ["true"]}]}
                    ]
                }
            }
        },
        "tolerations": [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            # A drained node is exactly where the agent must keep reporting.
            {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
            # ...and a node ha-ops took out (even as lost: NoExecute) or holds as a spare.
            {"key": TAINT_KEY, "operator": "Exists"},
            {"key": SPARE_TAINT_KEY, "operator": "Exists"},
            *cfg.agent_tolerations,
        ],
        "containers": [
            {
                "name": "agent",
                "image": image,
                "command": ["ha-ops"],
                "args": ["agent", "run", "--config", AGENT_CONFIG_PATH, "--node", "$(NODE_NAME)"],
                "env": [
                    {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                    # NVML through the NVIDIA container runtime without claiming a GPU from the jobs.
                    {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
                    {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "utility"},
                ],
                "ports": [{"name": "metrics", "containerPort": spec.monitoring.agent_port, "protocol": "TCP"}],
                "volumeMounts": mounts,
                "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
                **_agent_probes(spec.monitoring.agent_port),
                "securityContext": copy.deepcopy(NO_PRIVILEGE),
            }
        ],
        # Non-root (the image's user), the runtime's default seccomp profile: NVML needs neither root nor a
        # capability (agent_pod_security).
        "securityContext": copy.deepcopy(NON_ROOT),
        "volumes": [v for v, _ in (*volumes, *writable)],
    }


def _agent_probes(port: int) -> dict[str, Any]:
    """/healthz on the metrics port (health/serving.py): 503 once no sweep has ended for a minute or more, so a
    sweep stuck for good restarts the agent; ready once it serves (a DaemonSet rollout of a broken image stops)."""
    if port == 0:  # metrics off: nothing to probe
        return {}
    probe = {"httpGet": {"path": "/healthz", "port": "metrics"}}
    return {"readinessProbe": {**probe, "periodSeconds": 10},
            "livenessProbe": {**probe, "periodSeconds": 20, "timeoutSeconds": 5, "failureThreshold": 3}}  # fmt: skip


def agent_pod_security(cfg: K8sLayerConfig) -> str:
    """The least Pod Security level the agent needs. With NVML, `restricted`: the NVIDIA container runtime puts
    /dev/nvidia* in the container from NVIDIA_VISIBLE_DEVICES, outside the pod spec; the driver makes them 0666 by
    default (NVreg_DeviceFileMode), and the NVML queries and event waits the agent makes need no capability. A lab's
    fake GPUs come from a hostPath volume, which `privileged` alone admits (`baseline` refuses hostPath too)."""
    return "privileged" if cfg.agent_fake_gpus_dir else "restricted"


def namespace_levels(cfg: K8sLayerConfig) -> dict[str, str]:
    """Each of the layer's namespaces and its Pod Security level: the controllers' `restricted`, the agents' the
    least they need; one namespace for both takes the looser."""
    levels = {cfg.namespace: CONTROLLER_POD_SECURITY}
    levels[cfg.agent_namespace] = looser(levels.get(cfg.agent_namespace, "restricted"), agent_pod_security(cfg))
    return levels


def controller_config(spec: ClusterSpec, cfg: K8sLayerConfig, pool: str, nodes: list[str]) -> dict[str, Any]:
    """The controller's config on Kubernetes, checked by its own model: the Kubernetes scheduler, a Lease and the
    shared state (ConfigMaps) in the layer's namespace, so no volume is needed; each replica's id is its pod name
    (`--id` from HA_OPS_CONTROLLER_ID), never the `id` here."""
    data = {
        "id": "set-by-pod-name",
        "port": controller_port(spec),
        "scheduler": "kubernetes",
        "partition": pool,
        "kubernetes": {
            # The leader labels its own pod, which the Service selects (controller_own_pods).
            "lease": {"namespace": cfg.namespace, "name": CONTROLLER, "label_pod": True},
            "state": {"namespace": cfg.namespace, "prefix": CONTROLLER},
        },
        "pools": {pool: {"nodes": nodes}},
        **({"audit_key_file": f"{AUDIT_KEY_DIR}/key"} if cfg.audit_key_secret else {}),
        **({"tls": _pod_tls(ISSUER_DIR), "certificates": {
            "issuer": {"cert_file": f"{ISSUER_DIR}/tls.crt", "key_file": f"{ISSUER_DIR}/tls.key",
                       "lifetime_s": cfg.certificate_lifetime_s},
            # Each replica also serves at its pod's address (`--address` from HA_OPS_CONTROLLER_ADDRESS).
            "serve_names": service_names(cfg),
            "enrollment": {"port": ENROLL_PORT, "audience": ENROLL_AUDIENCE,
                           "agent_service_account": agent_account(cfg)},
        }} if cfg.issuer_secret else {"insecure": True}),
        **({"audit_sink": {"address": sink.address, "port": sink.port, "tls": _pod_tls(ISSUER_DIR),
                           "marker_file": f"{AUDIT_MARKER_DIR}/shipped"}} if (sink := cfg.audit_sink) else {}),
    }  # fmt: skip
    ControllerConfig.model_validate(data)
    return data


def controller_cluster_role_rules() -> list[dict[str, Any]]:
    """What the Kubernetes scheduler adapter does (schedulers/kubernetes.py) and nothing more: read and patch nodes
    and their status (cordon, taints, the GpuHealthy condition), read pods and namespaces (drain policies), evict
    pods (the Eviction API honours PodDisruptionBudgets), delete a pod only for `delete-after-timeout`."""
    return [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "patch"]},
        {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "delete"]},
        {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]},
        # An agent pod's enrollment: which node its token is bound to (remediation/certificates.py).
        {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
    ]


def controller_pod_spec(spec: ClusterSpec, cfg: K8sLayerConfig, image: str) -> dict[str, Any]:
    port = controller_port(spec)
    # (volume, where it is mounted, read-only): the root file system is read-only, and the lease and the shared state
    # (intents, audit log, views) are kept in the API, where the other replica finds them; only the certificate the
    # controller issues itself is written, to a volume in memory.
    volumes: list[tuple[dict[str, Any], str, bool]] = [({"name": "config", "configMap": {"name": CONTROLLER}},
                                                        "/etc/ha-ops", True)]  # fmt: skip
    if cfg.audit_key_secret:
        key = {"name": "audit-key", "secret": {"secretName": cfg.audit_key_secret, "defaultMode": 0o440}}
        volumes.append((key, AUDIT_KEY_DIR, True))
    env = [
        # Each replica's id, and so the Lease's holderIdentity: its pod name.
        {"name": "HA_OPS_CONTROLLER_ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    ]
    ports = [{"name": "http", "containerPort": port, "protocol": "TCP"}]
    probe: dict[str, Any] = {"httpGet": {"path": "/healthz", "port": port}}
    if cfg.issuer_secret:
        issuer = {"name": "issuer", "secret": {"secretName": cfg.issuer_secret, "defaultMode": 0o440}}
        volumes.append((issuer, ISSUER_DIR, True))
        volumes.append(({"name": "tls", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}, TLS_DIR, False))
        # Its own certificate also names the pod's address (a peer or an operator may reach one replica).
        env.append({"name": "HA_OPS_CONTROLLER_ADDRESS", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
        ports.append({"name": "enroll", "containerPort": ENROLL_PORT, "protocol": "TCP"})
        # A kubelet's probe presents no certificate: the enrollment port's /healthz asks for none.
        probe = {"httpGet": {"path": "/healthz", "port": ENROLL_PORT, "scheme": "HTTPS"}}
    if cfg.audit_sink is not None:
        # The last entry shipped. Lost with the pod, it costs a resend (the collector's copy takes duplicates).
        volumes.append(({"name": "audit-marker", "emptyDir": {"sizeLimit": "1Mi"}}, AUDIT_MARKER_DIR, False))
    return {
        "serviceAccountName": CONTROLLER,
        "priorityClassName": "critical",
        **({"nodeSelector": cfg.controller_node_selector} if cfg.controller_node_selector else {}),
        "affinity": {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": CONTROLLER_LABELS}, "topologyKey": zone_spread_key(spec)}
                ]
            }
        },
        "containers": [
            {
                "name": "controller",
                "image": image,
                "command": ["ha-ops"],
                "args": ["controller", "run", "--config", CONTROLLER_CONFIG_PATH],
                "env": env,
                "ports": ports,
                "readinessProbe": {**probe, "periodSeconds": 5},
                # Alive, leader or standby (/healthz is answered on the server's loop, before any worker): a minute
                # of silence restarts it, never a busy moment.
                "livenessProbe": {**probe, "periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 6},
                "volumeMounts": [
                    {"name": v["name"], "mountPath": path, **({"readOnly": True} if ro else {})}
                    for v, path, ro in volumes
                ],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
                # Pod Security `restricted` (issue 44, finding 11): it needs no capability (its ports are over 1024).
                "securityContext": copy.deepcopy(NO_PRIVILEGE),
            }
        ],
        "securityContext": copy.deepcopy(NON_ROOT),
        "volumes": [v for v, _, _ in volumes],
    }


def agent_cluster_role_rules() -> list[dict[str, Any]]:
    """The agent writes its node's GpuHealthy condition; agent_node_restriction narrows this to its own node."""
    return [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},
    ]


def agent_node_restriction(cfg: K8sLayerConfig) -> dict[str, Any]:
    """A ValidatingAdmissionPolicy that scopes the agent as kubelet's NodeRestriction scopes kubelets: RBAC cannot
    name "the node this pod runs on", but a pod's service account token carries its node's name
    (userInfo.extra authentication.kubernetes.io/node-name, Kubernetes 1.32+), so the agent may write the status of
    that node only, and in it only the GpuHealthy condition."""
    agent = agent_account(cfg)
    node_key = "authentication.kubernetes.io/node-name"
    others = "c, c.type != 'GpuHealthy'"
    return {
        "failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                  "operations": ["UPDATE"], "resources": ["nodes/status"]}]},
        "matchConditions": [{"name": "the-ha-ops-agent", "expression": f"request.userInfo.username == '{agent}'"}],
        "validations": [
            {"expression": f"'{node_key}' in request.userInfo.extra && "
                           f"request.userInfo.extra['{node_key}'][0] == object.metadata.name",
             "message": "the ha-ops agent may write the status of its own node only"},
            {"expression": f"!has(oldObject.status.conditions) || (has(object.status.conditions) && "
                           f"object.status.conditions.filter({others}) == "
                           f"oldObject.status.conditions.filter({others}))",
             "message": "the ha-ops agent may change the GpuHealthy condition only"},
        ],
    }  # fmt: skip


def controller_role_rules() -> list[dict[str, Any]]:
    """In the controller's own namespace: leader election (Leases) and the shared state (ConfigMaps). No delete:
    the audit log is never removed by the controller."""
    return [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "list", "watch", "create", "update", "patch"],
        },
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "create", "update"]},
        # The leader label on its own pod, and nothing else of any pod: controller_own_pods.
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]},
    ]


def controller_own_pods(cfg: K8sLayerConfig) -> dict[str, Any]:
    """A ValidatingAdmissionPolicy for the one pod write the controller makes: the label ha-ops.io/leader on its own
    pods, which the Service selects so that the agents' reports reach the leader. RBAC can grant `patch` on the
    namespace's pods only, the agents' among them: this keeps the controller to that label of controller pods."""
    controller = f"system:serviceaccount:{cfg.namespace}:{CONTROLLER}"
    name_key = "app.kubernetes.io/name"
    labels, old = "object.metadata.labels", "oldObject.metadata.labels"
    return {
        "failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                  "operations": ["UPDATE"], "resources": ["pods"]}]},
        "matchConditions": [{"name": "the-ha-ops-controller",
                             "expression": f"request.userInfo.username == '{controller}'"}],
        "validations": [
            {"expression": f"has({old}) && '{name_key}' in {old} && {old}['{name_key}'] == '{CONTROLLER}'",
             "message": "the ha-ops controller may label controller pods only"},
            {"expression": "object.spec == oldObject.spec",
             "message": "the ha-ops controller may not change a pod's spec"},
            {"expression": f"has({labels}) && "
                           f"{labels}.all(k, k == '{LEADER_LABEL}' || (k in {old} && {old}[k] == {labels}[k])) && "
                           f"{old}.all(k, k == '{LEADER_LABEL}' || k in {labels})",
             "message": f"the ha-ops controller may change the label {LEADER_LABEL} only"},
            {"expression": "has(object.metadata.annotations) == has(oldObject.metadata.annotations) && "
                           "(!has(object.metadata.annotations) || "
                           "object.metadata.annotations == oldObject.metadata.annotations)",
             "message": "the ha-ops controller may not change a pod's annotations"},
        ],
    }  # fmt: skip


def _port(port: int, protocol: str = "TCP") -> dict[str, Any]:
    return {"port": port, "protocol": protocol}


def _in_namespace(namespace: str, pods: dict[str, Any]) -> dict[str, Any]:
    """A NetworkPolicy peer: these pods of that namespace (the agents and controllers live in two)."""
    return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}, "podSelector": pods}


def _baseline_policies(prefix: str) -> dict[str, dict[str, Any]]:
    """Every pod of a namespace: deny in and out, then DNS out."""
    dns = _in_namespace("kube-system", {"matchLabels": {"k8s-app": "kube-dns"}})
    return {
        f"{prefix}default-deny": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]},
        f"{prefix}allow-dns": {"podSelector": {}, "policyTypes": ["Egress"],
                               "egress": [{"to": [dns], "ports": [_port(53, "UDP"), _port(53, "TCP")]}]},
    }  # fmt: skip


def _to_api_server(pods: dict[str, Any], cfg: K8sLayerConfig) -> dict[str, Any]:
    return {"podSelector": pods, "policyTypes": ["Egress"],
            "egress": [{"to": [{"ipBlock": {"cidr": cidr}} for cidr in cfg.api_server_cidrs],
                        "ports": [_port(p) for p in cfg.api_server_ports]}]}  # fmt: skip


def _scraped(pods: dict[str, Any], cfg: K8sLayerConfig, ports: list[dict[str, Any]]) -> dict[str, Any]:
    prometheus = _in_namespace(cfg.monitoring_namespace, {"matchLabels": cfg.prometheus_pod_labels})
    return {"podSelector": pods, "policyTypes": ["Ingress"], "ingress": [{"from": [prometheus], "ports": ports}]}


def network_policies(spec: ClusterSpec, cfg: K8sLayerConfig) -> dict[str, dict[str, Any]]:
    """The controllers' namespace: default deny, then only what the controllers need. name -> NetworkPolicy spec."""
    agents, controllers = {"matchLabels": AGENT_LABELS}, {"matchLabels": CONTROLLER_LABELS}
    mon = spec.monitoring
    monitoring = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": cfg.monitoring_namespace}}}
    return {
        **_baseline_policies(""),
        "controller-from-agents": {"podSelector": controllers, "policyTypes": ["Ingress"],
                                   "ingress": [{"from": [_in_namespace(cfg.agent_namespace, agents)],
                                                "ports": _api_ports(spec, cfg)}]},
        "prometheus-scrape": _scraped(controllers, cfg, _api_ports(spec, cfg)),
        "controller-to-apiserver": _to_api_server(controllers, cfg),
        **({"controller-to-audit-sink": audit_sink_egress(cfg.audit_sink)} if cfg.audit_sink else {}),
        # The controller watches Prometheus and raises HaOpsPrometheusDown on Alertmanager itself.
        "controller-to-monitoring": {"podSelector": controllers, "policyTypes": ["Egress"],
                                     "egress": [{"to": [monitoring], "ports": [_port(mon.prometheus_port),
                                                                               _port(mon.alertmanager_port)]}]},
    }  # fmt: skip


def agent_network_policies(spec: ClusterSpec, cfg: K8sLayerConfig) -> dict[str, dict[str, Any]]:
    """The agents' namespace: default deny, then the controllers' API, the API server (the agent writes its node's
    GpuHealthy condition) and the scrape of its metrics. name -> NetworkPolicy spec; names apart from the
    controllers' so that one namespace may hold both."""
    agents, controllers = {"matchLabels": AGENT_LABELS}, {"matchLabels": CONTROLLER_LABELS}
    return {
        **_baseline_policies("agents-"),
        "agents-to-controller": {"podSelector": agents, "policyTypes": ["Egress"],
                                 "egress": [{"to": [_in_namespace(cfg.namespace, controllers)],
                                             "ports": _api_ports(spec, cfg)}]},
        "agents-to-apiserver": _to_api_server(agents, cfg),
        "agents-prometheus-scrape": _scraped(agents, cfg, [_port(spec.monitoring.agent_port)]),
    }  # fmt: skip


def _api_ports(spec: ClusterSpec, cfg: K8sLayerConfig) -> list[dict[str, Any]]:
    return [_port(controller_port(spec)), *([_port(ENROLL_PORT)] if cfg.issuer_secret else [])]


def audit_sink_egress(sink: AuditSinkTarget) -> dict[str, Any]:
    """To the collector: its address where it is one (a NetworkPolicy cannot name a host), else its port anywhere."""
    try:
        cidr = str(ipaddress.ip_network(sink.address))
    except ValueError:
        cidr = "0.0.0.0/0"
    return {"podSelector": {"matchLabels": CONTROLLER_LABELS}, "policyTypes": ["Egress"],
            "egress": [{"to": [{"ipBlock": {"cidr": cidr}}], "ports": [_port(sink.port)]}]}  # fmt: skip


# --- the layer's objects, for every install path ------------------------------------------------------------------
@dataclass(frozen=True)
class LayerObject:
    key: str  # its Pulumi resource name after the layer's: fixed, so that an update never replaces the object
    manifest: dict[str, Any]  # the object as the API takes it

    @property
    def kind(self) -> str:
        return str(self.manifest["kind"])

    @property
    def name(self) -> str:
        return str(self.manifest["metadata"]["name"])


def default_controller_config(spec: ClusterSpec, cfg: K8sLayerConfig) -> str:
    """The controller's config for this spec: its GPU nodes in the pool their ha-ops.io/pool label names."""
    nodes = [n.name for n in compute_layout(spec).nodes_with_role("gpu")]
    return yaml.safe_dump(controller_config(spec, cfg, spec.gpu_partition, nodes), sort_keys=False)


def _checked_controller_config(text: str, source: str) -> None:
    try:
        ControllerConfig.model_validate(yaml.safe_load(text))
    except yaml.YAMLError as exc:
        raise SpecError(source, [f"controller_config_yaml: not valid YAML ({exc})"]) from None
    except ValidationError as exc:
        raise SpecError(source, [f"controller_config_yaml.{p}" for p in validation_problems(exc)]) from None


def pod_monitor(cfg: K8sLayerConfig) -> dict[str, Any]:
    """Prometheus Operator: scrape the agents' `metrics` port and the controllers' metrics: on the `http` port, or
    with TLS on the `enroll` port (the other asks for a client certificate), verified with the cluster CA. One
    PodMonitor over both namespaces."""
    controllers: dict[str, Any] = {"port": "http", "path": "/metrics"}
    if cfg.issuer_secret:
        ca = {"configMap": {"name": cfg.ca_config_map, "key": "ca.crt"}}
        controllers = {"port": "enroll", "path": "/metrics", "scheme": "https",
                       "tlsConfig": {"ca": ca, "serverName": service_names(cfg)[2]}}  # fmt: skip
    return {
        # In the agents' namespace, where the cluster CA's ConfigMap is (a PodMonitor reads it from its own).
        "namespaceSelector": {"matchNames": sorted({cfg.agent_namespace, cfg.namespace})},
        "selector": {"matchExpressions": [
            {"key": "app.kubernetes.io/name", "operator": "In", "values": [AGENT, CONTROLLER]}]},
        "podMetricsEndpoints": [{"port": "metrics", "path": "/metrics"}, controllers],
    }  # fmt: skip


def layer_objects(spec: ClusterSpec, cfg: K8sLayerConfig, controller_config_yaml: str, images: Images | None = None,
                  *, source: str, images_field: str = "images") -> list[LayerObject]:  # fmt: skip
    """Every object of the layer, in the order they are applied. The images (`images`, else the spec's) must be
    pinned by digest and the controller config must be the controller's: checked before anything is made."""
    images, where = (images, images_field) if images is not None else (spec.images, "images")
    if images is None:
        where_given = f"{images_field} or the spec's images" if images_field != "images" else "the spec has none"
        raise SpecError(source, [f"images: no images given ({where_given}: the agent's and the controller's)"])
    enforce(check_images(images.model_dump(), where), source)
    _checked_controller_config(controller_config_yaml, source)
    ns, agent_ns = cfg.namespace, cfg.agent_namespace
    levels = namespace_levels(cfg)
    out: list[LayerObject] = []

    def add(key: str, api_version: str, kind: str, name: str, labels: dict[str, str], namespace: str | None = ns,
            **fields: Any) -> None:  # fmt: skip
        meta: dict[str, Any] = {"name": name, **({"namespace": namespace} if namespace else {}), "labels": labels}
        out.append(LayerObject(key, {"apiVersion": api_version, "kind": kind, "metadata": meta, **fields}))

    def bound_role(key: str, kind: str, name: str, labels: dict[str, str], rules: list[dict[str, Any]],
                   account: str, account_ns: str = ns) -> None:  # fmt: skip
        """A Role or ClusterRole (`kind`) with `rules`, bound to the service account `account` of `account_ns`."""
        rbac, namespace = "rbac.authorization.k8s.io", account_ns if kind == "Role" else None
        add(key, f"{rbac}/v1", kind, name, labels, namespace, rules=rules)
        add(key, f"{rbac}/v1", f"{kind}Binding", name, labels, namespace,
            roleRef={"apiGroup": rbac, "kind": kind, "name": name},
            subjects=[{"kind": "ServiceAccount", "name": account, "namespace": account_ns}])  # fmt: skip

    def pods_admitted(kind: str, pod: dict[str, Any], namespace: str) -> dict[str, Any]:
        """The pod spec, checked against its namespace's Pod Security level before anything is applied."""
        if problems := problems_at(levels[namespace], pod):
            raise SpecError(source, [f"{kind} in {namespace} (Pod Security {levels[namespace]}): {p}"
                                     for p in problems])  # fmt: skip
        return pod

    for name, key in {agent_ns: "agent-namespace", ns: "namespace"}.items():  # (one, where both are one)
        add(key, "v1", "Namespace", name, {**PART_OF, **namespace_labels(levels[name])}, None)
    for pc, fields in PRIORITY_CLASSES.items():
        add(f"priority-{pc}", "scheduling.k8s.io/v1", "PriorityClass", pc, PART_OF, None, **fields)

    # --- agent, in its own namespace ------------------------------------------------------------------------------
    add("agent-sa", "v1", "ServiceAccount", AGENT, AGENT_LABELS, agent_ns)
    bound_role("agent-node-status", "ClusterRole", f"{AGENT}-node-status", AGENT_LABELS, agent_cluster_role_rules(),
               AGENT, agent_ns)  # fmt: skip
    admission = "admissionregistration.k8s.io/v1"
    add("agent-own-node", admission, "ValidatingAdmissionPolicy", f"{AGENT}-own-node", AGENT_LABELS, None,
        spec=agent_node_restriction(cfg))  # fmt: skip
    add("agent-own-node", admission, "ValidatingAdmissionPolicyBinding", f"{AGENT}-own-node", AGENT_LABELS, None,
        spec={"policyName": f"{AGENT}-own-node", "validationActions": ["Deny"]})  # fmt: skip
    add("agent-config", "v1", "ConfigMap", AGENT, AGENT_LABELS, agent_ns,
        data={"agent.yaml": agent_config_yaml(spec, cfg)})  # fmt: skip
    agent_pod = pods_admitted("the agent", agent_pod_spec(spec, cfg, images.agent), agent_ns)
    add("agent", "apps/v1", "DaemonSet", AGENT, AGENT_LABELS, agent_ns, spec={
        "selector": {"matchLabels": AGENT_LABELS},
        "template": {"metadata": {"labels": AGENT_LABELS}, "spec": agent_pod},
    })  # fmt: skip

    # --- remediation controller -----------------------------------------------------------------------------------
    add("controller-sa", "v1", "ServiceAccount", CONTROLLER, CONTROLLER_LABELS)
    bound_role("controller-state", "Role", f"{CONTROLLER}-state", CONTROLLER_LABELS, controller_role_rules(),
               CONTROLLER)  # fmt: skip
    bound_role("controller-nodes", "ClusterRole", f"{CONTROLLER}-nodes", CONTROLLER_LABELS,
               controller_cluster_role_rules(), CONTROLLER)  # fmt: skip
    own_pods = f"{CONTROLLER}-own-pods"
    add("controller-own-pods", admission, "ValidatingAdmissionPolicy", own_pods, CONTROLLER_LABELS, None,
        spec=controller_own_pods(cfg))  # fmt: skip
    add("controller-own-pods", admission, "ValidatingAdmissionPolicyBinding", own_pods, CONTROLLER_LABELS, None,
        spec={"policyName": own_pods, "validationActions": ["Deny"]})  # fmt: skip
    add("controller-config", "v1", "ConfigMap", CONTROLLER, CONTROLLER_LABELS,
        data={"controller.yaml": controller_config_yaml})  # fmt: skip
    add("controller", "apps/v1", "Deployment", CONTROLLER, CONTROLLER_LABELS, spec={
        "replicas": cfg.controller_replicas,
        "selector": {"matchLabels": CONTROLLER_LABELS},
        # No surge: with one replica per zone and two zones a surge pod could never be placed.
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
        "template": {"metadata": {"labels": CONTROLLER_LABELS},
                     "spec": pods_admitted("the controller", controller_pod_spec(spec, cfg, images.controller), ns)},
    })  # fmt: skip
    add("controller", "v1", "Service", CONTROLLER, CONTROLLER_LABELS, spec={
        # The leader only (LeaderLabel): a standby answers reports with 503, and an agent has this one URL.
        "selector": {**CONTROLLER_LABELS, LEADER_LABEL: "true"},
        "ports": [{"name": "http", "port": controller_port(spec), "targetPort": "http"},
                  *([{"name": "enroll", "port": ENROLL_PORT, "targetPort": "enroll"}] if cfg.issuer_secret else [])],
    })  # fmt: skip
    add("controller", "policy/v1", "PodDisruptionBudget", CONTROLLER, CONTROLLER_LABELS,
        spec={"minAvailable": 1, "selector": {"matchLabels": CONTROLLER_LABELS}})  # fmt: skip

    # --- network policies and monitoring --------------------------------------------------------------------------
    for namespace, policies in ((ns, network_policies(spec, cfg)), (agent_ns, agent_network_policies(spec, cfg))):
        for name, policy in policies.items():
            add(f"netpol-{name}", "networking.k8s.io/v1", "NetworkPolicy", name, PART_OF, namespace, spec=policy)
    if cfg.prometheus_operator:
        operator = "monitoring.coreos.com/v1"
        add("alert-rules", operator, "PrometheusRule", "ha-ops-alert-rules", PART_OF,
            spec={"groups": yaml.safe_load(rules_yaml())["groups"]})  # fmt: skip
        add("pod-monitor", operator, "PodMonitor", "ha-ops", PART_OF, agent_ns, spec=pod_monitor(cfg))
    else:
        add("alert-rules", "v1", "ConfigMap", "ha-ops-alert-rules", {**PART_OF, "prometheus-rules": "true"},
            data={RULES_FILE: rules_yaml()})  # fmt: skip
    return out


KUSTOMIZATION = "kustomization.yaml"
RENDERED_BY = "# Written by `ha-ops k8s render` from the cluster spec; render again rather than edit (use overlays)."


def kustomize_base(objects: list[LayerObject]) -> dict[str, str]:
    """A Kustomize base: file name -> text, one object per file and the kustomization listing them in order."""
    files = {}
    for obj in objects:
        files[f"{obj.kind.lower()}-{obj.name}.yaml"] = yaml.safe_dump(obj.manifest, sort_keys=False)
    kustomization = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                     "resources": list(files)}  # fmt: skip
    return {KUSTOMIZATION: f"{RENDERED_BY}\n" + yaml.safe_dump(kustomization, sort_keys=False), **files}
