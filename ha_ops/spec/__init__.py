"""The cluster model (ClusterSpec) and the layout derived from it."""

from ha_ops.spec.layout import Layout, NodeLayout, compute_layout
from ha_ops.spec.load import load_spec, parse_spec
from ha_ops.spec.model import ClusterSpec

__all__ = ["ClusterSpec", "Layout", "NodeLayout", "compute_layout", "load_spec", "parse_spec"]
