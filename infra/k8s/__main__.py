"""The Kubernetes layer of a cluster: the HA policy is checked, then ClusterK8sLayer deploys ha-ops (agent
DaemonSet, remediation controller, priority classes, network policies, alert rules) to the cluster the kubeconfig
names, through the pulumi-kubernetes provider built by scripts/tools.sh."""

from __future__ import annotations

from pathlib import Path

import pulumi
import pulumi_kubernetes as k8s

from ha_ops.iac.components import ClusterK8sLayer, ClusterK8sLayerArgs
from ha_ops.iac.k8s_manifests import K8sLayerConfig, default_controller_config
from ha_ops.iac.policy import enforce_spec
from ha_ops.spec import load_spec

config = pulumi.Config()
spec = load_spec(Path(config.require("spec")))
enforce_spec(spec)
# `layer`: how the layer fits this cluster (K8sLayerConfig: namespace, where the controllers run, ...).
layer_config = K8sLayerConfig.model_validate(config.get_object("layer") or {})
controller_config = default_controller_config(spec, layer_config)
# With `render_dir` the manifests are written there instead of applied (no cluster needed: previews, reviews).
render_dir = config.get("render_dir")
if render_dir:
    provider = k8s.Provider("cluster", render_yaml_to_directory=render_dir)
else:
    provider = k8s.Provider("cluster", kubeconfig=Path(config.require("kubeconfig")).read_text())
layer = ClusterK8sLayer("ha-ops", ClusterK8sLayerArgs(spec, controller_config, config=layer_config, provider=provider))
pulumi.export("namespace", layer.namespace)
pulumi.export("agent_namespace", layer.agent_namespace)
pulumi.export("agent_daemonset", layer.agent_daemonset)
pulumi.export("controller_deployment", layer.controller_deployment)
