"""`ha-ops inventory`: the Ansible inventory of a cluster spec."""

from __future__ import annotations

import json
from pathlib import Path

import typer
import yaml

from ha_ops.cli import output
from ha_ops.spec import load_spec
from ha_ops.spec.inventory import render_inventory
from ha_ops.util.atomic import write_atomic


def inventory(
    spec_file: Path = typer.Option(..., "--spec", "-s", help="Cluster spec (YAML).", dir_okay=False),
    out: Path | None = typer.Option(None, "--out", "-o", help="Write the inventory here instead of stdout."),
    json_out: bool = typer.Option(False, "--json", help="JSON instead of YAML (ansible-inventory accepts both)."),
) -> None:
    """Render the Ansible inventory for playbooks/ from a cluster spec: role groups (slurm_controllers first one is
    the primary, slurm_compute, gpu_nodes, moosefs_*, monitoring, remediation_controllers), failure-domain, zone and
    rack groups, spares, and per-host addresses and GPU counts."""
    rendered = render_inventory(load_spec(spec_file))
    if json_out and out is None:
        output.emit_json(rendered)
        return
    text = (
        json.dumps(rendered, indent=2) + "\n"
        if json_out
        else f"# Rendered by `ha-ops inventory --spec {spec_file}`; edit the spec, not this file.\n"
        + yaml.safe_dump(rendered, sort_keys=False, default_flow_style=False)
    )
    if out is None:
        output.result(text.rstrip("\n"))
    else:
        write_atomic(out, text)
        output.info(f"inventory for {len(rendered['all']['hosts'])} hosts written to {out}")
