"""Where a lab keeps its files. One root directory per lab; every node sees its own folder at NODE_DIR."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# Not under /run: every node mounts a private tmpfs there, which would hide the lab files.
DEFAULT_ROOT = Path(os.environ.get("HA_OPS_LAB_ROOT", "/var/lib/ha-ops/labs"))
# Inside a node's mount namespace its own folder is bind-mounted here (a tmpfs /run is private to each node).
NODE_DIR = Path("/run/ha-ops-node")
NETNS_PREFIX = "hao-"


@dataclass(frozen=True)
class LabPaths:
    root: Path

    @classmethod
    def for_lab(cls, name: str, base: Path | None = None) -> LabPaths:
        return cls((base or DEFAULT_ROOT) / name)

    @property
    def state_file(self) -> Path:
        return self.root / "state.json"

    @property
    def lock_file(self) -> Path:
        return self.root.parent / f".{self.root.name}.lock"

    @property
    def etc(self) -> Path:
        return self.root / "etc"

    @property
    def hosts_file(self) -> Path:
        return self.etc / "hosts"

    @property
    def ssh(self) -> Path:
        return self.root / "ssh"

    @property
    def munge(self) -> Path:
        return self.root / "munge"

    @property
    def shared(self) -> Path:
        """Storage every controller sees (the spec's `shared-dir`): Slurm's StateSaveLocation lives here."""
        return self.root / "shared"

    @property
    def host_logs(self) -> Path:
        return self.root / "host"

    def node(self, name: str) -> Path:
        return self.root / "nodes" / name


def netns_name(lab: str, node: str) -> str:
    return f"{NETNS_PREFIX}{lab}-{node}"
