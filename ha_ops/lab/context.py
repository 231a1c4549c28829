"""What every lab component works from: the spec, its layout, the lab's paths and namespace names."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ha_ops.lab.paths import NODE_DIR, LabPaths, netns_name
from ha_ops.spec import ClusterSpec, Layout


@dataclass(frozen=True)
class ServiceDef:
    """A daemon the lab runs in the foreground on a node ("host" for the root namespace)."""

    node: str
    service: str
    argv: list[str]
    log: Path


@dataclass(frozen=True)
class LabContext:
    spec: ClusterSpec
    layout: Layout
    paths: LabPaths

    @property
    def name(self) -> str:
        return self.spec.name

    def netns(self, node: str) -> str:
        return netns_name(self.name, node)

    def switch_names(self) -> list[str]:
        return [s.name for s in self.layout.spines] + [lf.name for lf in self.layout.leaves]

    def host_names(self) -> list[str]:
        return [n.name for n in self.layout.nodes]

    def node_dir(self, node: str) -> Path:
        return self.paths.node(node)

    @staticmethod
    def in_node(*parts: str) -> Path:
        """A path as the node itself sees its own folder."""
        return NODE_DIR.joinpath(*parts)

    @property
    def slurm_conf(self) -> Path:
        return self.paths.etc / "slurm" / "slurm.conf"

    def node_env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.slurm_conf)}
