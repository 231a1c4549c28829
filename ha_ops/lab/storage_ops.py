"""Bringing up, checking and repairing the lab's MooseFS (the I/O beside lab/storage.py's configuration)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ha_ops.errors import LabError
from ha_ops.lab import netns, process, storage
from ha_ops.lab.fabric import HOST_IF
from ha_ops.lab.state import LabState
from ha_ops.storage import checks
from ha_ops.storage.moosefs import MooseFS
from ha_ops.transport.lab import LabTransport
from ha_ops.util.wait import wait_for

if TYPE_CHECKING:
    from ha_ops.lab.cluster import Lab


def _transport(state: LabState, node: str) -> LabTransport:
    holder = state.nodes[node].holder_pid
    assert holder is not None
    return LabTransport(node, holder)


def current_master(lab: Lab, state: LabState) -> str:
    return state.storage_master or storage.master_node(lab.ctx)


def mfscli(lab: Lab, state: LabState, *sections: str, timeout: float = 10.0) -> str:
    """Porcelain mfscli output, asked from the node that runs the master."""
    argv = ["mfscli", "-H", str(storage.master_address(lab.ctx)), "-p", *[f"-S{s}" for s in sections]]
    return _transport(state, current_master(lab, state)).run(argv, timeout=timeout).stdout


def connected_chunkservers(lab: Lab, state: LabState) -> int:
    out = mfscli(lab, state, "CS")
    return sum(1 for line in out.splitlines() if line.startswith("chunk servers:"))


def ensure(lab: Lab, state: LabState) -> None:
    ctx = lab.ctx
    master = current_master(lab, state)
    address = storage.master_address(ctx)
    netns.ip("addr", "replace", f"{address}/24", "dev", HOST_IF, netns=ctx.netns(master))
    size = storage.chunk_tmpfs_size_mb(ctx)
    for node in storage.chunkservers(ctx):
        t = _transport(state, node)
        if not t.run(["mountpoint", "-q", str(storage.CHUNK_DIR)], check=False).ok:
            t.run(["mount", "-t", "tmpfs", "-o", f"size={size}m", "hao-chunks", str(storage.CHUNK_DIR)])
    lab._ensure_services(state, [storage.master_service(ctx, master)])
    wait_for(
        "MooseFS master accepting clients",
        lambda: netns.connect_in(ctx.netns(master), (str(address), storage.CLIENT_PORT), timeout=1).close() or True,
        timeout=20,
        interval=0.1,
    )
    lab._ensure_services(state, storage.chunkserver_services(ctx))
    if master == storage.master_node(ctx):
        lab._ensure_services(state, [storage.metalogger_service(ctx)])
    lab._ensure_services(state, [storage.watcher_service(ctx)])  # after a promotion it only idles
    want = len(storage.chunkservers(ctx))
    wait_for(
        f"{want} chunkservers connected", lambda: connected_chunkservers(lab, state) >= want, timeout=30, interval=0.2
    )
    lab._ensure_services(state, storage.mount_services(ctx))
    lab._ensure_services(state, [storage.exporter_service(ctx)])
    for node in storage.clients(ctx):
        wait_mounted(lab, node, state)
    assert ctx.spec.storage is not None
    first = _transport(state, storage.clients(ctx)[0])
    first.run(["mkdir", "-p", str(storage.slurm_state_dir()), str(storage.checkpoint_dir()),
               str(storage.controller_state_dir())])  # fmt: skip
    first.run(["mfssetgoal", "-r", str(ctx.spec.storage.replicas), str(storage.MOUNT)], timeout=30)
    first.run(["mfssettrashtime", "-r", "0", str(storage.MOUNT)], timeout=30)


def wait_mounted(lab: Lab, node: str, state: LabState | None = None) -> None:
    """Until the node's mfsmount has mounted the file system (a FUSE mount that answers)."""
    t = _transport(state or lab.state(), node)
    wait_for(
        f"MooseFS mounted on {node}",
        lambda: t.run(["stat", "-f", "-c", "%T", str(storage.MOUNT)], check=False, timeout=5).stdout.strip()
        .startswith("fuse"),
        timeout=20,
        interval=0.1,
    )  # fmt: skip


# --- checks and fault handles used by tests, chaos activities and runbooks ---------------------------------


def client(lab: Lab) -> LabTransport:
    """A node that mounts the file system (the first controller)."""
    state = lab.state()
    return _transport(state, storage.clients(lab.ctx)[0])


def moosefs(lab: Lab) -> MooseFS:
    return MooseFS(client(lab), str(storage.master_address(lab.ctx)))


def write_files(lab: Lab, count: int, size_mib: int = 1, folder: str = "testdata") -> dict[str, str]:
    """Write `count` random files into the file system; returns {path: sha256} to check them later."""
    return checks.write_files(client(lab), storage.MOUNT, count, size_mib, folder)


def unreadable_files(lab: Lab, manifest: dict[str, str], node: str | None = None) -> list[str]:
    """Files that cannot be read or whose checksum changed, from the first client or `node`."""
    return checks.unreadable_files(client(lab) if node is None else _transport(lab.state(), node), manifest)


def under_replicated(lab: Lab, paths: list[str]) -> list[str]:
    """Files with a chunk below the spec's replica count (empty: every chunk at its goal)."""
    assert lab.ctx.spec.storage is not None
    return checks.under_replicated(moosefs(lab), paths, lab.ctx.spec.storage.replicas)


def storage_checks(lab: Lab) -> checks.StorageChecks:
    assert lab.ctx.spec.storage is not None
    return checks.StorageChecks(client(lab), str(storage.master_address(lab.ctx)), storage.MOUNT,
                                lab.ctx.spec.storage.replicas, lab.paths.root)  # fmt: skip


def promote_metalogger(lab: Lab) -> float:
    """Master loss, by hand: what the storage watcher does without one, with its own commands (the runbook's steps
    on a lab node: systemctl and `mfsmaster -a` are the lab's shims). The old master is fenced (masked, its address
    dropped), then the metalogger's node takes the address, announces it and starts a master from the metalogger's
    files; clients keep their mounts. Returns seconds taken."""
    import time

    start = time.monotonic()
    state = lab.state()
    old, new = current_master(lab, state), storage.metalogger_node(lab.ctx)
    if old == new:
        raise LabError(f"the master already runs on the metalogger's node {new}")
    commands = storage.render_watcher_config(lab.ctx)
    # Fence first: the old master must never serve again (it may be frozen or cut off, not dead).
    lab.transport(old).run(["sh", "-c", commands["fence_command"]], timeout=60)
    lab.transport(new).run(["sh", "-c", commands["promote_command"]], timeout=120)
    return time.monotonic() - start


def start_restored_master(lab: Lab, node: str) -> None:
    """`mfsmaster -a` on the metalogger's node, once the old master is fenced and the address moved: the metalogger
    stops (it flushes its change logs on the way out) and a master starts from its metadata. Returns once the master
    accepts clients and every chunkserver is back."""
    ctx = lab.ctx
    with lab._locked():
        state = lab.state()
        old = current_master(lab, state)
        if node != storage.metalogger_node(ctx):
            raise LabError(f"{node} has no metalogger's metadata to restore a master from "
                           f"(the metalogger runs on {storage.metalogger_node(ctx)})")  # fmt: skip
        if old == node:
            raise LabError(f"the master already runs on {node}")
        old_master = state.services.get(f"{old}/mfsmaster")
        if old_master and lab._service_alive(state, old_master):
            raise LabError(f"the master still runs on {old}: fence it first (systemctl mask --now moosefs-master)")
        logger = state.services.pop(f"{node}/metalogger", None)
        if logger and lab._service_alive(state, logger):
            process.terminate(logger.pid or 0, grace=2.0)
        state.storage_master = node
        lab._save(state)
        lab._ensure_services(state, [storage.master_service(ctx, node, restore=True)])
    state = lab.state()
    wait_for(
        "the promoted master accepting clients",
        lambda: (
            netns.connect_in(
                ctx.netns(node), (str(storage.master_address(ctx)), storage.CLIENT_PORT), timeout=1
            ).close()
            or True
        ),
        timeout=30,
        interval=0.1,
    )
    want = len(storage.chunkservers(ctx))
    wait_for(f"{want} chunkservers back", lambda: connected_chunkservers(lab, state) >= want, timeout=30, interval=0.2)
