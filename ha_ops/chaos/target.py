"""Which cluster an activity acts on, from the experiment's configuration, the way chaostoolkit-lib hands it to every
activity that takes a `configuration` argument:

    configuration:
      ha_ops_target: lab:NAME          # the local lab
      ha_ops_inventory: hosts.yml      # or a real cluster over SSH (its spec: ha_ops_spec, or the inventory's)
      ha_ops_spec: cluster.yaml

Resolved once per run: `ha-ops chaos run`, `gameday run` and `runbook verify` open the cluster and hand it to every
activity of the run (`using`); an experiment run by Chaos Toolkit's own `chaos run` opens it on first use."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ha_ops.cluster.base import Cluster
from ha_ops.cluster.resolve import open_cluster

TARGET = "ha_ops_target"
INVENTORY = "ha_ops_inventory"
SPEC = "ha_ops_spec"

Key = tuple[str | None, str | None, str | None]
_opened: dict[Key, Cluster] = {}
_current: list[tuple[Key, Cluster]] = []


def key_of(configuration: Mapping[str, Any] | None) -> Key:
    configuration = configuration or {}
    inventory = configuration.get(INVENTORY)
    spec = configuration.get(SPEC)
    target = configuration.get(TARGET) or (None if inventory else "lab:lab")
    return (target, str(Path(inventory).resolve()) if inventory else None, str(Path(spec).resolve()) if spec else None)


def configuration_for(
    target: str | None = None, inventory: Path | None = None, spec: Path | None = None
) -> dict[str, str]:
    """The configuration entries that name a cluster (what the runner puts into each experiment it runs)."""
    if inventory is not None:
        return {INVENTORY: str(Path(inventory).resolve()), **({SPEC: str(Path(spec).resolve())} if spec else {})}
    return {TARGET: target or "lab:lab"}


def cluster(configuration: Mapping[str, Any] | None) -> Cluster:
    """The cluster the configuration names: the run's own if it is that one, else opened once and kept."""
    key = key_of(configuration)
    for current_key, current in reversed(_current):
        if current_key == key:
            return current
    if key not in _opened:
        _opened[key] = open_for(configuration)
    return _opened[key]


def open_for(configuration: Mapping[str, Any] | None) -> Cluster:
    """A fresh handle on the cluster the configuration names."""
    target, inventory, spec = key_of(configuration)
    return open_cluster(
        None if inventory else target, Path(inventory) if inventory else None, Path(spec) if spec else None
    )


@contextmanager
def using(opened: Cluster, configuration: Mapping[str, Any]) -> Iterator[Cluster]:
    """Every activity whose configuration names this cluster gets this very object while the block runs."""
    _current.append((key_of(configuration), opened))
    try:
        yield opened
    finally:
        _current.pop()
