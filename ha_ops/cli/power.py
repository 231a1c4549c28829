"""`ha-ops power`: a node's power through its BMC (the inventory's `ha_ops_bmc`: Redfish or IPMI), as an operator
or the remediation controller (its power cycle and fence commands) asks for it."""

from __future__ import annotations

from pathlib import Path

import typer

from ha_ops.cli import output
from ha_ops.cluster.ops import PowerAction

app = typer.Typer(help="A node's power through its BMC (Redfish or IPMI, from the inventory).", no_args_is_help=True)

InventoryOpt = typer.Option(..., "--inventory", "-i", help="Ansible inventory naming each host's ha_ops_bmc.")
NodeArg = typer.Argument(..., help="The node, as the inventory names it.")
JsonOpt = typer.Option(False, "--json", help="Machine-readable result on stdout.")


def _backend(inventory: Path, node: str):  # -> PowerBackend
    from ha_ops.cluster.inventory import load_inventory
    from ha_ops.cluster.power import backend, password
    from ha_ops.errors import SpecError

    host = load_inventory(inventory).host(node)
    if host.bmc is None:
        raise SpecError(str(inventory), [f"{node}: no ha_ops_bmc (its BMC's kind, address, user and password)"])
    password(host.bmc, node)  # a missing credential is bad input, before the BMC is asked anything
    return backend(node, host.bmc)


@app.command()
def status(node: str = NodeArg, inventory: Path = InventoryOpt, json_out: bool = JsonOpt) -> None:
    """What the node's BMC reports: on, off or unknown."""
    power = _backend(inventory, node)
    try:
        state = power.state()
    finally:
        power.close()
    if json_out:
        output.emit_json({"node": node, "power": state})
    else:
        output.result(f"{node}: power {state}")


def _act(node: str, inventory: Path, action: PowerAction, dry_run: bool, json_out: bool) -> None:
    power = _backend(inventory, node)
    if dry_run:
        line = power.describe(action)
        if json_out:
            output.emit_json({"node": node, "action": action, "dry_run": True, "would": line})
        else:
            output.result(f"dry run: {line}")
        return
    try:
        power.act(action)  # returns once the BMC reports the result
        state = power.state()
    finally:
        power.close()
    if json_out:
        output.emit_json({"node": node, "action": action, "power": state})
    else:
        output.result(f"{node}: power {action} done; the BMC reports {state}")


DryRunOpt = typer.Option(False, "--dry-run", help="Say what would be sent to the BMC; send nothing.")


@app.command()
def off(
    node: str = NodeArg, inventory: Path = InventoryOpt, dry_run: bool = DryRunOpt, json_out: bool = JsonOpt
) -> None:
    """Power the node off (a hard off: the fence for a node that must stop now); returns once the BMC reports off."""
    _act(node, inventory, "off", dry_run, json_out)


@app.command()
def on(
    node: str = NodeArg, inventory: Path = InventoryOpt, dry_run: bool = DryRunOpt, json_out: bool = JsonOpt
) -> None:
    """Power the node on; returns once the BMC reports on."""
    _act(node, inventory, "on", dry_run, json_out)


@app.command()
def cycle(
    node: str = NodeArg, inventory: Path = InventoryOpt, dry_run: bool = DryRunOpt, json_out: bool = JsonOpt
) -> None:
    """Power-cycle the node (off, then on); returns once the BMC reports it on again."""
    _act(node, inventory, "cycle", dry_run, json_out)
