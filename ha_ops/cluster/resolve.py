"""From what the user names to a cluster: `--inventory FILE` (a real cluster over SSH, its spec from `--spec` or
the inventory's `ha_ops_spec`) or `--target lab:NAME` (the local lab). The one place that imports the lab for the
chaos, game-day and runbook commands."""

from __future__ import annotations

from pathlib import Path

from ha_ops.cluster.base import Cluster
from ha_ops.errors import SpecError

LAB_PREFIX = "lab:"


def open_cluster(target: str | None = None, inventory: Path | None = None, spec: Path | None = None) -> Cluster:
    if target and inventory:
        raise SpecError("--target", ["give --target lab:NAME or --inventory FILE, not both"])
    if inventory is not None:
        from ha_ops.cluster.inventory import load_inventory
        from ha_ops.cluster.ssh import SshCluster
        from ha_ops.spec import load_spec

        loaded = load_inventory(inventory)
        spec_file = spec or loaded.spec
        if spec_file is None:
            raise SpecError(str(inventory), ["ha_ops_spec: name the cluster spec (or pass --spec FILE)"])
        return SshCluster(load_spec(spec_file), loaded, spec_file=Path(spec_file).resolve())
    target = target or "lab:lab"
    if not target.startswith(LAB_PREFIX) or not target[len(LAB_PREFIX) :]:
        raise SpecError("--target", [f"{target!r} is not lab:NAME (a real cluster is named with --inventory FILE)"])
    from ha_ops.cluster.lab import LabCluster

    return LabCluster.named(target[len(LAB_PREFIX) :])
