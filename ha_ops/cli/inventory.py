"""`ha-ops inventory`: the Ansible inventory of a cluster spec."""

from __future__ import annotations

import json
from pathlib import Path

import typer
import yaml

from ha_ops.cli import output
from ha_ops.spec import load_spec
from ha_ops.spec.addresses import read_addresses, resolve_addresses
from ha_ops.spec.inventory import render_inventory
from ha_ops.util.atomic import write_atomic


def inventory(
    spec_file: Path = typer.Option(..., "--spec", "-s", help="Cluster spec (YAML).", dir_okay=False),
    out: Path | None = typer.Option(None, "--out", "-o", help="Write the inventory here instead of stdout."),
    json_out: bool = typer.Option(False, "--json", help="JSON instead of YAML (ansible-inventory accepts both)."),
    addresses_file: Path | None = typer.Option(
        None,
        "--addresses",
        help="The hosts' real addresses: `pulumi stack output --json` of infra/aws (its `nodes`), or a {host: "
        "address} JSON/YAML mapping. Hosts it leaves out keep their spec address.",
        exists=True,
        dir_okay=False,
    ),
) -> None:
    """Render the Ansible inventory for playbooks/ from a cluster spec: role groups (slurm_controllers first one is
    the primary, slurm_compute, gpu_nodes, moosefs_*, monitoring, remediation_controllers), failure-domain, zone and
    rack groups, spares, and per-host addresses and GPU counts."""
    spec = load_spec(spec_file)
    addresses = None
    if addresses_file is not None:
        source = f"--addresses {addresses_file}"
        addresses, unlisted = resolve_addresses(spec, read_addresses(addresses_file, source), source)
        if unlisted:  # e.g. hosts a cloud stack does not build: Ansible would look for them at the spec's address
            output.warning(f"{addresses_file} has no address for {len(unlisted)} host(s), which keep their "
                        f"spec address: {', '.join(unlisted)}")  # fmt: skip
    rendered = render_inventory(spec, addresses)
    if json_out and out is None:
        output.emit_json(rendered)
        return
    addressed = f" --addresses {addresses_file}" if addresses_file is not None else ""
    text = (
        json.dumps(rendered, indent=2) + "\n"
        if json_out
        else f"# Rendered by `ha-ops inventory --spec {spec_file}{addressed}`; edit the spec, not this file.\n"
        + yaml.safe_dump(rendered, sort_keys=False, default_flow_style=False)
    )
    if out is None:
        output.result(text.rstrip("\n"))
    else:
        write_atomic(out, text)
        output.info(f"inventory for {len(rendered['all']['hosts'])} hosts written to {out}")
