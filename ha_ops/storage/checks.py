"""The replicated storage as chaos probes and tests check it, on any cluster: the master's health asked with mfscli
from a client node, and probe files written through that node's mount, read back and checked for chunks below
their replica count. Everything goes through a transport to the client node (SSH, or a lab node)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path, PurePosixPath
from typing import Any

from ha_ops.cluster.gpu import CapabilityMissing
from ha_ops.spec.model import ClusterSpec
from ha_ops.storage.moosefs import MooseFS
from ha_ops.transport.base import Transport


def write_files(transport: Transport, mount: PurePosixPath, count: int, size_mib: int = 1,
                folder: str = "testdata") -> dict[str, str]:  # fmt: skip
    """Write `count` random files into the file system; returns {path: sha256} to check them later."""
    target = shlex.quote(str(mount / folder))
    script = (
        f"mkdir -p {target} && for i in $(seq 1 {count}); do "
        f"dd if=/dev/urandom of={target}/f$i bs=1M count={size_mib} status=none || exit 1; done && "
        f"sync && sha256sum {target}/f*"
    )
    out = transport.run(["sh", "-c", script], timeout=60 + count * size_mib * 0.5).stdout
    return {path: digest for digest, path in (line.split() for line in out.splitlines())}


def unreadable_files(transport: Transport, manifest: dict[str, str]) -> list[str]:
    """Files that cannot be read or whose checksum changed (empty: every file readable and intact)."""
    result = transport.run(["sha256sum", *manifest], check=False, timeout=60 + len(manifest))
    seen = {}
    for line in result.stdout.splitlines():
        digest, path = line.split()
        seen[path] = digest
    return [f"{path}: {'unreadable' if path not in seen else 'checksum differs'}"
            for path, digest in manifest.items() if seen.get(path) != digest]  # fmt: skip


def under_replicated(fs: MooseFS, paths: list[str], goal: int) -> list[str]:
    """Files with a chunk below `goal` copies (empty: every chunk at its goal)."""
    problems = []
    for path, copies in fs.file_copies(paths).items():
        low = {c: n for c, n in copies.items() if c < goal}
        if low or not copies:
            problems.append(f"{path}: {low or 'no chunk information'}")
    return problems


def replicas_of(spec: ClusterSpec, cluster: str) -> int:
    """The replica count of the cluster's MooseFS; CapabilityMissing when it has none to check."""
    if not (spec.storage and spec.storage.kind == "moosefs"):
        raise CapabilityMissing(f"{cluster} has no replicated storage (storage.kind is not moosefs)")
    return spec.storage.replicas


class StorageChecks:
    """MooseFS seen from one client node: `manifests` (on the operator's machine) remembers the probe files."""

    def __init__(self, transport: Transport, master: str, mount: PurePosixPath, replicas: int,
                 manifests: Path) -> None:  # fmt: skip
        self.transport = transport
        self.fs = MooseFS(transport, master)
        self.mount = mount
        self.replicas = replicas
        self.manifests = manifests

    def health(self) -> dict[str, Any]:
        health = self.fs.health()
        return {**health.__dict__, "healthy": health.healthy}

    def data_intact(self, folder: str, files: int) -> bool:
        """The first call writes the probe files; every call checks them (readable, intact, at their goal)."""
        path = self.manifests / f"chaos-{folder}.json"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(write_files(self.transport, self.mount, files, 1, folder=folder)))
        manifest = json.loads(path.read_text())
        intact = not unreadable_files(self.transport, manifest)
        return intact and not under_replicated(self.fs, list(manifest), self.replicas)
