"""`ha-ops wheelhouse hash`: pin and hash a folder of wheels for an offline, checked install."""

from __future__ import annotations

from pathlib import Path

import typer

from ha_ops.cli import output
from ha_ops.util.wheelhouse import write_requirements

app = typer.Typer(help="Wheelhouses for installing ha-ops on nodes without an index.", no_args_is_help=True)


@app.command("hash")
def hash_wheels(
    folder: Path = typer.Argument(..., help="A folder of wheels (pip wheel --wheel-dir DIR ha-ops).", file_okay=False),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Write FOLDER/requirements.txt: every wheel as `name==version --hash=sha256:...`, for `pip install --no-index
    --find-links FOLDER --require-hashes -r FOLDER/requirements.txt` (what the ha_ops_agent role runs), which
    installs exactly these files and refuses a wheel changed or swapped since."""
    path, pinned = write_requirements(folder)
    if json_out:
        output.emit_json({"requirements": str(path), "wheels": [p.__dict__ for p in pinned]})
    else:
        output.result(f"{path}: {len(pinned)} wheels pinned with their sha256")
