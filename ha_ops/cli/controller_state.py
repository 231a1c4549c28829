"""`ha-ops controller state list|restore`: the snapshots of the controllers' shared state, and a damaged state put
back from one (ha_ops.remediation.restore holds the logic; this reads the options and prints)."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import typer

from ha_ops.cli import output
from ha_ops.errors import SpecError
from ha_ops.remediation.audit import read_key
from ha_ops.remediation.documents import DirectoryDocuments, Documents
from ha_ops.remediation.lease import LeaderLease, Lease
from ha_ops.remediation.model import ControllerState
from ha_ops.remediation.restore import (
    apply,
    check_input,
    damaged_name,
    lease_holder,
    plan,
    read_chain,
    restore_who,
)
from ha_ops.remediation.snapshots import read_all

state_app = typer.Typer(
    help="The controllers' shared state: its snapshots, and a damaged state put back from one.", no_args_is_help=True
)

RESTORE_LEASE_TTL_S = 10.0  # the restore's own lease term, given a state folder without the controllers' config

StateDirOpt = typer.Option(None, "--state-dir", help="The controllers' shared state folder (their state_dir).")
ConfigOpt = typer.Option(
    None,
    "--config",
    "-c",
    help="A controller config instead: the state where it keeps it (files or ConfigMaps), its audit key, and its "
    "nodes (a snapshot naming others is another cluster's).",
)
KeyOpt = typer.Option(
    None,
    "--audit-key-file",
    help="The audit key, to check the chain's HMACs (needed when the log is keyed; with --config: its audit_key_file).",
)


@dataclass
class Shared:
    documents: Documents
    lease: Callable[[], LeaderLease]  # made only to restore: a dry run or a list takes no term
    key_file: Path | None  # read only to restore
    nodes: set[str] | None
    init: Callable[[ControllerState], None] | None


def _shared(state_dir: Path | None, config: Path | None, key_file: Path | None) -> Shared:
    if (state_dir is None) == (config is None):
        raise SpecError("--state-dir", ["give --state-dir DIR or --config FILE (one of them)"])
    me = restore_who(socket.gethostname())
    if config is not None:
        from ha_ops.remediation import policy
        from ha_ops.remediation.config import load_controller_config
        from ha_ops.remediation.wiring import make_documents, make_lease

        cfg = load_controller_config(config).model_copy(update={"id": me})
        nodes = cfg.node_names()
        return Shared(make_documents(cfg), lambda: make_lease(cfg, time.time), key_file or cfg.audit_key_file, nodes,
                      lambda state: policy.init_state(state, cfg, time.time()))  # fmt: skip
    assert state_dir is not None
    if not state_dir.is_dir():
        raise SpecError("--state-dir", [f"{state_dir}: not a folder"])
    lease = lambda: Lease(state_dir, me, RESTORE_LEASE_TTL_S)  # noqa: E731
    return Shared(DirectoryDocuments(state_dir), lease, key_file, None, None)


@state_app.command("list")
def list_snapshots(
    state_dir: Path | None = StateDirOpt,
    config: Path | None = ConfigOpt,
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """The state snapshots the leader keeps (oldest first): id (audit seq, then time), when, by whom, and whether it
    is at the audit log's head (only such a one can be restored as it is)."""
    shared = _shared(state_dir, config, None)
    snapshots, damaged = read_all(shared.documents)
    head = read_chain(shared.documents.read("audit.jsonl"), None).head  # (unchecked: restore checks the chain)
    rows = [{**s.summary(), "at_head": (s.audit_seq, s.audit_hash) == (head.seq, head.hash)} for s in snapshots]
    if json_out:
        output.emit_json({"snapshots": rows, "damaged": damaged, "audit_head_seq": head.seq})
        return
    # One line each, not a table: an id must stay whole to be pasted into --from (and grepped).
    output.result(f"state snapshots in {shared.documents.describe('snapshots/')}, oldest first (audit head: seq "
                  f"{head.seq}):")  # fmt: skip
    for row in rows:
        at_head = "  <- at the audit head" if row["at_head"] else ""
        output.result(f"{row['id']}  {row['slot']}  seq {row['audit_seq']}  taken {row['taken']} by {row['by']}"
                      f"{at_head}")  # fmt: skip
    for slot, why in damaged.items():
        output.warning(f"{shared.documents.describe('snapshots/' + slot)}: {why}")


@state_app.command("restore")
def restore(
    state_dir: Path | None = StateDirOpt,
    config: Path | None = ConfigOpt,
    from_name: str | None = typer.Option(
        None, "--from", help="The snapshot's id or slot (`state list`). Default: the newest at the audit log's head."
    ),
    rebuild: bool = typer.Option(
        False,
        "--rebuild-from-audit",
        help="Best effort, when no snapshot is at the head: the newest snapshot before it (or a fresh state) with "
        "the audit entries after it replayed onto the nodes' phases.",
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Say what it would do; change nothing."),
    json_out: bool = typer.Option(False, "--json"),
    key_file: Path | None = KeyOpt,
) -> None:
    """Put back the shared state from a snapshot, checked against the keyed audit chain: the log must verify and the
    snapshot must be exactly at its head (an older one would forget the actions after it; a newer one, or one not in
    the chain, is a cut log or another cluster's). Refused while a controller holds the lease. The damaged state is
    kept beside it (state.json.damaged-<time>); the controllers take the restored one up at their next lease step.
    Exit 2 for a missing, damaged or foreign snapshot (nothing changed); 1 when refused."""
    check_input(from_name, rebuild)
    shared = _shared(state_dir, config, key_file)
    key = read_key(shared.key_file) if shared.key_file else None
    chain = read_chain(shared.documents.read("audit.jsonl"), key)
    the_plan = plan(shared.documents, chain, from_name=from_name, rebuild=rebuild, nodes=shared.nodes,
                    init=shared.init)  # fmt: skip
    where = shared.documents.describe("state.json")
    if dry_run:
        lease_holder(shared.lease(), time.time)
        kept = None if the_plan.current == "missing" else shared.documents.describe(damaged_name(time.time()))
        result = {**the_plan.describe(), "state": where, "kept": kept, "dry_run": True}
    else:
        result = {**apply(the_plan, shared.documents, shared.lease(), key), "dry_run": False}
    if json_out:
        output.emit_json(result)
        return
    source = f"snapshot {the_plan.source}" if the_plan.how == "snapshot" else (
        f"{the_plan.source} and {the_plan.replayed} audit entries replayed (best effort)")  # fmt: skip
    verb = "would restore" if dry_run else "restored"
    output.result(f"{verb} {where} from {source}, at audit seq {the_plan.head.seq} (the audit log's head)")
    output.result(f"the state was {the_plan.current}")
    if result.get("kept"):
        output.result(f"{'it would be' if dry_run else 'it is'} kept as {result['kept']}")
    for note in the_plan.notes:
        output.warning(note)
    if not dry_run:
        output.result("the controllers take it up at their next lease step (`ha-ops controller status`)")
