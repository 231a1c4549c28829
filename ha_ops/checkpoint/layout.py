"""The on-disk layout and the manifest: pure names, parsing and validation rules, no I/O.

<directory>/
  step-00000042/                 a committed step: complete for every rank, or absent
    MANIFEST.json                step, world_size, run_id, sha256 and size of every file below
    rank-0/<name> ...            rank 0's files
    rank-1/<name> ...
  .tmp-step-00000043[-<run>]/    a save in progress (or torn by a crash): never read as a checkpoint
    rank-<r>/<name> ...
    rank-<r>.json                rank r's part of the manifest, written before the barrier
  .barrier/<run>/<step>/<phase>/<rank>   the file barrier (multi-rank only)
  .trash-...                     a step being deleted (pruned or replaced): renamed first, then removed
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

MANIFEST = "MANIFEST.json"
FORMAT = 1
STEP_RE = re.compile(r"^step-(\d+)$")
TMP_RE = re.compile(r"^\.tmp-step-(\d+)(?:-(.+))?$")
RANK_PART_RE = re.compile(r"^rank-(\d+)\.json$")
RUN_ID_RE = re.compile(r"^[A-Za-z0-9._-]{1,100}$")

SkipKind = Literal[
    "temp-left-behind",
    "manifest-missing",
    "manifest-unreadable",
    "file-missing",
    "size-mismatch",
    "checksum-mismatch",
    "file-unreadable",
    "world-size-mismatch",
]


class FileEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    bytes: int = Field(ge=0)


class RankPart(BaseModel):
    """One rank's part of a step's manifest (`rank-<r>.json` in the temp directory); rank 0 merges them."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    step: int = Field(ge=0)
    rank: int = Field(ge=0)
    files: dict[str, FileEntry]


class Manifest(BaseModel):
    """`MANIFEST.json`: keys of `files` are paths relative to the step directory (`rank-<r>/<name>`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    format: Literal[1] = FORMAT
    step: int = Field(ge=0)
    world_size: int = Field(ge=1)
    run_id: str = ""
    created_unix: float
    files: dict[str, FileEntry]


@dataclass(frozen=True)
class Skipped:
    """A checkpoint (or temp directory) that resume passed over, and why."""

    path: Path
    step: int | None
    kind: SkipKind
    reason: str

    def __str__(self) -> str:
        return f"{self.path.name}: {self.reason}"


@dataclass(frozen=True)
class Restored:
    """The latest valid step: this rank's files by name, every file of the step, and what was skipped to get here."""

    step: int
    directory: Path
    paths: dict[str, Path]
    manifest: Manifest
    skipped: tuple[Skipped, ...] = field(default=())

    def all_paths(self) -> dict[str, Path]:
        """Every rank's files, keyed `rank-<r>/<name>` (for a job that reshards on a new world size)."""
        return {key: self.directory / key for key in self.manifest.files}


def step_dirname(step: int) -> str:
    return f"step-{step:08d}"


def tmp_dirname(step: int, run_id: str) -> str:
    return f".tmp-step-{step:08d}" + (f"-{run_id}" if run_id else "")


def rank_dirname(rank: int) -> str:
    return f"rank-{rank}"


def rank_part_name(rank: int) -> str:
    return f"rank-{rank}.json"


def parse_step(name: str) -> int | None:
    match = STEP_RE.match(name)
    return int(match.group(1)) if match else None


def parse_tmp(name: str) -> tuple[int, str] | None:
    match = TMP_RE.match(name)
    return (int(match.group(1)), match.group(2) or "") if match else None


def check_file_name(name: str) -> str:
    """A file name a rank saves under: a relative POSIX path without `..`, `.` or empty parts, and not hidden."""
    parts = PurePosixPath(name).parts
    if (
        not name
        or name.startswith("/")
        or "\\" in name
        or "\x00" in name
        or any(p in ("", ".", "..") or p.startswith(".") for p in parts)
        or name != "/".join(parts)
    ):
        raise ValueError(f"{name!r} is not a valid checkpoint file name (a relative path, no '..', no hidden parts)")
    return name


def check_run_id(run_id: str) -> str:
    if run_id and not RUN_ID_RE.match(run_id):
        raise ValueError(f"run id {run_id!r}: letters, digits, '.', '_' and '-' only, at most 100")
    return run_id


def prune_plan(steps: list[int], keep: int) -> list[int]:
    """The committed steps to delete so that the newest `keep` remain."""
    if keep < 1:
        raise ValueError(f"keep must be at least 1, not {keep}")
    return sorted(steps)[:-keep] if len(steps) > keep else []
