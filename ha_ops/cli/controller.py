"""`ha-ops controller` (run, check-config, status, repaired, breaker-reset, hold) and `ha-ops audit verify`."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from ha_ops.cli import output
from ha_ops.cli.controller_state import state_app
from ha_ops.errors import SpecError
from ha_ops.remediation.audit import AuditHead, check_records, keyed_entries, read_key, verify, verify_text
from ha_ops.remediation.audit_sink import compare, shipped_entries
from ha_ops.remediation.client import ControllerRefused, call
from ha_ops.remediation.config import ControllerConfig, load_controller_config
from ha_ops.remediation.lease import RecordedHead
from ha_ops.remediation.store import read_state
from ha_ops.schedulers.base import Scheduler
from ha_ops.security.tls import TlsFiles

controller_app = typer.Typer(help="The remediation controller.", no_args_is_help=True)
audit_app = typer.Typer(help="The controller's audit log.", no_args_is_help=True)
maintenance_app = typer.Typer(
    help="Maintenance windows: the controller records a node's reports but remediates nothing on it.",
    no_args_is_help=True,
)
controller_app.add_typer(maintenance_app, name="maintenance")
controller_app.add_typer(state_app, name="state")  # snapshots and restore (controller_state.py)

# How long the controller leaves a drained node's GpuHealthy condition to the node's agent before writing it itself
# (schedulers/k8s_conditions.py): longer than the agent's wait after an accepted report (unhealthy_jitter_s, 2 s by
# default) and a sweep (1 s).
CONDITION_GRACE_S = 3.0

UrlOpt = typer.Option("http://127.0.0.1:8800", "--url", envvar="HA_OPS_CONTROLLER_URL", help="A controller's base URL.")


CertOpt = typer.Option(
    None,
    "--cert",
    envvar="HA_OPS_TLS_CERT",
    help="Client certificate for an https:// URL (an operator's: O=ha-ops:operators).",
)
KeyOpt = typer.Option(None, "--key", envvar="HA_OPS_TLS_KEY", help="Its private key.")
CaOpt = typer.Option(
    None, "--ca", envvar="HA_OPS_TLS_CA", help="The cluster CA that signed the controllers' certificates."
)


def _tls(cert: Path | None, key: Path | None, ca: Path | None) -> TlsFiles | None:
    given = {"--cert": cert, "--key": key, "--ca": ca}
    if not any(given.values()):
        return None
    missing = [name for name, value in given.items() if value is None]
    if missing:
        raise SpecError("tls", [f"{', '.join(missing)}: give --cert, --key and --ca together"])
    assert cert is not None and key is not None and ca is not None
    return TlsFiles(cert_file=cert, key_file=key, ca_file=ca)


def make_scheduler(cfg: ControllerConfig) -> Scheduler:
    """The scheduler the config names: Slurm through its commands on this host, or the Kubernetes API."""
    from ha_ops.schedulers.open import open_scheduler

    if cfg.scheduler == "kubernetes":
        from ha_ops.remediation.config import KubernetesConfig
        from ha_ops.schedulers.kubernetes import KubernetesOptions

        k8s = cfg.kubernetes or KubernetesConfig()
        options = KubernetesOptions(cfg.partition, k8s.default_drain_policy, k8s.eviction_timeout_s, watch_nodes=True,
                                    condition_grace_s=CONDITION_GRACE_S)  # fmt: skip
        return open_scheduler("kubernetes", kubeconfig=k8s.kubeconfig, kubernetes_options=options)
    return open_scheduler("slurm", slurm_host=cfg.id, slurm_timeout=cfg.slurm_timeout_s)


@controller_app.command("run")
def run(
    config: Path = typer.Option(..., "--config", "-c", help="Controller config (YAML)."),
    instance: str | None = typer.Option(
        None,
        "--id",
        envvar="HA_OPS_CONTROLLER_ID",
        help="This instance's name, over the config's `id` (on Kubernetes: the pod's name, so replicas differ).",
    ),
    address: str | None = typer.Option(
        None,
        "--address",
        envvar="HA_OPS_CONTROLLER_ADDRESS",
        help="This instance's own address, added to the names its own certificate serves at "
        "(certificates.serve_names; on Kubernetes: the pod's IP).",
    ),
) -> None:
    """Run one controller instance (start one on each controller host; they elect a leader)."""
    from ha_ops.remediation.app import open_controller
    from ha_ops.remediation.executor import Executor
    from ha_ops.remediation.nodeops import SshNodeOps

    cfg = load_controller_config(config)
    if instance:
        cfg = cfg.model_copy(update={"id": instance})
    if address and cfg.certificates is not None and cfg.certificates.serve_names:
        names = [*cfg.certificates.serve_names, address]
        cfg = cfg.model_copy(update={"certificates": cfg.certificates.model_copy(update={"serve_names": names})})
    logging.getLogger("ha_ops").setLevel(logging.INFO)
    controller = open_controller(cfg, Executor(make_scheduler(cfg), SshNodeOps(cfg.access), cfg.partition))
    mode = "shadow mode (dry run): decides and audits, changes nothing" if cfg.safety.dry_run else "acting"
    output.info(
        f"controller {cfg.id} ({cfg.scheduler}): state in {controller.documents.describe('state.json')}, {mode}"
    )
    controller.run()


@controller_app.command("check-config")
def check_config(
    file: Path = typer.Argument(..., help="Controller config (YAML) to check: a candidate before it is installed."),
) -> None:
    """Check a controller config with the controller's own loader. Exit 0 if valid; 2 and one line per bad field."""
    cfg = load_controller_config(file)
    pools = ", ".join(f"{name} ({len(p.nodes)} nodes, {len(p.spares)} spares)" for name, p in cfg.pools.items())
    where = f"state in {cfg.state_dir}" if cfg.state_dir is not None else "state in the Kubernetes API"
    served = "mutual TLS" if cfg.tls is not None else "plain HTTP (insecure: true)"
    output.result(f"{file}: ok (id {cfg.id}, {cfg.scheduler}, {where}; pools {pools or 'none'}; {served})")


ConfigOpt = typer.Option(
    None, "--config", "-c", help="Read the shared state where this controller config keeps it (files or ConfigMaps)."
)


def _shared_state(cfg: ControllerConfig) -> dict[str, Any]:
    """The state and the lease, read where the config keeps them (without asking a controller)."""
    import time

    from ha_ops.remediation.store import load_state
    from ha_ops.remediation.wiring import make_documents, make_lease

    record = make_lease(cfg, time.time).read()
    holder = {"holder": record.holder, "token": record.token} if record is not None else None
    return {"state": load_state(make_documents(cfg)).model_dump(mode="json"), "lease": holder}


@controller_app.command()
def status(
    url: str = UrlOpt,
    state_dir: Path | None = typer.Option(None, "--state-dir", help="Read the shared state instead of asking."),
    config: Path | None = ConfigOpt,
    json_out: bool = typer.Option(False, "--json"),
    cert: Path | None = CertOpt,
    key: Path | None = KeyOpt,
    ca: Path | None = CaOpt,
) -> None:
    """Leader, circuit breaker and every node's phase."""
    if config is not None:
        data: dict[str, Any] = _shared_state(load_controller_config(config))
    elif state_dir is not None:
        data = {"state": read_state(state_dir / "state.json").model_dump(mode="json")}
        lease = state_dir / "lease.json"
        data["lease"] = json.loads(lease.read_text()) if lease.exists() else None
    else:
        data = call(f"{url.rstrip('/')}/v1/state", files=_tls(cert, key, ca))
    if json_out:
        output.emit_json(data)
        return
    state = data.get("state")
    if state is None:
        output.result(f"{data.get('id')} is standby; the leader is {data.get('leader_name') or 'unknown'}")
        if blocked := data.get("blocked"):  # it wins the lease but cannot lead (remediation/blocked.py)
            output.warning(f"it cannot take over ({blocked['reason']}, {blocked['attempts']} attempt(s)): "
                           f"{blocked['error']}; see `ha-ops controller state restore`")  # fmt: skip
        return
    lease = data.get("lease")
    if lease:  # read from the shared state: who holds the lease, in which term
        output.result(f"lease: {lease.get('holder') or 'nobody'} (token {lease.get('token')})")
    elif data.get("leader_name"):
        output.result(f"leader: {data['leader_name']}")
    breaker = state["breaker"]
    output.result(f"circuit breaker: {'OPEN: ' + breaker['reason'] if breaker['open'] else 'closed'}")
    if (seen := data.get("observers")) is not None:  # (the leader's own judgement: remediation/observers.py)
        whole = "whole: silence counts" if seen["view_whole"] else "not whole: no node is found lost on silence"
        output.result(f"view of the fleet: {whole}")
        for node, why in seen["held"].items():
            output.result(f"held back: {node}: {why}")
    for alert in state.get("storage_alerts", {}):
        output.result(f"storage: {alert} firing")
    for burst in state.get("bursts", [])[-3:]:  # application XIDs on many nodes: one job's fault (the latest)
        output.result(f"burst: {burst['message']}")
    for host, fenced in state.get("fences", {}).items():  # fenced Slurm controller hosts and their heal
        note = f", {fenced['note']}" if fenced.get("note") else ""
        output.result(f"fenced: {host} ({fenced['how']}): {fenced['phase']}{note}")
    for host, held in state.get("held", {}).items():
        output.result(f"held: {host}: {held['reason']} (by {held['by']})")
    table = Table(title="nodes")
    for col in ("node", "pool", "phase", "rung", "reason"):
        table.add_column(col)
    for rec in state["nodes"].values():
        spare = " (spare, in service)" if rec["spare"] and rec["in_main"] else (" (spare)" if rec["spare"] else "")
        table.add_row(rec["name"] + spare, rec["pool"], rec["phase"], rec["rung"] or "", rec["reason"][:60])
    output.result(table)
    pending = [i for i in state["intents"] if i["status"] == "pending"]
    output.result(f"pending intents: {len(pending)}")


@controller_app.command()
def repaired(
    node: str = typer.Argument(...),
    url: str = UrlOpt,
    cert: Path | None = CertOpt,
    key: Path | None = KeyOpt,
    ca: Path | None = CaOpt,
) -> None:
    """Tell the leader a node held for replacement was repaired: it validates it and returns it to service."""
    _node_names([node])  # (the URL path would carry it; the controller refuses it too)
    output.emit_json(call(f"{url.rstrip('/')}/v1/nodes/{node}/repaired", "POST", _tls(cert, key, ca)))


@controller_app.command("breaker-reset")
def breaker_reset(
    url: str = UrlOpt, cert: Path | None = CertOpt, key: Path | None = KeyOpt, ca: Path | None = CaOpt
) -> None:
    """Close the circuit breaker after the cause of a mass failure was understood."""
    output.emit_json(call(f"{url.rstrip('/')}/v1/breaker/reset", "POST", _tls(cert, key, ca)))


def _node_names(nodes: list[str]) -> list[str]:
    from ha_ops.util.names import node_name_problem

    problems = [p for n in nodes if (p := node_name_problem(n)) is not None]
    if problems:
        raise SpecError("NODE", problems)
    return nodes


@maintenance_app.command("start")
def maintenance_start(
    nodes: list[str] = typer.Argument(..., metavar="NODE...", help="The nodes."),
    reason: str = typer.Option(..., "--reason", help="Why (audited, and shown in the controller's state)."),
    ttl_s: float = typer.Option(3600.0, "--ttl-s", min=1, max=7 * 86400, help="It ends by itself after this."),
    url: str = UrlOpt,
    cert: Path | None = CertOpt,
    key: Path | None = KeyOpt,
    ca: Path | None = CaOpt,
) -> None:
    """Open (or extend) a maintenance window on the nodes, as an operator (audited with the certificate's name)."""
    body = {"nodes": _node_names(nodes), "reason": reason, "ttl_s": ttl_s}
    output.emit_json(call(f"{url.rstrip('/')}/v1/maintenance", "POST", _tls(cert, key, ca), body))


@maintenance_app.command("end")
def maintenance_end(
    nodes: list[str] = typer.Argument(..., metavar="NODE...", help="The nodes."),
    url: str = UrlOpt,
    cert: Path | None = CertOpt,
    key: Path | None = KeyOpt,
    ca: Path | None = CaOpt,
) -> None:
    """Close the nodes' maintenance windows: the controller remediates them again. For a node a driver rollout
    left out of service for a person (its window lasts a week): once that person has put it right."""
    output.emit_json(call(f"{url.rstrip('/')}/v1/maintenance/end", "POST", _tls(cert, key, ca),
                          {"nodes": _node_names(nodes)}))  # fmt: skip


@controller_app.command()
def hold(
    node: str = typer.Argument(..., help="A Slurm or remediation controller's host (the hosts the controllers fence)."),
    release: bool = typer.Option(False, "--release", help="End the hold: ha-ops may bring the host back again."),
    reason: str = typer.Option("held by an operator", "--reason", help="Why (audited, and kept in the state)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="The controller says what would change; nothing changes."),
    json_out: bool = typer.Option(False, "--json"),
    url: str = UrlOpt,
    cert: Path | None = CertOpt,
    key: Path | None = KeyOpt,
    ca: Path | None = CaOpt,
) -> None:
    """Hold a host: a fenced Slurm controller's host held is neither powered on again nor has its slurmctld
    restarted by ha-ops (the heal waits) until the hold is released. Audited, as the caller."""
    _node_names([node])
    if not reason.strip():
        raise SpecError("--reason", ["must not be empty"])
    body = {"node": node, "release": release, "reason": reason.strip(), "dry_run": dry_run}
    try:
        answer = call(f"{url.rstrip('/')}/v1/holds", "POST", _tls(cert, key, ca), body)
    except ControllerRefused as exc:
        if exc.status == 400:  # refused on its merits (an unknown node): bad input, nothing changed
            raise SpecError("NODE", [str(exc)]) from None
        raise
    if json_out:
        output.emit_json(answer)
        return
    for note in answer.get("notes", []):
        output.result(note)


def _log_text(path: Path) -> str:
    """A log's text, bytes that are not UTF-8 replaced (an edit is a problem to name, not a reason to stop)."""
    try:
        return path.read_text(errors="replace")
    except OSError as exc:
        raise SpecError(str(path), [f"cannot read: {exc.strerror}"]) from None


@audit_app.command("verify")
def audit_verify(
    file: Path | None = typer.Argument(None, help="audit.jsonl (or --config)."),
    state: Path | None = typer.Option(None, "--state", help="The controller's state.json: also checks the log's end."),
    config: Path | None = ConfigOpt,
    key_file: Path | None = typer.Option(
        None, "--key-file", help="The audit key, to check keyed entries' HMACs (with --config: its audit_key_file)."
    ),
    shipped: Path | None = typer.Option(
        None,
        "--shipped",
        help="The sink's copy (the controllers' audit_sink): its own chain checked, and the local log, where it is "
        "still there, checked against it.",
    ),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Check the audit log's chain: a changed, inserted or removed line is named, and with the key an entry
    rewritten without it. With --shipped, the central copy too: an entry it holds that the local log lost or holds
    otherwise is named, and a local log that is gone leaves the shipped copy to stand alone. Exit 1 if broken, and
    for a keyed log checked without its key (its HMACs were not checked: an edited entry would still chain)."""
    head, head_mac, key = None, "", read_key(key_file) if key_file else None
    anchor: RecordedHead | None = None
    if config is not None:  # the log and the state where the controllers keep them, the end checked too
        from ha_ops.remediation.store import load_state
        from ha_ops.remediation.wiring import make_documents, make_lease

        cfg = load_controller_config(config)
        key = read_key(key_file or cfg.audit_key_file) if (key_file or cfg.audit_key_file) else None
        documents = make_documents(cfg)
        where, text = documents.describe("audit.jsonl"), documents.read("audit.jsonl")
        recorded = load_state(documents)
        head, head_mac = AuditHead(recorded.audit_seq, recorded.audit_hash), recorded.audit_head_mac
        lease = make_lease(cfg, time.time).read()  # (the head the last leader saved, recorded outside log and state)
        anchor = lease.audit_head if lease is not None else None
    elif file is not None:
        if state is not None:
            recorded_state = read_state(state)
            head = AuditHead(recorded_state.audit_seq, recorded_state.audit_hash)
            head_mac = recorded_state.audit_head_mac
        where, text = str(file), _log_text(file) if file.exists() else None
    elif shipped is None:
        raise typer.BadParameter("give the log's FILE, --config or --shipped", param_hint="FILE")
    else:
        where, text = "", None
    if text is not None:
        problems = verify_text(text, head, key)
    elif shipped is None:
        problems = verify(Path(where), head, key)  # (why it cannot be read; none if the state says nothing was done)
    else:
        problems = []  # the local log is gone: the shipped copy stands alone
    if head is not None:  # the records of where the log ends: keyed, and the log holding the lease's
        problems[:0] = check_records(text or "", RecordedHead(head.seq, head.hash, head_mac), anchor, key).problems
    entries = sum(1 for line in (text or "").splitlines() if line.strip())
    result: dict[str, Any] = {"file": where, "entries": entries}
    chain = ""  # (the shipped copy's entries, as a log)
    if shipped is not None:
        copy, shipped_problems = shipped_entries(_log_text(shipped))
        chain = "".join(json.dumps(e, sort_keys=True) + "\n" for e in copy)
        shipped_problems += [f"shipped copy: {p}" for p in verify_text(chain, None, key)]
        problems = shipped_problems + problems + compare(text, copy)
        result |= {"shipped": str(shipped), "shipped_entries": len(copy), "local_log_present": text is not None}
    result |= {"intact": not problems, "problems": problems}
    unchecked = 0 if key is not None else keyed_entries(text or "") + keyed_entries(chain)
    if unchecked:
        result["hmacs_unchecked"] = unchecked
    if json_out:
        output.emit_json(result)
    elif problems:
        for problem in problems:
            output.error(problem)
    elif unchecked:
        output.error(f"{where or shipped}: {unchecked} keyed entries (HMAC-SHA256) whose HMACs were not checked: "
                     "without the audit key an edited entry still chains; give --key-file, or --config with "
                     "audit_key_file")  # fmt: skip
    elif shipped is not None:
        local = f"{where}: {entries} entries, each as shipped" if text is not None else "no local log: it stands alone"
        output.result(f"{shipped}: {len(copy)} entries shipped, chain intact; {local}")
    else:
        output.result(
            f"{where}: {entries} entries, chain intact" + (" and matching the controller's state" if head else "")
        )
    if problems or unchecked:
        raise typer.Exit(1)
