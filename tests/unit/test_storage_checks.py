"""The storage checks chaos probes use on any cluster, over a scripted client node (pure logic: which commands are
sent, what their output means)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

import pytest

from ha_ops.cluster.gpu import CapabilityMissing
from ha_ops.spec import load_spec
from ha_ops.storage.checks import StorageChecks, replicas_of
from ha_ops.util.proc import CommandResult

REPO = Path(__file__).resolve().parents[2]


class ClientNode:
    """A node with the file system mounted: files written by the probe's script, read back by sha256sum, and
    mfscheckfile reporting each file's chunks at `copies`."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.copies = 2
        self.sent: list[list[str]] = []

    def run(self, argv: Sequence[str], *, timeout: float = 30.0, check: bool = True, input: str | None = None,
            env: object = None) -> CommandResult:  # fmt: skip
        argv = list(argv)
        self.sent.append(argv)
        if argv[:2] == ["sh", "-c"]:  # the probe's write script: mkdir, dd four files, sha256sum
            folder = argv[2].split("mkdir -p ", 1)[1].split(" ", 1)[0]
            for i in range(1, 5):
                self.files[f"{folder}/f{i}"] = f"data {i}".encode()
            out = "".join(f"{hashlib.sha256(d).hexdigest()}  {p}\n" for p, d in self.files.items())
            return CommandResult(argv, 0, out, "")
        if argv[0] == "sha256sum":
            out = "".join(f"{hashlib.sha256(self.files[p]).hexdigest()}  {p}\n" for p in argv[1:] if p in self.files)
            return CommandResult(argv, 0 if len(out.splitlines()) == len(argv) - 1 else 1, out, "")
        if argv[0] == "mfscheckfile":
            out = "".join(f"{p}:\n chunks with {self.copies} copies:          1\n" for p in argv[1:])
            return CommandResult(argv, 0, out, "")
        raise AssertionError(f"unexpected command {argv}")


def test_probe_files_are_written_once_then_checked_for_content_and_copies(tmp_path: Path) -> None:
    node = ClientNode()
    checks = StorageChecks(node, "10.77.0.5", PurePosixPath("/mnt/moosefs"), 2, tmp_path)  # type: ignore[arg-type]
    assert checks.data_intact("chaos-probe", 4) is True
    assert sum(1 for argv in node.sent if argv[:2] == ["sh", "-c"]) == 1
    assert "/mnt/moosefs/chaos-probe" in node.sent[0][2] and (tmp_path / "chaos-chaos-probe.json").exists()
    assert checks.data_intact("chaos-probe", 4) is True
    assert sum(1 for argv in node.sent if argv[:2] == ["sh", "-c"]) == 1  # the second call only reads
    node.copies = 1  # a chunkserver lost, not yet re-replicated
    assert checks.data_intact("chaos-probe", 4) is False
    node.copies = 2
    node.files["/mnt/moosefs/chaos-probe/f3"] = b"changed"
    assert checks.data_intact("chaos-probe", 4) is False


def test_a_cluster_without_replicated_storage_lacks_the_capability() -> None:
    assert replicas_of(load_spec(REPO / "examples" / "lab-storage.yaml"), "labstor") == 2
    with pytest.raises(CapabilityMissing, match="lab has no replicated storage"):
        replicas_of(load_spec(REPO / "examples" / "lab.yaml"), "lab")
