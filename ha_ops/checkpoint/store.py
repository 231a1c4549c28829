"""The Checkpointer: atomic, checksummed, multi-rank saves; keep the last N; resume from the latest valid step.

A save of step s by rank r:
  1. write r's files into `.tmp-step-s[-run]/rank-r/`, fsync each file and directory, and write `rank-r.json`
     (r's part of the manifest: sha256 and size of each file) atomically;
  2. (world_size > 1) barrier `<run>/<s>/written`: every rank's files and part are on disk;
  3. rank 0 checks every rank's files are there at their sizes, writes `MANIFEST.json` (temp file, fsync, rename),
     renames the temp directory to `step-s` and fsyncs the checkpoint directory: the commit point. It then prunes
     to the newest `keep` steps and removes stale temp directories and barrier files;
  4. (world_size > 1) barrier `<run>/<s>/committed`: save returns on every rank only once the step is durable.
A crash anywhere before the rename leaves a temp directory that is never read as a checkpoint; a step directory
either holds every rank's files under a manifest or does not exist.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from pydantic import ValidationError

from ha_ops.checkpoint import fsio
from ha_ops.checkpoint.barrier import Barrier, FileBarrier, default_barrier
from ha_ops.checkpoint.errors import CheckpointError
from ha_ops.checkpoint.interval import is_due
from ha_ops.checkpoint.layout import (
    MANIFEST,
    FileEntry,
    Manifest,
    RankPart,
    Restored,
    SkipKind,
    Skipped,
    check_file_name,
    check_run_id,
    parse_step,
    parse_tmp,
    prune_plan,
    rank_dirname,
    rank_part_name,
    step_dirname,
    tmp_dirname,
)
from ha_ops.checkpoint.signals import DEFAULT_SIGNALS, FinalSaveFlag

log = logging.getLogger(__name__)

Writer = Callable[[Path], None]
"""Writes this rank's files into the directory it is given (e.g. `torch.save(state, d / "model.pt")`)."""
Files = Mapping[str, bytes | bytearray | memoryview] | Writer

RUN_ID_ENV = "HA_OPS_CHECKPOINT_RUN_ID"
_LAUNCHER_ENV = ("SLURM_JOB_ID", "SLURM_RESTART_COUNT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT")


def run_id_from_env(env: Mapping[str, str] | None = None) -> str:
    """The attempt's id, the same on every rank and new on each restart: HA_OPS_CHECKPOINT_RUN_ID if set, else
    Slurm's job id and restart count and torchrun's run id and restart count, those that are set; else ""."""
    env = os.environ if env is None else env
    raw = env.get(RUN_ID_ENV) or ".".join(env[key] for key in _LAUNCHER_ENV if env.get(key))
    return re.sub(r"[^A-Za-z0-9._-]", "_", raw)[:100]


class Checkpointer:
    """One rank's handle on a checkpoint directory (shared storage when world_size > 1).

    directory: where the steps live. keep: how many committed steps to keep. rank, world_size: this process's place
    in the job. barrier: how ranks wait for each other (default: torch.distributed when initialised, else files in
    `<directory>/.barrier`). run_id: the attempt (needed when world_size > 1; see run_id_from_env).
    interval_s: how often `due()` says a save is due (see interval_from_plan). barrier_timeout_s: how long a rank
    waits for the others at a barrier before BarrierTimeout.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        keep: int = 3,
        rank: int = 0,
        world_size: int = 1,
        barrier: Barrier | None = None,
        run_id: str | None = None,
        interval_s: float | None = None,
        barrier_timeout_s: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if keep < 1:
            raise CheckpointError(f"checkpointer {directory}: keep must be at least 1, not {keep}")
        if world_size < 1 or not 0 <= rank < world_size:
            raise CheckpointError(f"checkpointer {directory}: rank {rank} is not in world_size {world_size}")
        if interval_s is not None and not interval_s > 0:
            raise CheckpointError(f"checkpointer {directory}: the interval must be positive, not {interval_s}")
        self.directory = Path(directory)
        self.keep = keep
        self.rank = rank
        self.world_size = world_size
        self.interval_s = interval_s
        self.barrier_timeout_s = barrier_timeout_s
        self._clock = clock
        try:
            self.run_id = check_run_id(run_id_from_env() if run_id is None else run_id)
        except ValueError as e:
            raise CheckpointError(f"checkpointer {directory}: {e}") from e
        if world_size > 1 and not self.run_id:
            raise CheckpointError(
                f"checkpointer {directory}: world_size {world_size} needs a run id, the same on every rank and new "
                f"on each restart: pass run_id= or set {RUN_ID_ENV} (Slurm's and torchrun's job ids and restart "
                "counts are used when set)"
            )
        self.directory.mkdir(parents=True, exist_ok=True)
        self.barrier: Barrier | None = None
        if world_size > 1:
            self.barrier = barrier if barrier is not None else default_barrier(self.directory)
        self.skipped: tuple[Skipped, ...] = ()
        self._flag = FinalSaveFlag()
        self._last_save_end = clock()

    # -- when to save ---------------------------------------------------------------------------------------------

    def due(self, now: float | None = None) -> bool:
        """Whether interval_s has passed since this checkpointer was made or last saved (monotonic clock)."""
        return is_due(self._last_save_end, self._clock() if now is None else now, self.interval_s)

    def install_signal_handlers(self, signals: Iterable[int] = DEFAULT_SIGNALS) -> None:
        """SIGTERM and SIGUSR1 (by default) set final_save_requested; nothing else happens in the handler."""
        try:
            self._flag.install(signal.Signals(s) for s in signals)
        except RuntimeError as e:
            raise CheckpointError(f"checkpointer {self.directory}: {e}") from e

    def uninstall_signal_handlers(self) -> None:
        self._flag.uninstall()

    def request_final_save(self) -> None:
        """What the signal handler does, for a job that learns of its end another way (e.g. an HTTP preStop)."""
        self._flag.request(signal.SIGTERM)

    @property
    def final_save_requested(self) -> bool:
        return self._flag.requested

    def should_save(self, now: float | None = None) -> bool:
        """A final save was requested by a signal, or the interval has passed."""
        return self.final_save_requested or self.due(now)

    # -- saving ---------------------------------------------------------------------------------------------------

    def save(self, step: int, files: Files) -> Path:
        """Save this rank's files as step `step`; returns the committed step's directory once it is durable.

        `files` is a mapping of name to bytes, or a callable that writes the files into the directory it gets.
        With world_size > 1 every rank must call save with the same step; it returns once rank 0 has committed.
        """
        if step < 0:
            raise CheckpointError(f"checkpoint {self.directory}: step must be >= 0, not {step}")
        try:
            tmp = self.directory / tmp_dirname(step, self.run_id)
            mine = tmp / rank_dirname(self.rank)
            # a torn save of this step (a crash, or an exception in an earlier call): start over
            if self.world_size == 1 and tmp.exists():
                shutil.rmtree(tmp)
            elif mine.exists():
                shutil.rmtree(mine)
            mine.mkdir(parents=True, exist_ok=True)
            entries = self._write(step, mine, files)
            fsio.replace_durable(
                tmp / rank_part_name(self.rank), RankPart(step=step, rank=self.rank, files=entries).model_dump_json()
            )
            self._barrier(step, "written")
            if self.rank == 0:
                self._commit(step, tmp)
                self._tidy(step)
            self._barrier(step, "committed")
        except OSError as e:  # disk full, EIO, permissions: named, as the library's error
            what = f"{e.strerror or e}" + (f": {e.filename}" if e.filename else "")
            raise CheckpointError(f"checkpoint step {step} in {self.directory} (rank {self.rank}): {what}") from e
        self._last_save_end = self._clock()
        return self.directory / step_dirname(step)

    def _write(self, step: int, mine: Path, files: Files) -> dict[str, FileEntry]:
        where = f"checkpoint step {step} (rank {self.rank})"
        entries: dict[str, FileEntry] = {}
        dirs = {mine}
        if callable(files):
            files(mine)
            for path in sorted(mine.rglob("*")):
                name = path.relative_to(mine).as_posix()
                if path.is_symlink() or not (path.is_file() or path.is_dir()):
                    raise CheckpointError(f"{where}: {name} is not a regular file or directory")
                if path.is_dir():
                    dirs.add(path)
                    continue
                self._check_name(where, name)
                entries[name] = FileEntry(sha256=fsio.fsync_and_hash(path), bytes=path.stat().st_size)
        else:
            for name, data in files.items():
                self._check_name(where, name)
                path = mine / name
                if path.parent != mine:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    dirs.update(p for p in path.parents if p.is_relative_to(mine))
                entries[name] = FileEntry(sha256=fsio.write_durable(path, data), bytes=memoryview(data).nbytes)
        for d in sorted(dirs, key=lambda p: len(p.parts), reverse=True):
            fsio.fsync_dir(d)
        fsio.fsync_dir(mine.parent)
        return entries

    @staticmethod
    def _check_name(where: str, name: str) -> None:
        try:
            check_file_name(name)
        except ValueError as e:
            raise CheckpointError(f"{where}: {e}") from e

    def _barrier(self, step: int, phase: str) -> None:
        if self.barrier is not None:
            self.barrier.wait(f"{self.run_id}/{step:08d}/{phase}", self.rank, self.world_size, self.barrier_timeout_s)

    def _commit(self, step: int, tmp: Path) -> None:
        """Rank 0: merge every rank's part into the manifest and rename the step into place."""
        files: dict[str, FileEntry] = {}
        for r in range(self.world_size):
            part_path = tmp / rank_part_name(r)
            try:
                part = RankPart.model_validate_json(part_path.read_bytes())
            except (OSError, ValidationError) as e:
                raise CheckpointError(f"checkpoint step {step}: rank {r}'s part {part_path} is unreadable: {e}") from e
            if part.step != step or part.rank != r:
                raise CheckpointError(f"checkpoint step {step}: {part_path} is for step {part.step}, rank {part.rank}")
            for name, entry in part.files.items():
                key = f"{rank_dirname(r)}/{name}"
                try:
                    size = (tmp / key).stat().st_size
                except OSError as e:
                    raise CheckpointError(f"checkpoint step {step}: rank {r}'s {name} is missing: {e}") from e
                if size != entry.bytes:
                    raise CheckpointError(
                        f"checkpoint step {step}: rank {r}'s {name} has {size} bytes, its part says {entry.bytes}"
                    )
                files[key] = entry
        manifest = Manifest(
            step=step, world_size=self.world_size, run_id=self.run_id, created_unix=time.time(), files=files
        )
        fsio.replace_durable(tmp / MANIFEST, manifest.model_dump_json(indent=1))
        for r in range(self.world_size):
            (tmp / rank_part_name(r)).unlink()
        fsio.fsync_dir(tmp)
        final = self.directory / step_dirname(step)
        if final.exists():  # a step saved again (e.g. after resume skipped a corrupt one): the new one replaces it
            fsio.remove_tree(final, self._trash_name(final))
        os.rename(tmp, final)
        fsio.fsync_dir(self.directory)

    def _tidy(self, step: int) -> None:
        """Rank 0, after committing `step`: prune to `keep`, remove stale temp dirs, trash and old barrier files."""
        # steps newer than this one were left by an abandoned attempt (resume passed over them): not counted here,
        # never pruned; a later save of the same step replaces each
        for old in prune_plan([s for s in self.steps() if s <= step], self.keep):
            fsio.remove_tree(self.directory / step_dirname(old), self._trash_name(self.directory / step_dirname(old)))
        for entry in os.scandir(self.directory):
            parsed = parse_tmp(entry.name)
            stale_tmp = parsed is not None and (self.world_size == 1 or parsed[1] != self.run_id or parsed[0] <= step)
            if stale_tmp or entry.name.startswith(".trash-"):
                log.info("checkpoint %s: removing %s", self.directory, entry.name)
                shutil.rmtree(entry.path, ignore_errors=True)
        if isinstance(self.barrier, FileBarrier) and self.barrier.root.is_dir():
            # every rank reached <step>/written, so every rank has left the barriers of earlier steps
            for run in os.scandir(self.barrier.root):
                if run.name != self.run_id:
                    shutil.rmtree(run.path, ignore_errors=True)
                    continue
                for key in os.scandir(run.path):
                    if key.name.isdigit() and int(key.name) < step:
                        shutil.rmtree(key.path, ignore_errors=True)

    @staticmethod
    def _trash_name(path: Path) -> str:
        return f".trash-{path.name}-{uuid.uuid4().hex[:8]}"

    # -- resuming -------------------------------------------------------------------------------------------------

    def steps(self) -> list[int]:
        """The committed steps on disk, oldest first (not validated)."""
        found = (parse_step(name) for name in os.listdir(self.directory))
        return sorted(s for s in found if s is not None)

    def latest(self, verify: bool = True) -> Restored | None:
        """The newest committed step whose manifest is readable and whose files are all there at their sizes and
        (verify=True) checksums; None if there is none. Every step passed over, and every temp directory left by a
        save that never committed, is in `Restored.skipped` (and in `self.skipped`, also when None is returned).
        Every rank reads the same files, so every rank picks the same step; call it on every rank before the first
        save, not while another rank saves."""
        skipped: list[Skipped] = []
        for name in sorted(os.listdir(self.directory)):
            parsed = parse_tmp(name)
            if parsed is not None:
                skipped.append(
                    Skipped(
                        self.directory / name,
                        parsed[0],
                        "temp-left-behind",
                        f"torn: a save of step {parsed[0]} that never committed (the next save removes it)",
                    )
                )
        found: Restored | None = None
        for step in reversed(self.steps()):
            result = self._check(step, verify)
            if isinstance(result, Skipped):
                skipped.append(result)
                continue
            directory = self.directory / step_dirname(step)
            prefix = f"{rank_dirname(self.rank)}/"
            paths = {key[len(prefix) :]: directory / key for key in result.files if key.startswith(prefix)}
            found = Restored(step, directory, paths, result, tuple(skipped))
            break
        self.skipped = tuple(skipped)
        for s in skipped:
            log.warning("checkpoint %s: skipped %s", self.directory, s)
        return found

    def _check(self, step: int, verify: bool) -> Manifest | Skipped:
        directory = self.directory / step_dirname(step)

        def skip(kind: SkipKind, reason: str) -> Skipped:
            return Skipped(directory, step, kind, reason)

        try:
            raw = (directory / MANIFEST).read_bytes()
        except FileNotFoundError:
            return skip("manifest-missing", f"torn: {MANIFEST} is missing")
        except OSError as e:
            return skip("manifest-unreadable", f"{MANIFEST} is unreadable: {e.strerror}")
        try:
            manifest = Manifest.model_validate_json(raw)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "document"
            return skip("manifest-unreadable", f"{MANIFEST} is unreadable: {where}: {first['msg']}")
        if manifest.step != step:
            return skip("manifest-unreadable", f"{MANIFEST} is for step {manifest.step}, not {step}")
        if manifest.world_size != self.world_size:
            return skip(
                "world-size-mismatch", f"saved by world_size {manifest.world_size}, this job has {self.world_size}"
            )
        for key, entry in manifest.files.items():
            rank_dir, _, name = key.partition("/")
            try:
                check_file_name(key)
            except ValueError as e:
                return skip("manifest-unreadable", f"{MANIFEST} is unreadable: {e}")
            if not re.fullmatch(r"rank-\d+", rank_dir) or not name:
                return skip("manifest-unreadable", f"{MANIFEST} is unreadable: {key!r} is not under rank-<r>/")
            try:
                size = (directory / key).stat().st_size
            except FileNotFoundError:
                return skip("file-missing", f"{key} is missing")
            except OSError as e:
                return skip("file-unreadable", f"{key} is unreadable: {e.strerror}")
            if size != entry.bytes:
                return skip("size-mismatch", f"{key} has {size} bytes, the manifest says {entry.bytes}")
        if verify:
            for key, entry in manifest.files.items():
                try:
                    digest = fsio.sha256_file(directory / key)
                except OSError as e:
                    return skip("file-unreadable", f"{key} is unreadable: {e.strerror}")
                if digest != entry.sha256:
                    return skip(
                        "checksum-mismatch",
                        f"{key}: checksum mismatch (sha256 {digest[:12]}..., the manifest says {entry.sha256[:12]}...)",
                    )
        return manifest
