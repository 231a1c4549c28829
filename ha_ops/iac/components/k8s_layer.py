"""ClusterK8sLayer: ha-ops on a Kubernetes cluster. Namespace, priority classes, the agent DaemonSet on GPU nodes,
the remediation controller (replicas in different zones, a PodDisruptionBudget, Lease RBAC), default-deny network
policies with the allowances the services need, and the alert rules and scraping. Images must be pinned by digest.

The objects are k8s_manifests.layer_objects, the same list `ha-ops k8s render` writes as a Kustomize base: this
component only makes each one a Pulumi resource."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from ha_ops.iac import k8s_manifests as m
from ha_ops.iac.k8s_manifests import K8sLayerConfig
from ha_ops.spec.model import ClusterSpec, Images

# The typed resource of each kind the layer makes; any other (the Prometheus Operator's) is a CustomResource.
RESOURCES: dict[str, Any] = {
    "Namespace": k8s.core.v1.Namespace,
    "ServiceAccount": k8s.core.v1.ServiceAccount,
    "ConfigMap": k8s.core.v1.ConfigMap,
    "Service": k8s.core.v1.Service,
    "PriorityClass": k8s.scheduling.v1.PriorityClass,
    "ClusterRole": k8s.rbac.v1.ClusterRole,
    "ClusterRoleBinding": k8s.rbac.v1.ClusterRoleBinding,
    "Role": k8s.rbac.v1.Role,
    "RoleBinding": k8s.rbac.v1.RoleBinding,
    "ValidatingAdmissionPolicy": k8s.admissionregistration.v1.ValidatingAdmissionPolicy,
    "ValidatingAdmissionPolicyBinding": k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding,
    "DaemonSet": k8s.apps.v1.DaemonSet,
    "Deployment": k8s.apps.v1.Deployment,
    "PodDisruptionBudget": k8s.policy.v1.PodDisruptionBudget,
    "NetworkPolicy": k8s.networking.v1.NetworkPolicy,
}


@dataclass(frozen=True)
class ClusterK8sLayerArgs:
    spec: ClusterSpec
    # The remediation controller's config (ha_ops.remediation.config.ControllerConfig as YAML), checked here.
    controller_config_yaml: str
    images: Images | None = None  # default: the spec's images section
    config: K8sLayerConfig = field(default_factory=K8sLayerConfig)
    provider: k8s.Provider | None = None


def _snake(key: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", key).lower()


def _resource(name: str, obj: m.LayerObject, opts: pulumi.ResourceOptions) -> pulumi.CustomResource:
    """The object as a Pulumi resource: its top-level fields as the constructor's arguments; what is below them
    goes as the API spells it (the provider passes camelCase keys through)."""
    fields = {k: v for k, v in obj.manifest.items() if k not in ("apiVersion", "kind")}
    typed = RESOURCES.get(obj.kind)
    if typed is None:
        return k8s.apiextensions.CustomResource(
            name, api_version=obj.manifest["apiVersion"], kind=obj.kind, opts=opts, **fields
        )
    return typed(name, opts=opts, **{_snake(k): v for k, v in fields.items()})  # type: ignore[no-any-return]


class ClusterK8sLayer(pulumi.ComponentResource):
    namespace: pulumi.Output[str]
    agent_namespace: pulumi.Output[str]
    agent_daemonset: pulumi.Output[str]
    controller_deployment: pulumi.Output[str]
    network_policies: pulumi.Output[list[str]]

    def __init__(self, name: str, args: ClusterK8sLayerArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        spec, cfg = args.spec, args.config
        objects = m.layer_objects(
            spec, cfg, args.controller_config_yaml, args.images,
            source=f"ClusterK8sLayer {name}", images_field="ClusterK8sLayerArgs.images",
        )  # fmt: skip
        super().__init__("haops:kubernetes:ClusterK8sLayer", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=args.provider)
        made: dict[tuple[str, str], pulumi.CustomResource] = {}
        first = [o for o in objects if o.kind in ("Namespace", "PriorityClass")]
        for obj in first:
            made[obj.kind, obj.name] = _resource(f"{name}-{obj.key}", obj, child)
        # Everything else after its namespace, and the workloads' priority classes.
        after = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=list(made.values()))
        for obj in objects:
            if obj not in first:
                made[obj.kind, obj.name] = _resource(f"{name}-{obj.key}", obj, after)

        def name_of(kind: str, obj_name: str) -> pulumi.Output[str]:
            return made[kind, obj_name].metadata.apply(lambda meta: meta.name)  # type: ignore[attr-defined]

        self.namespace = name_of("Namespace", cfg.namespace)
        self.agent_namespace = name_of("Namespace", cfg.agent_namespace)
        self.agent_daemonset = name_of("DaemonSet", m.AGENT)
        self.controller_deployment = name_of("Deployment", m.CONTROLLER)
        self.network_policies = pulumi.Output.from_input(sorted(o.name for o in objects if o.kind == "NetworkPolicy"))
        images = args.images or spec.images
        assert images is not None  # (layer_objects refused none)
        self.register_outputs(
            {
                "namespace": self.namespace,
                "agent_namespace": self.agent_namespace,
                "agent_daemonset": self.agent_daemonset,
                "controller_deployment": self.controller_deployment,
                "controller_url": m.controller_url(spec, cfg),
                "priority_classes": sorted(m.PRIORITY_CLASSES),
                "network_policies": self.network_policies,
                "images": images.model_dump(),
            }
        )
