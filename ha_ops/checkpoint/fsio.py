"""Durable file I/O: write and fsync, fsync a directory, atomic replace, sha256 in chunks. No checkpoint logic."""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
from pathlib import Path

CHUNK = 4 << 20  # 4 MiB: large enough for full-speed writes and hashing
PARALLEL_HASH_MIN = 8 << 20


def fsync_dir(path: Path) -> None:
    """Make a directory's entries (a create, a rename) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_durable(path: Path, data: bytes | bytearray | memoryview) -> str:
    """Write `data` to a new file, fsync it, and return its sha256.

    A large buffer is hashed in a second thread while it is written: hashlib and os.write both release the GIL,
    so the checksum costs little more than the write (sha256 and a disk are of the same order, ~1 GB/s).
    """
    digest = hashlib.sha256()
    view = memoryview(data).cast("B")
    hasher: threading.Thread | None = None
    if len(view) >= PARALLEL_HASH_MIN:
        hasher = threading.Thread(target=digest.update, args=(view,), name="checkpoint-sha256")
        hasher.start()
    else:
        digest.update(view)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            for offset in range(0, len(view), CHUNK):
                chunk = view[offset : offset + CHUNK]
                written = 0
                while written < len(chunk):
                    written += os.write(fd, chunk[written:])
            os.fsync(fd)
        finally:
            os.close(fd)
    finally:
        if hasher is not None:
            hasher.join()
    return digest.hexdigest()


def fsync_and_hash(path: Path) -> str:
    """fsync a file someone else wrote (a writer callback) and return its sha256."""
    digest = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        os.fsync(f.fileno())
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def replace_durable(path: Path, text: str) -> None:
    """Write `text` to `path` atomically: a temp file beside it, fsync, rename over, fsync the directory."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    write_durable(tmp, text.encode())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def remove_tree(path: Path, trash_name: str) -> None:
    """Delete a directory so that it disappears at once: rename it to `trash_name` beside it, then remove that."""
    trash = path.with_name(trash_name)
    try:
        os.rename(path, trash)
    except FileNotFoundError:
        return
    fsync_dir(path.parent)
    shutil.rmtree(trash, ignore_errors=True)
