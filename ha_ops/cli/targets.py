"""How `chaos run`, `chaos cleanup`, `gameday run` and `runbook verify` name the cluster they act on, with one
spelling: `--inventory FILE` (a real cluster over SSH; its spec from `--spec` or the inventory's `ha_ops_spec`) or
`--target lab:NAME` (the local lab; `--lab NAME` is its short form)."""

from __future__ import annotations

from pathlib import Path

import typer

from ha_ops.errors import SpecError

TargetOpt = typer.Option(None, "--target", envvar="HA_OPS_TARGET", help="lab:NAME, the local lab.")
InventoryOpt = typer.Option(
    None, "--inventory", "-i", envvar="HA_OPS_INVENTORY", dir_okay=False,
    help="An Ansible inventory (YAML or INI) of a real cluster, reached over SSH.",
)  # fmt: skip
SpecOpt = typer.Option(None, "--spec", dir_okay=False, help="With --inventory: the cluster spec (else ha_ops_spec).")
LabOpt = typer.Option(None, "--lab", envvar="HA_OPS_LAB", help="Short for --target lab:NAME.")


def named(
    target: str | None, inventory: Path | None, spec: Path | None, lab: str | None, default_lab: str = "lab"
) -> dict[str, str]:
    """The configuration entries that name the cluster (ha_ops.chaos.target), from the options given."""
    from ha_ops.chaos.target import configuration_for

    given = [name for name, value in (("--target", target), ("--inventory", inventory), ("--lab", lab)) if value]
    if len(given) > 1:
        raise SpecError(given[0], [f"name one cluster: {' and '.join(given)} were both given"])
    if spec is not None and inventory is None:
        raise SpecError("--spec", ["--spec goes with --inventory (a lab knows its own spec)"])
    if inventory is not None:
        return configuration_for(inventory=inventory, spec=spec)
    return configuration_for(target=target or f"lab:{lab or default_lab}")
