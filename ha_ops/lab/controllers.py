"""The remediation controller on both lab controller nodes, with node access over the lab's sshd."""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path
from typing import Any

import yaml

from ha_ops.lab import audit_sink, kubernetes, storage
from ha_ops.lab import tls as lab_tls
from ha_ops.lab.context import LabContext, ServiceDef
from ha_ops.lab.paths import NODE_DIR
from ha_ops.lab.sshd import client_key, known_hosts

# Lab timings: fast enough for tests, same logic as production.
LAB_LADDER = {"validate_timeout_s": 20.0, "probation_s": 20.0, "max_flaps": 2, "flap_window_s": 600.0,
              "drain_timeout_s": 15.0}  # fmt: skip


# Kill this node's slurmctld only if the pid file still names one (a pid left by a killed one may be reused). None
# running exits 3, as the default fence does when pgrep finds none: the primary is down already
# (slurm_fence.none_found_exit).
_LAB_FENCE = (
    'pid=$(cat {pidfile} 2>/dev/null); if [ -n "$pid" ] && [ "$(cat /proc/$pid/comm 2>/dev/null)" = slurmctld ]; '
    'then kill -KILL "$pid" && echo "killed slurmctld $pid"; else echo "no slurmctld running"; exit 3; fi'
)

LAB_HEARTBEAT_S = 5.0  # the lab's agents' heartbeat (lab/agents.py): its controllers' windows follow it


def state_dir(ctx: LabContext) -> Path:
    """The controllers' shared state (lease, state, audit log) as the controller nodes see it. On MooseFS where the lab
    has it, so that the lease is held across hosts (terms claimed through the master) and a controller cut off from
    the network loses it as on a real cluster; else a host folder every node shares."""
    if storage.enabled(ctx):
        return storage.controller_state_dir()
    return ctx.paths.shared / "controller"


def config_path(ctx: LabContext, node: str) -> Path:
    return ctx.node_dir(node) / "controller.yaml"


def audit_key_path(ctx: LabContext, node: str) -> Path:
    """The audit log's HMAC key on the controller node's own disk: never beside the log on the shared storage."""
    return ctx.node_dir(node) / "audit.key"


def write_audit_keys(ctx: LabContext) -> None:
    """One key for the lab (both controllers sign the same chain), made once and copied to each controller node."""
    lab_key = ctx.paths.root / "audit-key"
    if not lab_key.exists():
        lab_key.write_text(secrets.token_hex(32))
    for n in ctx.layout.nodes_with_role("controller"):
        path = audit_key_path(ctx, n.name)
        path.write_text(lab_key.read_text())
        os.chmod(path, 0o600)


def base_urls(ctx: LabContext) -> list[str]:
    """The controllers' base URLs; none without a `remediation` section."""
    from ha_ops.remediation.client import urls_from_spec

    return urls_from_spec(ctx.spec, ctx.layout)


def render_config(ctx: LabContext, node: str) -> dict:
    from ha_ops.lab import monitoring  # monitoring's Alertmanager needs this module's base_urls
    from ha_ops.lab.inventory import ssh_inventory_path  # the inventory names this module's state folder

    rem = ctx.spec.remediation
    assert rem is not None
    pools: dict[str, dict[str, list[str]]] = {}
    domains: dict[str, list[str]] = {}  # (observers.py: a domain silent as a whole is not one node's loss)
    for n in ctx.layout.nodes_with_role("gpu"):
        pool = pools.setdefault(n.pool or "gpu", {"nodes": [], "spares": []})
        pool["spares" if n.spare else "nodes"].append(n.name)
        domains.setdefault(n.domain, []).append(n.name)
    python = sys.executable
    fake = NODE_DIR / "gpus"
    if kubernetes.controllers_use_it(ctx):
        # As infra/k8s configures the controller pods: the Kubernetes scheduler, lease and state in the API.
        namespaced = {"namespace": kubernetes.CONTROLLER_NAMESPACE}
        where: dict = {"scheduler": "kubernetes", "kubernetes": {
            "kubeconfig": str(kubernetes.controller_kubeconfig_path(ctx)), "eviction_timeout_s": 5.0,
            "lease": namespaced, "state": namespaced}}  # fmt: skip
    else:  # Lab nodes share one process namespace: the fence kills exactly this node's slurmctld (its pid file).
        where = {"state_dir": str(state_dir(ctx)), "slurm_fence": {
            "after_s": 5.0,
            "command": _LAB_FENCE.format(pidfile=NODE_DIR / "slurmctld.pid"),
            # A primary ssh cannot reach (cut off from the network) goes off through its BMC (ha_ops.lab.bmc), and
            # on again once the backup has been in control for hand_back_after_s (fence_heal.py): it boots with its
            # links up and its services started, and rejoins as the standby.
            "power_off_command": f"{python} -m ha_ops power off {{node}} --inventory {ssh_inventory_path(ctx)}",
            "power_on_command": f"{python} -m ha_ops power on {{node}} --inventory {ssh_inventory_path(ctx)}",
            "power_status_command": f"{python} -m ha_ops power status {{node}} --inventory {ssh_inventory_path(ctx)}",
            # A lab node boots in seconds (a real one in minutes: the default is 300 s).
            "rejoin_timeout_s": 60.0,
        }}  # fmt: skip
    watch = monitoring.client(ctx, f"controller-{node}")  # its certificate and the password, over TLS
    return {
        "id": node,
        "listen_address": str(ctx.layout.node(node).address),
        "port": rem.port,
        "peers": base_urls(ctx),
        **where,
        "audit_key_file": str(audit_key_path(ctx, node)),
        **(tls_section(ctx, node) if lab_tls.enabled(ctx) else {"insecure": True}),  # (the spec said so too)
        **({"audit_sink": audit_sink.controller_config(ctx, node)} if audit_sink.enabled(ctx) else {}),
        "partition": ctx.spec.gpu_partition,
        "pools": pools,
        "failure_domains": domains,
        "safety": {
            "breaker_max_nodes": rem.breaker_max_nodes,
            "breaker_max_fraction": rem.breaker_max_fraction,
            "breaker_window_s": rem.breaker_window_s,
            "min_healthy_fraction": rem.min_healthy_fraction,
            "max_cordons_per_minute": rem.max_cordons_per_minute,
            "dry_run": rem.dry_run,
            "opt_out": list(rem.opt_out),
        },
        "ladder": LAB_LADDER,
        # The lab's tests fault the same few nodes many times in one run: three incidents in 30 days would make
        # lemons of them (held for replacement) and move their Slurm Weight between tests. The fleet history is
        # kept as everywhere; the lemon rule and the tiers' publication are shown by their own tests.
        "lemon": {"enabled": False},
        "fleet": {"publish_tiers": False},
        # State snapshots at most every 5 s (default 60 s): a lab test restores one taken right after its actions.
        "state_snapshots": {"every_s": 5.0},
        "node_poll_s": 1.0,
        # The lab's agents report every 5 s, each report 1 s late when it first tries a controller cut off from it:
        # at 10 s a leaf cut off had its nodes found lost in 2 of 4 runs on a busy machine (reports starved of CPU).
        "heartbeats": {"min_s": LAB_HEARTBEAT_S},  # (so the windows below are checked against it)
        "agent_silence_s": 15.0,
        # Over one agent's heartbeat (5 s) plus its report's timeout to a cut-off controller (1 s) and a sweep: a
        # controller that hears only its own side's agents (a leaf cut off) hears each of them within it. At 4 s the
        # leader on a cut-off leaf's other side stepped down when its side's two agents were quiet for 4 s.
        "blind_after_s": 8.0,
        "monitoring": {
            "prometheus_url": monitoring.prometheus_url(ctx),
            "alertmanager_url": monitoring.alertmanager_url(ctx),
            **({"client": watch.model_dump(mode="json", exclude_none=True)} if watch else {}),
            "poll_s": 1.0,
            "fail_after": 2,
        },
        "access": {
            "ssh_user": "root",
            "ssh_key": str(client_key(ctx)),
            "known_hosts": str(known_hosts(ctx)),
            "reset_gpu_command": f"{python} -m ha_ops gpu reset --backend fake --fake-dir {fake} --gpu {{gpu}}",
            "reboot_command": f"{python} -m ha_ops gpu reset --backend fake --fake-dir {fake} --all",
            # Through the node's BMC, as on a real cluster: Redfish on the management network (ha_ops.lab.bmc).
            "power_cycle_command": f"{python} -m ha_ops power cycle {{node}} --inventory {ssh_inventory_path(ctx)}",
            "validate_command": f"{python} -m ha_ops health check --json --config {NODE_DIR / 'agent.yaml'}",
            "command_timeout_s": 30.0,
            "boot_wait_s": 10.0,
        },
    }


def prepare(ctx: LabContext) -> None:
    if ctx.spec.remediation is None:
        return
    from ha_ops.lab.inventory import write_ssh_inventory

    if not storage.enabled(ctx):  # (on MooseFS it is made once the storage is mounted: lab.storage_ops.ensure)
        state_dir(ctx).mkdir(parents=True, exist_ok=True)
    write_ssh_inventory(ctx)  # the nodes' BMCs, for the power cycle
    write_audit_keys(ctx)
    for n in ctx.layout.nodes_with_role("controller"):
        config_path(ctx, n.name).write_text(yaml.safe_dump(render_config(ctx, n.name), sort_keys=False))


def controller_services(ctx: LabContext) -> list[ServiceDef]:
    if ctx.spec.remediation is None:
        return []
    return [
        ServiceDef(
            n.name,
            "controller",
            [sys.executable, "-m", "ha_ops", "controller", "run", "--config", str(config_path(ctx, n.name))],
            ctx.node_dir(n.name) / "log" / "controller.log",
        )
        for n in ctx.layout.nodes_with_role("controller")
    ]


def tls_section(ctx: LabContext, node: str) -> dict[str, Any]:
    """The controller's certificate, and the issuer with which it renews others' (`ha-ops pki renew`)."""
    return {"tls": lab_tls.config_block(ctx, f"controller-{node}"),
            "certificates": {"issuer": lab_tls.issuer_files(ctx).model_dump(mode="json")}}  # fmt: skip
