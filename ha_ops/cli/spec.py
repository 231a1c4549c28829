"""`ha-ops spec`: validate and show cluster specs."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from ha_ops.cli import output
from ha_ops.spec import compute_layout, load_spec

app = typer.Typer(help="Validate and show cluster specs.", no_args_is_help=True)

SpecFile = typer.Argument(..., help="Path to a cluster spec (YAML).", exists=False, dir_okay=False)


@app.command()
def validate(
    file: Path = SpecFile, json_out: bool = typer.Option(False, "--json", help="Machine-readable result.")
) -> None:
    """Check a spec against every rule; exit 2 naming each problem if it is invalid."""
    spec = load_spec(file)
    layout = compute_layout(spec)
    if json_out:
        output.emit_json({"file": str(file), "valid": True, "name": spec.name, "hosts": len(layout.nodes)})
    else:
        output.result(f"{file}: valid ({spec.name}: {len(layout.nodes)} hosts, {len(layout.leaves)} leaves)")


@app.command()
def show(
    file: Path = SpecFile, json_out: bool = typer.Option(False, "--json", help="The spec and layout as JSON.")
) -> None:
    """Print the spec with its derived layout (every host, its domain, leaf and address)."""
    spec = load_spec(file)
    layout = compute_layout(spec)
    if json_out:
        output.emit_json(
            {
                "spec": spec.model_dump(mode="json"),
                "layout": {
                    "spines": [s.name for s in layout.spines],
                    "leaves": [{"name": lf.name, "asn": lf.asn, "subnet": str(lf.subnet)} for lf in layout.leaves],
                    "hosts": [
                        {
                            "name": n.name,
                            "roles": list(n.roles),
                            "domain": n.domain,
                            "leaf": n.leaf,
                            "address": str(n.address),
                            "pool": n.pool,
                            "gpus": n.gpus,
                            "spare": n.spare,
                        }
                        for n in layout.nodes
                    ],
                },
            }
        )
        return
    table = Table(title=f"{spec.name}{' (production)' if spec.production else ''}")
    for col in ("host", "roles", "domain", "leaf", "address", "gpus", "spare"):
        table.add_column(col)
    for n in layout.nodes:
        table.add_row(
            n.name,
            ",".join(n.roles),
            n.domain,
            str(n.leaf),
            str(n.address),
            str(n.gpus),
            "yes" if n.spare else "",
        )
    output.result(table)
