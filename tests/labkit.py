"""Shared helpers for lab tests and benchmarks: a lab under a test-only name, and leftover detection."""

from __future__ import annotations

import os
from pathlib import Path

from ha_ops.lab.cluster import Lab, netns_prefix
from ha_ops.lab.netns import list_with_prefix
from ha_ops.lab.paths import LabPaths
from ha_ops.spec import ClusterSpec, load_spec

REPO = Path(__file__).resolve().parents[1]
LAB_SPEC = REPO / "examples" / "lab.yaml"


def lab_spec(name: str) -> ClusterSpec:
    """The example lab under another name, so tests never touch a developer's own lab."""
    return load_spec(LAB_SPEC).model_copy(update={"name": name})


def make_lab(name: str) -> Lab:
    return Lab(lab_spec(name), LabPaths.for_lab(name))


def leftovers(name: str) -> list[str]:
    """Everything of lab `name` still present: namespaces, processes naming its folder, mounts."""
    found = [f"namespace {ns}" for ns in list_with_prefix(netns_prefix(name))]
    root = str(LabPaths.for_lab(name).root)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            raw = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and root.encode() + b"/" in raw:
            command = raw.replace(b"\0", b" ").decode(errors="replace")[:120]
            found.append(f"process {entry.name}: {command}")
    for line in Path("/proc/mounts").read_text().splitlines():
        if netns_prefix(name) in line or root in line:
            found.append(f"mount {line}")
    if Path(root).exists():
        found.append(f"directory {root}")
    return found
