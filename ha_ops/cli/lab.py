"""`ha-ops lab`: the local emulated cluster."""

from __future__ import annotations

import typer

app = typer.Typer(help="Build, check and remove the local lab cluster (root).", no_args_is_help=True)
