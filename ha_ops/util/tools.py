"""The Go-built tools (Pulumi, the Kubernetes control plane, etcd, KWOK) that scripts/tools.sh links into tools/bin."""

from __future__ import annotations

import os
from pathlib import Path

from ha_ops.errors import HaOpsError

REPO = Path(__file__).resolve().parents[2]
# Where scripts/tools.sh links what it built; HA_OPS_TOOLS_BIN for an installed ha-ops.
TOOLS_BIN = Path(os.environ.get("HA_OPS_TOOLS_BIN", REPO / "tools" / "bin"))


class MissingTool(HaOpsError):
    pass


def tool(name: str) -> Path:
    """The path of a built tool; MissingTool naming the set-up step when it was not built."""
    path = TOOLS_BIN / name
    if not path.exists():
        raise MissingTool(f"{path} is missing: build the tools with `scripts/tools.sh` (part of `make setup`)")
    return path
