"""ClusterK8sLayer: ha-ops on a Kubernetes cluster. Namespace, priority classes, the agent DaemonSet on GPU nodes,
the remediation controller (replicas in different zones, a PodDisruptionBudget, Lease RBAC), default-deny network
policies with the allowances the services need, and the alert rules. Images must be pinned by digest."""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s
import yaml
from pydantic import ValidationError

from ha_ops.errors import SpecError
from ha_ops.iac.components import k8s_manifests as m
from ha_ops.iac.components.k8s_manifests import K8sLayerConfig
from ha_ops.iac.policy import check_images
from ha_ops.iac.violations import enforce
from ha_ops.monitoring.rules import rules_yaml
from ha_ops.remediation.config import ControllerConfig
from ha_ops.spec.load import validation_problems
from ha_ops.spec.model import ClusterSpec, Images


@dataclass(frozen=True)
class ClusterK8sLayerArgs:
    spec: ClusterSpec
    # The remediation controller's config (ha_ops.remediation.config.ControllerConfig as YAML), checked here.
    controller_config_yaml: str
    images: Images | None = None  # default: the spec's images section
    config: K8sLayerConfig = field(default_factory=K8sLayerConfig)
    provider: k8s.Provider | None = None


class ClusterK8sLayer(pulumi.ComponentResource):
    namespace: pulumi.Output[str]
    agent_daemonset: pulumi.Output[str]
    controller_deployment: pulumi.Output[str]
    network_policies: pulumi.Output[list[str]]

    def __init__(self, name: str, args: ClusterK8sLayerArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        source = f"ClusterK8sLayer {name}"
        images, where = (args.images, "ClusterK8sLayerArgs.images") if args.images else (args.spec.images, "images")
        if images is None:
            raise SpecError(source, ["images: no images given (ClusterK8sLayerArgs.images or the spec's images)"])
        enforce(check_images(images.model_dump(), where), source)
        _check_controller_config(args.controller_config_yaml, source)
        super().__init__("haops:kubernetes:ClusterK8sLayer", name, None, opts)

        spec, cfg = args.spec, args.config
        child = pulumi.ResourceOptions(parent=self, provider=args.provider)

        ns = k8s.core.v1.Namespace(
            f"{name}-namespace", metadata={"name": cfg.namespace, "labels": m.PART_OF}, opts=child
        )
        namespace = ns.metadata.apply(lambda meta: meta.name)  # every namespaced object waits for the namespace

        def meta(obj_name: str, labels: dict[str, str] | None = None) -> dict:
            return {"name": obj_name, "namespace": namespace, "labels": labels or m.PART_OF}

        self.priority_classes = {
            pc: k8s.scheduling.v1.PriorityClass(
                f"{name}-priority-{pc}", metadata={"name": pc, "labels": m.PART_OF}, **fields, opts=child
            )
            for pc, fields in m.PRIORITY_CLASSES.items()
        }
        priority_deps = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[
            *self.priority_classes.values()
        ])  # fmt: skip

        # --- agent ------------------------------------------------------------------------------------------------
        agent_sa = k8s.core.v1.ServiceAccount(f"{name}-agent-sa", metadata=meta(m.AGENT, m.AGENT_LABELS), opts=child)
        _cluster_role(f"{name}-agent-node-status", f"{m.AGENT}-node-status", m.AGENT_LABELS,
                      m.agent_cluster_role_rules(), agent_sa, namespace, child)  # fmt: skip
        restriction = k8s.admissionregistration.v1.ValidatingAdmissionPolicy(
            f"{name}-agent-own-node",
            metadata={"name": f"{m.AGENT}-own-node", "labels": m.AGENT_LABELS},
            spec=m.agent_node_restriction(cfg),
            opts=child,
        )
        k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding(
            f"{name}-agent-own-node",
            metadata={"name": f"{m.AGENT}-own-node", "labels": m.AGENT_LABELS},
            spec={"policy_name": restriction.metadata.name, "validation_actions": ["Deny"]},
            opts=child,
        )
        k8s.core.v1.ConfigMap(
            f"{name}-agent-config",
            metadata=meta(m.AGENT, m.AGENT_LABELS),
            data={"agent.yaml": m.agent_config_yaml(spec, cfg)},
            opts=child,
        )
        agent = k8s.apps.v1.DaemonSet(
            f"{name}-agent",
            metadata=meta(m.AGENT, m.AGENT_LABELS),
            spec={
                "selector": {"match_labels": m.AGENT_LABELS},
                "template": {
                    "metadata": {"labels": m.AGENT_LABELS},
                    "spec": m.agent_pod_spec(spec, cfg, images.agent),
                },
            },
            opts=priority_deps,
        )

        # --- remediation controller ---------------------------------------------------------------------------------
        controller_sa = k8s.core.v1.ServiceAccount(
            f"{name}-controller-sa", metadata=meta(m.CONTROLLER, m.CONTROLLER_LABELS), opts=child
        )
        role = k8s.rbac.v1.Role(
            f"{name}-controller-state",
            metadata=meta(f"{m.CONTROLLER}-state", m.CONTROLLER_LABELS),
            rules=m.controller_role_rules(),
            opts=child,
        )
        k8s.rbac.v1.RoleBinding(
            f"{name}-controller-state",
            metadata=meta(f"{m.CONTROLLER}-state", m.CONTROLLER_LABELS),
            role_ref={"api_group": "rbac.authorization.k8s.io", "kind": "Role", "name": role.metadata.name},
            subjects=[{"kind": "ServiceAccount", "name": controller_sa.metadata.name, "namespace": namespace}],
            opts=child,
        )
        _cluster_role(f"{name}-controller-nodes", f"{m.CONTROLLER}-nodes", m.CONTROLLER_LABELS,
                      m.controller_cluster_role_rules(), controller_sa, namespace, child)  # fmt: skip
        k8s.core.v1.ConfigMap(
            f"{name}-controller-config",
            metadata=meta(m.CONTROLLER, m.CONTROLLER_LABELS),
            data={"controller.yaml": args.controller_config_yaml},
            opts=child,
        )
        controller = k8s.apps.v1.Deployment(
            f"{name}-controller",
            metadata=meta(m.CONTROLLER, m.CONTROLLER_LABELS),
            spec={
                "replicas": cfg.controller_replicas,
                "selector": {"match_labels": m.CONTROLLER_LABELS},
                # No surge: with one replica per zone and two zones a surge pod could never be placed.
                "strategy": {"type": "RollingUpdate", "rolling_update": {"max_surge": 0, "max_unavailable": 1}},
                "template": {
                    "metadata": {"labels": m.CONTROLLER_LABELS},
                    "spec": m.controller_pod_spec(spec, cfg, images.controller),
                },
            },
            opts=priority_deps,
        )
        k8s.core.v1.Service(
            f"{name}-controller",
            metadata=meta(m.CONTROLLER, m.CONTROLLER_LABELS),
            spec={
                "selector": m.CONTROLLER_LABELS,
                "ports": [{"name": "http", "port": m.controller_port(spec), "target_port": "http"}],
            },
            opts=child,
        )
        k8s.policy.v1.PodDisruptionBudget(
            f"{name}-controller",
            metadata=meta(m.CONTROLLER, m.CONTROLLER_LABELS),
            spec={"min_available": 1, "selector": {"match_labels": m.CONTROLLER_LABELS}},
            opts=child,
        )

        # --- network policies and alert rules ------------------------------------------------------------------------
        policies = m.network_policies(spec, cfg)
        for policy_name, policy_spec in policies.items():
            k8s.networking.v1.NetworkPolicy(
                f"{name}-netpol-{policy_name}", metadata=meta(policy_name), spec=policy_spec, opts=child
            )
        k8s.core.v1.ConfigMap(
            f"{name}-alert-rules",
            metadata=meta("ha-ops-alert-rules", {**m.PART_OF, "prometheus-rules": "true"}),
            data={m.RULES_FILE: rules_yaml()},
            opts=child,
        )

        self.namespace = namespace
        self.agent_daemonset = agent.metadata.apply(lambda meta_: meta_.name)
        self.controller_deployment = controller.metadata.apply(lambda meta_: meta_.name)
        self.network_policies = pulumi.Output.from_input(sorted(policies))
        self.register_outputs(
            {
                "namespace": self.namespace,
                "agent_daemonset": self.agent_daemonset,
                "controller_deployment": self.controller_deployment,
                "controller_url": m.controller_url(spec, cfg),
                "priority_classes": sorted(m.PRIORITY_CLASSES),
                "network_policies": self.network_policies,
                "images": images.model_dump(),
            }
        )


def _cluster_role(resource: str, name: str, labels: dict[str, str], rules: list[dict],
                  account: k8s.core.v1.ServiceAccount, namespace: pulumi.Input[str],
                  opts: pulumi.ResourceOptions) -> None:  # fmt: skip
    """A ClusterRole with `rules`, bound to the service account `account`."""
    role = k8s.rbac.v1.ClusterRole(resource, metadata={"name": name, "labels": labels}, rules=rules, opts=opts)
    k8s.rbac.v1.ClusterRoleBinding(
        resource,
        metadata={"name": name, "labels": labels},
        role_ref={"api_group": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role.metadata.name},
        subjects=[{"kind": "ServiceAccount", "name": account.metadata.name, "namespace": namespace}],
        opts=opts,
    )


def _check_controller_config(text: str, source: str) -> None:
    try:
        ControllerConfig.model_validate(yaml.safe_load(text))
    except yaml.YAMLError as exc:
        raise SpecError(source, [f"controller_config_yaml: not valid YAML ({exc})"]) from None
    except ValidationError as exc:
        raise SpecError(source, [f"controller_config_yaml.{p}" for p in validation_problems(exc)]) from None
