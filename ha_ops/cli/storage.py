"""`ha-ops storage`: health of the replicated storage, its Prometheus exporter, and the master's failover watcher."""

from __future__ import annotations

import logging
import signal
import time
from pathlib import Path

import typer

from ha_ops.cli import output
from ha_ops.storage.moosefs import MooseFS
from ha_ops.transport.local import LocalTransport

app = typer.Typer(help="The cluster's replicated storage (MooseFS).", no_args_is_help=True)

MasterOpt = typer.Option(..., "--master", help="The MooseFS master's address.")


@app.command()
def health(master: str = MasterOpt, json_out: bool = typer.Option(False, "--json")) -> None:
    """Master, chunkservers, metaloggers, chunks under goal or missing, space. Exit 1 unless healthy."""
    state = MooseFS(LocalTransport(), master).health()
    if json_out:
        output.emit_json({**state.__dict__, "healthy": state.healthy})
    elif not state.master_up:
        output.error(f"master {master} does not answer: {state.error}")
    else:
        output.result(
            f"master {master}: up; chunkservers {', '.join(state.chunkservers) or 'none'}; metaloggers "
            f"{state.metaloggers}; chunks {state.chunks} (under goal {state.undergoal}, endangered "
            f"{state.endangered}, missing {state.missing}); {state.avail_bytes / 2**30:.1f} of "
            f"{state.total_bytes / 2**30:.1f} GiB free"
        )
    if not state.healthy:
        raise typer.Exit(1)


@app.command()
def exporter(
    master: str = MasterOpt,
    address: str = typer.Option("0.0.0.0", "--address"),
    port: int = typer.Option(9425, "--port"),
    chunkservers: int = typer.Option(0, "--chunkservers", help="How many chunkservers the spec has."),
) -> None:
    """Serve the storage's health as Prometheus metrics (read from the master at every scrape)."""
    from prometheus_client import CollectorRegistry, start_http_server

    from ha_ops.storage.exporter import StorageCollector

    registry = CollectorRegistry()
    registry.register(StorageCollector(MooseFS(LocalTransport(), master, timeout=5), chunkservers))
    start_http_server(port, addr=address, registry=registry)
    output.info(f"storage exporter for {master} on {address}:{port}")
    while True:
        time.sleep(3600)


@app.command()
def watch(
    config: Path = typer.Option(..., "--config", "-c", help="The watcher's config (YAML), on the metalogger's host."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Decide and audit; fence and promote nothing."),
) -> None:
    """Watch the MooseFS master from the metalogger's host; when it is lost, fence it (ssh, else its BMC) and
    promote the metalogger (`mfsmaster -a`) here, without a human. Every step goes to an audit log on local disk
    (`ha-ops audit verify STATE_DIR/audit.jsonl`)."""
    from ha_ops.remediation.nodeops import SshNodeOps
    from ha_ops.storage.failover import FailoverWatcher, load_failover_config

    cfg = load_failover_config(config)
    if dry_run:
        cfg = cfg.model_copy(update={"dry_run": True})
    logging.getLogger("ha_ops").setLevel(logging.INFO)
    ops = SshNodeOps(cfg.access)
    # ssh gets access.connect_timeout_s to reach the master's host: a cut-off one costs that long before its BMC.
    watcher = FailoverWatcher(cfg, ops.run_command, ops.run_here)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: watcher.stop())
    mode = "dry run: decides and audits, changes nothing" if cfg.dry_run else "acting"
    output.info(f"storage watch {cfg.id}: master {cfg.master_host} ({cfg.master_address}), {mode}")
    watcher.run()
