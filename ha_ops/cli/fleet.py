"""`ha-ops fleet history`: the fleet's reliability history as the remediation controller keeps it (docs/fleet.md)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from ha_ops.cli import output
from ha_ops.cli.controller import CaOpt, CertOpt, ConfigOpt, KeyOpt, UrlOpt, _tls
from ha_ops.errors import SpecError, TransportError
from ha_ops.plan.durations import format_duration
from ha_ops.remediation import history
from ha_ops.remediation.client import call
from ha_ops.remediation.config import Fleet, Lemon, load_controller_config
from ha_ops.remediation.model import ControllerState
from ha_ops.remediation.store import StateError, load_state, parse_state, read_state

app = typer.Typer(help="The fleet's reliability history: incidents, MTBI, lemon nodes, tiers.", no_args_is_help=True)


def _state(
    url: str, state_dir: Path | None, config: Path | None, cert: Path | None, key: Path | None, ca: Path | None
) -> tuple[ControllerState, Fleet, Lemon]:
    """The controller's state (from the config's shared state, a state folder, or a controller's API), and the
    windows to judge it by (the config's; else the defaults)."""
    if config is not None:
        from ha_ops.remediation.wiring import make_documents

        cfg = load_controller_config(config)
        return load_state(make_documents(cfg)), cfg.fleet, cfg.lemon  # (where the config keeps it; no lease read)
    elif state_dir is not None:
        return read_state(state_dir / "state.json"), Fleet(), Lemon()
    else:
        answer = call(f"{url.rstrip('/')}/v1/state", files=_tls(cert, key, ca))
        data = answer.get("state")
        if data is None:
            leader = answer.get("leader_name") or "unknown"
            raise TransportError(f"{url}: {answer.get('id')} is standby (the leader is {leader}); ask the leader")
        fleet, lemon = Fleet(), Lemon()
    try:  # (the API's answer, or a state document: parse_state reads both)
        return parse_state(data, f"the state {url} answered"), fleet, lemon
    except StateError as exc:
        raise SpecError("state", [str(exc)]) from None


def _when(at: float | None) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M") if at else ""


def _duration(seconds: float | None) -> str:
    return "-" if seconds is None else format_duration(seconds)


@app.command("history")
def history_command(
    node: str | None = typer.Argument(None, metavar="NODE", help="One node (default: every node)."),
    url: str = UrlOpt,
    state_dir: Path | None = typer.Option(None, "--state-dir", help="Read the shared state instead of asking."),
    config: Path | None = ConfigOpt,
    json_out: bool = typer.Option(False, "--json"),
    cert: Path | None = CertOpt,
    key: Path | None = KeyOpt,
    ca: Path | None = CaOpt,
) -> None:
    """Each node's incidents (time, cause, actions, outcome), MTBI, reliability tier and lemon status, and each
    pool's MTBI. The windows are the config's with --config, else the defaults (docs/fleet.md)."""
    from ha_ops.util.names import node_name_problem

    if node is not None and (problem := node_name_problem(node)) is not None:
        raise SpecError("NODE", [problem])
    state, fleet, lemon = _state(url, state_dir, config, cert, key, ca)
    if node is not None and node not in state.nodes:
        raise SpecError("NODE", [f"no node {node!r} in the controller's state"])
    data = history.report(state, time.time(), fleet, lemon, node)
    if json_out:
        output.emit_json(data)
        return
    _show(data, node)


def _show(data: dict[str, Any], node: str | None) -> None:
    nodes = data["nodes"]
    table = Table(title=f"nodes (MTBI over {data['mtbi_window_s'] / 86400:g} days)")
    for col in ("node", "pool", "phase", "tier", "incidents", "MTBI", "lemon (recent/limit)"):
        table.add_column(col)
    held = []
    for name, rec in nodes.items():
        lemon = rec["lemon"]
        said = "held" if lemon["held"] else f"{lemon['recent']}/{lemon['limit']}" if lemon["enabled"] else "off"
        table.add_row(name, rec["pool"], rec["phase"], rec["tier"], str(rec["incidents_in_window"]),
                      _duration(rec["mtbi_s"]), said)  # fmt: skip
        if lemon["held"]:
            held.append(f"{name}: held for replacement: {lemon['reason']}")
    output.result(table)
    for line in held:
        output.result(line)
    for name, rec in nodes.items():
        if not rec["incidents"] or (node is None and not rec["incidents_in_window"]):
            continue
        incidents = Table(title=f"{name}: incidents")
        for col in ("at", "cause", "actions", "outcome", "reason"):
            incidents.add_column(col)
        for incident in rec["incidents"]:
            incidents.add_row(_when(incident["at"]), incident["cause"], ", ".join(incident["actions"]),
                              incident["outcome"] or "(out of service)", incident["reason"][:60])  # fmt: skip
        output.result(incidents)
    if node is None:
        pools = Table(title="pools")
        for col in ("pool", "nodes", "incidents", "MTBI"):
            pools.add_column(col)
        for name, pool in data["pools"].items():
            pools.add_row(name, str(pool["nodes"]), str(pool["incidents"]), _duration(pool["mtbi_s"]))
        output.result(pools)
