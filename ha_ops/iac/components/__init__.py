"""Pulumi components built from a ClusterSpec. Each checks its high-availability rules before it registers anything
and creates its children with parent=itself, through the factories in its args."""

from ha_ops.iac.components.control_plane import ControlPlane, ControlPlaneArgs
from ha_ops.iac.components.fabric import Fabric, FabricArgs
from ha_ops.iac.components.k8s_layer import ClusterK8sLayer, ClusterK8sLayerArgs, K8sLayerConfig
from ha_ops.iac.components.node_pool import GpuNodePool, GpuNodePoolArgs
from ha_ops.iac.components.storage import ReplicatedStorage, ReplicatedStorageArgs

__all__ = [
    "ClusterK8sLayer",
    "ClusterK8sLayerArgs",
    "ControlPlane",
    "ControlPlaneArgs",
    "Fabric",
    "FabricArgs",
    "GpuNodePool",
    "GpuNodePoolArgs",
    "K8sLayerConfig",
    "ReplicatedStorage",
    "ReplicatedStorageArgs",
]
