"""Writing a rendered folder (a Kustomize base) whole or not at all, and never over someone else's files."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from ha_ops.errors import SpecError
from ha_ops.iac.k8s_manifests import KUSTOMIZATION, RENDERED_BY


def is_our_render(folder: Path) -> bool:
    try:
        return (folder / KUSTOMIZATION).read_text().startswith(RENDERED_BY)
    except OSError:
        return False


def write_base(folder: Path, files: dict[str, str]) -> None:
    """Write `files` as `folder`: made beside it and swapped in, so a failure leaves the earlier render as it was.
    A folder that holds anything but an earlier render is refused."""
    if folder.exists() and not folder.is_dir():
        raise SpecError(str(folder), ["--out: exists and is not a folder"])
    if folder.is_dir() and any(folder.iterdir()) and not is_our_render(folder):
        raise SpecError(str(folder), [f"--out: not empty and not an earlier render (no {KUSTOMIZATION} of ours); "
                                      "name a new folder"])  # fmt: skip
    folder.parent.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        for name, text in files.items():
            (staged / name).write_text(text)
        old = None
        if folder.exists():
            old = folder.with_name(f".{folder.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            folder.rename(old)
        staged.rename(folder)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
