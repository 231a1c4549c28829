"""Where the controllers keep what they share (the state, the audit log, each one's view): named text documents.

On a Slurm cluster they are files in a folder on shared storage (`DirectoryDocuments`); on Kubernetes, where pods have
a read-only root filesystem and no shared volume, ConfigMaps (`remediation/k8s_documents.py`). The controller, the
state store, the audit log and the views read and write through this one protocol, so a failover finds the same
intents and audit chain on either.

Names are paths relative to the store: `state.json`, `audit.jsonl`, `views/<controller id>.json`.
"""

from __future__ import annotations

import os
from collections.abc import Hashable
from pathlib import Path
from typing import Protocol

from ha_ops.util.atomic import write_atomic


class Documents(Protocol):
    def describe(self, name: str) -> str:
        """Where the document is, for messages: a file's path, a ConfigMap's namespace and name."""
        ...

    def read(self, name: str) -> str | None:
        """The document's text, or None when it does not exist."""
        ...

    def write(self, name: str, text: str) -> None:
        """Replace the document as a whole: a reader sees the old text or the new one, never a mix."""
        ...

    def append(self, name: str, line: str) -> None:
        """Add one line at the end, durably (the audit log)."""
        ...

    def version(self, name: str) -> Hashable:
        """Changes whenever the document changes; cheaper than reading it."""
        ...

    def folder(self, folder: str) -> dict[str, str]:
        """Every document directly in `folder` (name without the folder -> text)."""
        ...


class DirectoryDocuments:
    """Files under a folder (shared storage both controllers mount)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path(self, name: str) -> Path:
        return self.root / name

    def describe(self, name: str) -> str:
        return str(self.path(name))

    def read(self, name: str) -> str | None:
        try:
            # (bytes a crash left half-written read as U+FFFD: a hash over them no longer matches, so it is seen)
            return self.path(name).read_text(errors="replace")
        except FileNotFoundError:
            return None

    def write(self, name: str, text: str) -> None:
        write_atomic(self.path(name), text)

    def append(self, name: str, line: str) -> None:
        path = self.path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            data = line.encode()
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                # The last line was torn (a crash mid-write): end it, or this one would be glued to it and lost too.
                data = b"\n" + data
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)

    def version(self, name: str) -> Hashable:
        try:
            st = self.path(name).stat()
        except FileNotFoundError:
            return (-1, 0)
        return (st.st_size, st.st_mtime_ns)

    def folder(self, folder: str) -> dict[str, str]:
        found = {}
        for path in sorted(self.path(folder).glob("*")):
            if path.name.startswith("."):
                continue  # a write in progress (write_atomic's temp file)
            try:
                if path.is_file():  # (bytes that are not UTF-8, as in read: the document's reader finds it damaged)
                    found[path.name] = path.read_text(errors="replace")
            except OSError:
                continue  # removed or unreadable while listed: that document counts as absent
        return found
