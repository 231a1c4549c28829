"""Replicated storage in the lab: MooseFS master, metalogger and chunkservers on their own nodes, mounted on every
controller and GPU node, with Slurm's StateSaveLocation and the checkpoint directory on it.

Settings from shared/LAB-NOTES.md: daemons in the foreground, no config in /etc/mfs, a tmpfs per chunkserver (its
own capacity), HDD_LEAVE_SPACE_DEFAULT = 0, REPLICATIONS_DELAY_INIT = 0, the master's data seeded with
metadata.mfs.empty, and a metalogger with META_DOWNLOAD_FREQ = 1. The master is reached at a service address that
moves to the metalogger's node when the metalogger is promoted: by the storage watcher on the metalogger's node
(`ha-ops storage watch`, ha_ops.storage.failover) without a human, with the same commands a real host runs.
"""

from __future__ import annotations

import shutil
import sys
from ipaddress import IPv4Address
from pathlib import Path

import yaml

from ha_ops.lab.context import LabContext, ServiceDef
from ha_ops.lab.paths import NODE_DIR
from ha_ops.util.atomic import write_atomic

CLIENT_PORT = 9421
CHUNKSERVER_PORT = 9422
WATCH_AFTER_S = 3.0  # the lab's master unanswered this long before the watcher fences it (a probe sees it down first)
MOUNT = NODE_DIR / "mfs"  # where every client node sees the file system
CHUNK_DIR = NODE_DIR / "chunks"
EMPTY_METADATA = Path("/var/lib/mfs/metadata.mfs.empty")


def enabled(ctx: LabContext) -> bool:
    return ctx.spec.storage is not None and ctx.spec.storage.kind == "moosefs"


def master_address(ctx: LabContext) -> IPv4Address:
    return ctx.layout.service_addresses["mfsmaster"]


def master_node(ctx: LabContext) -> str:
    assert ctx.spec.storage is not None and ctx.spec.storage.master is not None
    return ctx.spec.storage.master.name


def metalogger_node(ctx: LabContext) -> str:
    assert ctx.spec.storage is not None and ctx.spec.storage.metalogger is not None
    return ctx.spec.storage.metalogger.name


def chunkservers(ctx: LabContext) -> list[str]:
    return [n.name for n in ctx.layout.nodes_with_role("chunkserver")]


def clients(ctx: LabContext) -> list[str]:
    """Nodes that mount the file system: the controllers (Slurm state) and the GPU nodes (checkpoints)."""
    return [n.name for n in ctx.layout.nodes if "controller" in n.roles or "gpu" in n.roles]


def slurm_state_dir() -> Path:
    return MOUNT / "slurmctld"


def checkpoint_dir() -> Path:
    return MOUNT / "checkpoints"


def controller_state_dir() -> Path:
    """The remediation controllers' lease, state and audit log: on the replicated storage, as on a real cluster."""
    return MOUNT / "ha-ops-controller"


def _data(ctx: LabContext, node: str) -> Path:
    return ctx.node_dir(node) / "mfs-data"


def _master_cfg(ctx: LabContext, node: str) -> str:
    data = _data(ctx, node)
    return "\n".join(
        [
            "WORKING_USER = root",
            "WORKING_GROUP = root",
            f"DATA_PATH = {data}",
            f"EXPORTS_FILENAME = {ctx.node_dir(node) / 'mfsexports.cfg'}",
            f"TOPOLOGY_FILENAME = {ctx.node_dir(node) / 'mfstopology.cfg'}",
            "REPLICATIONS_DELAY_INIT = 0",
            "MATOCS_TIMEOUT = 10",
            # Metadata changes reach the metalogger at once: nothing is lost with the master.
            "CHANGELOG_SAVE_MODE = 1",
            "",
        ]
    )


def prepare(ctx: LabContext) -> None:
    if not enabled(ctx):
        return
    storage = ctx.spec.storage
    assert storage is not None
    # Both the master and the metalogger node get a master config: the metalogger's is used when it is promoted.
    for node in (master_node(ctx), metalogger_node(ctx)):
        base = ctx.node_dir(node)
        _data(ctx, node).mkdir(parents=True, exist_ok=True)
        (base / "mfsmaster.cfg").write_text(_master_cfg(ctx, node))
        (base / "mfsexports.cfg").write_text("* / rw,alldirs,maproot=0\n* . rw\n")
        (base / "mfstopology.cfg").write_text("")
    data = _data(ctx, master_node(ctx))
    if not any(data.glob("metadata*.mfs*")):
        shutil.copyfile(EMPTY_METADATA, data / "metadata.mfs")
    ml = metalogger_node(ctx)
    (ctx.node_dir(ml) / "mfsmetalogger.cfg").write_text(
        "\n".join(
            [
                "WORKING_USER = root",
                "WORKING_GROUP = root",
                f"DATA_PATH = {_data(ctx, ml)}",
                f"MASTER_HOST = {master_address(ctx)}",
                "META_DOWNLOAD_FREQ = 1",
                "MASTER_RECONNECTION_DELAY = 1",
                "",
            ]
        )
    )
    for node in chunkservers(ctx):
        base = ctx.node_dir(node)
        _data(ctx, node).mkdir(parents=True, exist_ok=True)
        (base / "chunks").mkdir(exist_ok=True)
        (base / "mfshdd.cfg").write_text(f"{CHUNK_DIR}\n")
        (base / "mfschunkserver.cfg").write_text(
            "\n".join(
                [
                    "WORKING_USER = root",
                    "WORKING_GROUP = root",
                    f"DATA_PATH = {_data(ctx, node)}",
                    f"HDD_CONF_FILENAME = {base / 'mfshdd.cfg'}",
                    # Each chunkserver has its own small tmpfs: leave nothing spare, report its real capacity.
                    "HDD_LEAVE_SPACE_DEFAULT = 0",
                    f"MASTER_HOST = {master_address(ctx)}",
                    "MASTER_RECONNECTION_DELAY = 1",
                    "",
                ]
            )
        )
    for node in clients(ctx):
        (ctx.node_dir(node) / "mfs").mkdir(exist_ok=True)
    write_atomic(watcher_config_path(ctx), yaml.safe_dump(render_watcher_config(ctx), sort_keys=False))
    from ha_ops.lab.inventory import write_ssh_inventory  # (it names this module's paths)

    write_ssh_inventory(ctx)  # the master's BMC, for a fence when ssh cannot reach it (also without remediation)


def chunk_tmpfs_size_mb(ctx: LabContext) -> int:
    assert ctx.spec.storage is not None
    return ctx.spec.storage.chunkserver_capacity_mb


def master_service(ctx: LabContext, node: str, restore: bool = False) -> ServiceDef:
    argv = ["/usr/sbin/mfsmaster", "-f", "-c", str(ctx.node_dir(node) / "mfsmaster.cfg")]
    if restore:
        argv.insert(2, "-a")  # rebuild metadata from the metalogger's copy and change logs
    return ServiceDef(node, "mfsmaster", argv, ctx.node_dir(node) / "log" / "mfsmaster.log")


def chunkserver_services(ctx: LabContext) -> list[ServiceDef]:
    return [
        ServiceDef(
            node,
            "chunkserver",
            ["/usr/sbin/mfschunkserver", "-f", "-c", str(ctx.node_dir(node) / "mfschunkserver.cfg")],
            ctx.node_dir(node) / "log" / "chunkserver.log",
        )
        for node in chunkservers(ctx)
    ]


def metalogger_service(ctx: LabContext) -> ServiceDef:
    node = metalogger_node(ctx)
    return ServiceDef(
        node,
        "metalogger",
        ["/usr/sbin/mfsmetalogger", "-f", "-c", str(ctx.node_dir(node) / "mfsmetalogger.cfg")],
        ctx.node_dir(node) / "log" / "metalogger.log",
    )


def mount_services(ctx: LabContext) -> list[ServiceDef]:
    return [
        ServiceDef(
            node,
            "mfsmount",
            ["/usr/bin/mfsmount", "-f", str(MOUNT), "-H", str(master_address(ctx)), "-o", "mfsioretries=60"],
            ctx.node_dir(node) / "log" / "mfsmount.log",
        )
        for node in clients(ctx)
    ]


def watcher_config_path(ctx: LabContext) -> Path:
    return ctx.node_dir(metalogger_node(ctx)) / "storage-watch.yaml"


def watcher_state_dir(ctx: LabContext) -> Path:
    """The watcher's audit log and promoted mark: on its own node's disk, not on the storage it watches."""
    return ctx.node_dir(metalogger_node(ctx)) / "storage-watch"


def render_watcher_config(ctx: LabContext) -> dict:
    """The watcher on the metalogger's node: the runbook's own fence and promotion commands (on a lab node,
    systemctl and `mfsmaster -a` are the lab's shims), ssh with the lab's key, and the lab's BMC."""
    from ha_ops.lab.inventory import ssh_inventory_path
    from ha_ops.lab.sshd import client_key, known_hosts

    address = f"{master_address(ctx)}/24"
    bare = str(master_address(ctx))
    return {
        "id": metalogger_node(ctx),
        "master_host": master_node(ctx),
        "master_address": bare,
        "master_port": CLIENT_PORT,
        "peers": [f"{ctx.layout.node(n).address}:{CHUNKSERVER_PORT}" for n in chunkservers(ctx)],
        "poll_s": 0.5,
        "probe_timeout_s": 1.0,
        "after_s": WATCH_AFTER_S,
        "retry_s": 10.0,
        # Idempotent, so that a fence tried again (or after an operator's) still confirms: the address is gone.
        "fence_command": f"systemctl mask --now moosefs-master && {{ ip addr del {address} dev eth0 2>/dev/null; "
        f"! ip -o addr show dev eth0 | grep -qF ' {address} '; }}",
        "power_off_command": f"{sys.executable} -m ha_ops power off {{node}} --inventory {ssh_inventory_path(ctx)}",
        # The announcement in the background: its first packet leaves at once, and arping waits a second per packet.
        "promote_command": f"systemctl stop moosefs-metalogger && ip addr replace {address} dev eth0 && "
        f"{{ arping -q -U -c 2 -I eth0 {bare} >/dev/null 2>&1 & }} && mfsmaster -a",
        "state_dir": str(watcher_state_dir(ctx)),
        "access": {
            "ssh_user": "root",
            "ssh_key": str(client_key(ctx)),
            "known_hosts": str(known_hosts(ctx)),
            "connect_timeout_s": 2.0,
            "command_timeout_s": 60.0,
        },
    }


def watcher_service(ctx: LabContext) -> ServiceDef:
    node = metalogger_node(ctx)
    argv = [sys.executable, "-m", "ha_ops", "storage", "watch", "--config", str(watcher_config_path(ctx))]
    return ServiceDef(node, "storage-watch", argv, ctx.node_dir(node) / "log" / "storage-watch.log")


EXPORTER_PORT = 9425


def exporter_service(ctx: LabContext) -> ServiceDef:
    node = ctx.spec.monitoring.host.name
    argv = [sys.executable, "-m", "ha_ops", "storage", "exporter", "--master", str(master_address(ctx)),
            "--address", str(ctx.layout.node(node).address), "--port", str(EXPORTER_PORT),
            "--chunkservers", str(len(chunkservers(ctx)))]  # fmt: skip
    return ServiceDef(node, "storage-exporter", argv, ctx.node_dir(node) / "log" / "storage-exporter.log")
