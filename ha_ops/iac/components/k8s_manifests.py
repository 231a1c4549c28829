"""The Kubernetes objects of the ha-ops layer as plain data (keys as pulumi-kubernetes' typed dicts spell them).

Pure, no Pulumi: ClusterK8sLayer turns each into a resource. Names are fixed, not generated: agents reach the
controller by its Service's DNS name and Prometheus finds the rules by the ConfigMap's name.
"""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from ha_ops.health.config import AgentConfig
from ha_ops.remediation.config import ControllerConfig
from ha_ops.schedulers.kubernetes import SPARE_TAINT_KEY, TAINT_KEY
from ha_ops.spec.model import ClusterSpec

PART_OF = {"app.kubernetes.io/part-of": "ha-ops"}
AGENT = "ha-ops-agent"
CONTROLLER = "ha-ops-controller"
AGENT_LABELS = {"app.kubernetes.io/name": AGENT, **PART_OF}
CONTROLLER_LABELS = {"app.kubernetes.io/name": CONTROLLER, **PART_OF}
AGENT_CONFIG_PATH = "/etc/ha-ops/agent.yaml"
CONTROLLER_CONFIG_PATH = "/etc/ha-ops/controller.yaml"
RULES_FILE = "ha-ops-rules.yml"
DEFAULT_CONTROLLER_PORT = 8800

# Ordered from what must never be evicted to what yields first. The ha-ops agent and controller run as "critical"
# (below Kubernetes' own system classes, 2e9): preemptible training gives way to them and to normal jobs.
PRIORITY_CLASSES: dict[str, dict[str, Any]] = {
    "critical": {
        "value": 1_000_000,
        "preemption_policy": "PreemptLowerPriority",
        "description": "ha-ops agent and remediation controller: must run for the cluster to heal itself",
    },
    "normal": {"value": 1_000, "preemption_policy": "PreemptLowerPriority", "description": "ordinary jobs"},
    "preemptible-training": {
        "value": 100,
        # Training jobs checkpoint and requeue; they never push anything else off a node.
        "preemption_policy": "Never",
        "description": "checkpointing training jobs: preempted first, never preempt others",
    },
}


class K8sLayerConfig(BaseModel):
    """How the layer fits the Kubernetes cluster it lands on (what the spec does not say)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    namespace: str = "ha-ops"
    monitoring_namespace: str = "monitoring"
    prometheus_pod_labels: dict[str, str] = Field(default_factory=lambda: {"app.kubernetes.io/name": "prometheus"})
    # The API server is not a pod, so only an address block can name it; narrow this to its endpoints.
    api_server_cidrs: list[str] = Field(default_factory=lambda: ["0.0.0.0/0"], min_length=1)
    api_server_ports: list[int] = Field(default_factory=lambda: [443, 6443], min_length=1)
    gpu_node_label: str = "nvidia.com/gpu.present"  # set by NVIDIA's GPU feature discovery
    controller_replicas: int = Field(default=2, ge=2)
    # Where the controllers run, e.g. system nodes away from the GPU nodes they drain (empty: any node).
    controller_node_selector: dict[str, str] = Field(default_factory=dict)


def controller_port(spec: ClusterSpec) -> int:
    return spec.remediation.port if spec.remediation is not None else DEFAULT_CONTROLLER_PORT


def controller_url(spec: ClusterSpec, cfg: K8sLayerConfig) -> str:
    return f"http://{CONTROLLER}.{cfg.namespace}.svc:{controller_port(spec)}/v1/reports"


def agent_config_yaml(spec: ClusterSpec, cfg: K8sLayerConfig) -> str:
    """The agent's config, checked by the agent's own model so that a drift in its schema fails here, not on nodes.
    `node` is replaced per pod by `--node $(NODE_NAME)`."""
    data = {
        "node": "set-by-node-flag",
        "backend": "nvml",
        "metrics": {"address": "0.0.0.0", "port": spec.monitoring.agent_port},
        # On Kubernetes the controller acts; the agent reports, and keeps its node's GpuHealthy condition.
        "slurm": {"enabled": False},
        "controller": {"urls": [controller_url(spec, cfg)]},
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
    return {
        "service_account_name": AGENT,
        # Its token writes one thing: its own node's status (agent_node_restriction), for the GpuHealthy condition.
        "automount_service_account_token": True,
        "priority_class_name": "critical",
        "affinity": {
            "node_affinity": {
                "required_during_scheduling_ignored_during_execution": {
                    "node_selector_terms": [
                        {"match_expressions": [{"key": cfg.gpu_node_label, "operator": "In", "values": ["true"]}]}
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
        ],
        "containers": [
            {
                "name": "agent",
                "image": image,
                "command": ["ha-ops"],
                "args": ["agent", "run", "--config", AGENT_CONFIG_PATH, "--node", "$(NODE_NAME)"],
                "env": [
                    {"name": "NODE_NAME", "value_from": {"field_ref": {"field_path": "spec.nodeName"}}},
                    # NVML through the NVIDIA container runtime without claiming a GPU from the jobs.
                    {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
                    {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "utility"},
                ],
                "ports": [{"name": "metrics", "container_port": spec.monitoring.agent_port, "protocol": "TCP"}],
                "volume_mounts": [{"name": "config", "mount_path": "/etc/ha-ops", "read_only": True}],
                "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
                "security_context": {"allow_privilege_escalation": False, "read_only_root_filesystem": True},
            }
        ],
        "volumes": [{"name": "config", "config_map": {"name": AGENT}}],
    }


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
            "lease": {"namespace": cfg.namespace, "name": CONTROLLER},
            "state": {"namespace": cfg.namespace, "prefix": CONTROLLER},
        },
        "pools": {pool: {"nodes": nodes}},
    }
    ControllerConfig.model_validate(data)
    return data


def controller_cluster_role_rules() -> list[dict[str, Any]]:
    """What the Kubernetes scheduler adapter does (schedulers/kubernetes.py) and nothing more: read and patch nodes
    and their status (cordon, taints, the GpuHealthy condition), read pods and namespaces (drain policies), evict
    pods (the Eviction API honours PodDisruptionBudgets), delete a pod only for `delete-after-timeout`."""
    return [
        {"api_groups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "patch"]},
        {"api_groups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},
        {"api_groups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "delete"]},
        {"api_groups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
        {"api_groups": [""], "resources": ["namespaces"], "verbs": ["get"]},
    ]


def controller_pod_spec(spec: ClusterSpec, cfg: K8sLayerConfig, image: str) -> dict[str, Any]:
    port = controller_port(spec)
    return {
        "service_account_name": CONTROLLER,
        "priority_class_name": "critical",
        **({"node_selector": cfg.controller_node_selector} if cfg.controller_node_selector else {}),
        "affinity": {
            "pod_anti_affinity": {
                "required_during_scheduling_ignored_during_execution": [
                    {"label_selector": {"match_labels": CONTROLLER_LABELS}, "topology_key": zone_spread_key(spec)}
                ]
            }
        },
        "containers": [
            {
                "name": "controller",
                "image": image,
                "command": ["ha-ops"],
                "args": ["controller", "run", "--config", CONTROLLER_CONFIG_PATH],
                "env": [
                    # Each replica's id, and so the Lease's holderIdentity: its pod name.
                    {"name": "HA_OPS_CONTROLLER_ID", "value_from": {"field_ref": {"field_path": "metadata.name"}}},
                ],
                "ports": [{"name": "http", "container_port": port, "protocol": "TCP"}],
                "readiness_probe": {"http_get": {"path": "/healthz", "port": port}, "period_seconds": 5},
                # The root file system is read-only, and nothing is written to a volume: the lease and the shared
                # state (intents, audit log, views) are kept in the API, where the other replica finds them.
                "volume_mounts": [{"name": "config", "mount_path": "/etc/ha-ops", "read_only": True}],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
                "security_context": {"allow_privilege_escalation": False, "read_only_root_filesystem": True},
            }
        ],
        "volumes": [{"name": "config", "config_map": {"name": CONTROLLER}}],
    }


def agent_cluster_role_rules() -> list[dict[str, Any]]:
    """The agent writes its node's GpuHealthy condition; agent_node_restriction narrows this to its own node."""
    return [
        {"api_groups": [""], "resources": ["nodes"], "verbs": ["get"]},
        {"api_groups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},
    ]


def agent_node_restriction(cfg: K8sLayerConfig) -> dict[str, Any]:
    """A ValidatingAdmissionPolicy that scopes the agent as kubelet's NodeRestriction scopes kubelets: RBAC cannot
    name "the node this pod runs on", but a pod's service account token carries its node's name
    (userInfo.extra authentication.kubernetes.io/node-name, Kubernetes 1.32+), so the agent may write the status of
    that node only, and in it only the GpuHealthy condition."""
    agent = f"system:serviceaccount:{cfg.namespace}:{AGENT}"
    node_key = "authentication.kubernetes.io/node-name"
    others = "c, c.type != 'GpuHealthy'"
    return {
        "failure_policy": "Fail",
        "match_constraints": {"resource_rules": [{"api_groups": [""], "api_versions": ["v1"],
                                                  "operations": ["UPDATE"], "resources": ["nodes/status"]}]},
        "match_conditions": [{"name": "the-ha-ops-agent", "expression": f"request.userInfo.username == '{agent}'"}],
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
            "api_groups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "list", "watch", "create", "update", "patch"],
        },
        {"api_groups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "create", "update"]},
    ]


def _port(port: int, protocol: str = "TCP") -> dict[str, Any]:
    return {"port": port, "protocol": protocol}


def network_policies(spec: ClusterSpec, cfg: K8sLayerConfig) -> dict[str, dict[str, Any]]:
    """Default deny in the namespace, then only what the agent and controller need. name -> NetworkPolicy spec."""
    agents = {"match_labels": AGENT_LABELS}
    controllers = {"match_labels": CONTROLLER_LABELS}
    port = controller_port(spec)
    mon = spec.monitoring
    monitoring_ns = {"match_labels": {"kubernetes.io/metadata.name": cfg.monitoring_namespace}}
    prometheus = {"namespace_selector": monitoring_ns, "pod_selector": {"match_labels": cfg.prometheus_pod_labels}}
    return {
        "default-deny": {"pod_selector": {}, "policy_types": ["Ingress", "Egress"]},
        "allow-dns": {
            "pod_selector": {},
            "policy_types": ["Egress"],
            "egress": [
                {
                    "to": [
                        {
                            "namespace_selector": {"match_labels": {"kubernetes.io/metadata.name": "kube-system"}},
                            "pod_selector": {"match_labels": {"k8s-app": "kube-dns"}},
                        }
                    ],
                    "ports": [_port(53, "UDP"), _port(53, "TCP")],
                }
            ],
        },
        "agents-to-controller": {
            "pod_selector": agents,
            "policy_types": ["Egress"],
            "egress": [{"to": [{"pod_selector": controllers}], "ports": [_port(port)]}],
        },
        "controller-from-agents": {
            "pod_selector": controllers,
            "policy_types": ["Ingress"],
            "ingress": [{"from": [{"pod_selector": agents}], "ports": [_port(port)]}],
        },
        "prometheus-scrape": {
            "pod_selector": {
                "match_expressions": [
                    {"key": "app.kubernetes.io/name", "operator": "In", "values": [AGENT, CONTROLLER]}
                ]
            },
            "policy_types": ["Ingress"],
            "ingress": [
                {
                    "from": [prometheus],
                    "ports": [_port(mon.agent_port), _port(port)],
                }
            ],
        },
        "controller-to-apiserver": {
            "pod_selector": controllers,
            "policy_types": ["Egress"],
            "egress": [
                {
                    "to": [{"ip_block": {"cidr": cidr}} for cidr in cfg.api_server_cidrs],
                    "ports": [_port(p) for p in cfg.api_server_ports],
                }
            ],
        },
        # The controller watches Prometheus and raises HaOpsPrometheusDown on Alertmanager itself.
        "controller-to-monitoring": {
            "pod_selector": controllers,
            "policy_types": ["Egress"],
            "egress": [
                {
                    "to": [{"namespace_selector": monitoring_ns}],
                    "ports": [_port(mon.prometheus_port), _port(mon.alertmanager_port)],
                }
            ],
        },
    }
