"""ha_ops.checkpoint in one process: the atomic save and its manifest, keep-last-N, torn and corrupt checkpoints
skipped and named, the interval from `ha-ops plan checkpoint`, the final-save flag and the file barrier."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from ha_ops.checkpoint import (
    BarrierTimeout,
    Checkpointer,
    CheckpointError,
    FileBarrier,
    interval_from_plan,
    run_id_from_env,
)
from ha_ops.errors import HaOpsError
from ha_ops.plan.checkpoint import daly_interval

HOUR = 3600.0


def payload(step: int, size: int = 4096) -> bytes:
    return step.to_bytes(4, "little") * (size // 4)


def save_steps(ckpt: Checkpointer, steps: range) -> None:
    for step in steps:
        ckpt.save(step, {"model.bin": payload(step), "optim/state.bin": payload(step + 1000, 512)})


def test_a_save_is_one_renamed_directory_with_a_manifest_of_sha256_sizes_and_the_step(tmp_path: Path) -> None:
    ckpt = Checkpointer(tmp_path, keep=3)
    final = ckpt.save(7, {"model.bin": payload(7), "optim/state.bin": b"optimizer"})
    assert final == tmp_path / "step-00000007"
    assert sorted(os.listdir(tmp_path)) == ["step-00000007"]  # no temp directory, no rank part left behind
    assert sorted(os.listdir(final)) == ["MANIFEST.json", "rank-0"]
    manifest = json.loads((final / "MANIFEST.json").read_text())
    assert manifest["step"] == 7 and manifest["world_size"] == 1 and manifest["format"] == 1
    assert manifest["files"] == {
        "rank-0/model.bin": {"sha256": hashlib.sha256(payload(7)).hexdigest(), "bytes": 4096},
        "rank-0/optim/state.bin": {"sha256": hashlib.sha256(b"optimizer").hexdigest(), "bytes": 9},
    }
    restored = ckpt.latest()
    assert restored is not None and restored.step == 7 and restored.skipped == ()
    assert restored.paths["model.bin"].read_bytes() == payload(7)
    assert restored.paths["optim/state.bin"].read_bytes() == b"optimizer"


def test_a_writer_callback_is_fsynced_and_hashed_like_bytes(tmp_path: Path) -> None:
    ckpt = Checkpointer(tmp_path)

    def write(directory: Path) -> None:
        (directory / "model.pt").write_bytes(payload(3))
        (directory / "shards").mkdir()
        (directory / "shards" / "0.pt").write_bytes(b"shard")

    ckpt.save(3, write)
    restored = ckpt.latest()
    assert restored is not None and sorted(restored.paths) == ["model.pt", "shards/0.pt"]
    assert restored.manifest.files["rank-0/shards/0.pt"].sha256 == hashlib.sha256(b"shard").hexdigest()


def test_keep_last_n_prunes_the_oldest_steps(tmp_path: Path) -> None:
    ckpt = Checkpointer(tmp_path, keep=3)
    save_steps(ckpt, range(6))
    assert ckpt.steps() == [3, 4, 5]
    assert sorted(os.listdir(tmp_path)) == ["step-00000003", "step-00000004", "step-00000005"]  # no trash left


def test_pruning_never_deletes_the_step_just_saved_when_a_newer_corrupt_one_remains(tmp_path: Path) -> None:
    ckpt = Checkpointer(tmp_path, keep=1)
    save_steps(ckpt, range(2, 3))
    save_steps(ckpt, range(5, 6))
    (tmp_path / "step-00000005" / "rank-0" / "model.bin").write_bytes(payload(0))  # same size, other bytes
    ckpt = Checkpointer(tmp_path, keep=1)
    assert ckpt.latest() is None  # keep=1 pruned step 2 when 5 was saved; 5 is corrupt
    save_steps(ckpt, range(3))  # the job starts over: 0, 1, 2
    assert ckpt.steps() == [2, 5]
    restored = ckpt.latest()
    assert restored is not None and restored.step == 2
    assert [(s.step, s.kind) for s in restored.skipped] == [(5, "checksum-mismatch")]
    save_steps(ckpt, range(3, 6))  # reaching 5 again replaces the corrupt one
    assert ckpt.steps() == [5]
    again = ckpt.latest()
    assert again is not None and again.step == 5 and again.skipped == ()


def test_a_corrupt_shard_is_skipped_and_named_and_resume_picks_the_previous_step(tmp_path: Path) -> None:
    ckpt = Checkpointer(tmp_path, keep=3)
    save_steps(ckpt, range(1, 4))
    shard = tmp_path / "step-00000003" / "rank-0" / "model.bin"
    data = bytearray(shard.read_bytes())
    data[100] ^= 0xFF  # a flipped byte: same size, different content
    shard.write_bytes(bytes(data))
    restored = ckpt.latest()
    assert restored is not None and restored.step == 2
    assert restored.paths["model.bin"].read_bytes() == payload(2)
    [skipped] = restored.skipped
    assert skipped.step == 3 and skipped.kind == "checksum-mismatch"
    assert skipped.path == tmp_path / "step-00000003"
    assert "rank-0/model.bin" in skipped.reason and "checksum mismatch" in skipped.reason
    assert str(skipped).startswith("step-00000003: rank-0/model.bin")
    # verify=False checks presence and sizes only: a flipped byte is not seen
    fast = ckpt.latest(verify=False)
    assert fast is not None and fast.step == 3


def test_a_torn_save_temp_dir_and_a_missing_manifest_are_skipped_named_and_cleaned(tmp_path: Path) -> None:
    ckpt = Checkpointer(tmp_path, keep=3)
    save_steps(ckpt, range(1, 4))
    (tmp_path / "step-00000003" / "MANIFEST.json").unlink()  # a step directory without its manifest
    torn = tmp_path / ".tmp-step-00000004" / "rank-0"  # a save killed before its rename
    torn.mkdir(parents=True)
    (torn / "model.bin").write_bytes(payload(4)[:1000])
    restored = ckpt.latest()
    assert restored is not None and restored.step == 2
    by_kind = {s.kind: s for s in restored.skipped}
    assert set(by_kind) == {"temp-left-behind", "manifest-missing"}
    assert by_kind["temp-left-behind"].path.name == ".tmp-step-00000004" and by_kind["temp-left-behind"].step == 4
    assert "never committed" in by_kind["temp-left-behind"].reason
    assert by_kind["manifest-missing"].step == 3 and "MANIFEST.json is missing" in by_kind["manifest-missing"].reason
    assert ckpt.skipped == restored.skipped
    # the job resumes from 2 and saves 3 again: the torn step is replaced and the temp directory removed
    save_steps(ckpt, range(3, 4))
    assert sorted(os.listdir(tmp_path)) == ["step-00000001", "step-00000002", "step-00000003"]
    again = ckpt.latest()
    assert again is not None and again.step == 3 and again.skipped == ()


@pytest.mark.parametrize(
    ("damage", "kind", "words"),
    [
        (lambda d: (d / "MANIFEST.json").write_text("{not json"), "manifest-unreadable", "MANIFEST.json is unreadable"),
        (lambda d: (d / "MANIFEST.json").write_text('{"step": 2}'), "manifest-unreadable", "world_size"),
        (
            lambda d: (d / "MANIFEST.json").write_text(
                (d / "MANIFEST.json").read_text().replace('"step": 2', '"step": 9')
            ),
            "manifest-unreadable",
            "is for step 9, not 2",
        ),
        (
            lambda d: (d / "rank-0" / "optim" / "state.bin").unlink(),
            "file-missing",
            "rank-0/optim/state.bin is missing",
        ),
        (lambda d: (d / "rank-0" / "model.bin").write_bytes(b"short"), "size-mismatch", "has 5 bytes"),
    ],
    ids=["bad-json", "bad-schema", "wrong-step", "missing-file", "truncated-file"],
)
def test_each_kind_of_damage_is_named(tmp_path: Path, damage: Callable[[Path], object], kind: str, words: str) -> None:
    ckpt = Checkpointer(tmp_path)
    save_steps(ckpt, range(1, 3))
    damage(tmp_path / "step-00000002")
    restored = ckpt.latest()
    assert restored is not None and restored.step == 1
    [skipped] = restored.skipped
    assert (skipped.step, skipped.kind) == (2, kind)
    assert words in skipped.reason


def test_no_valid_step_returns_none_and_still_names_what_was_skipped(tmp_path: Path) -> None:
    ckpt = Checkpointer(tmp_path)
    assert ckpt.latest() is None and ckpt.skipped == ()
    save_steps(ckpt, range(1))
    (tmp_path / "step-00000000" / "rank-0" / "model.bin").unlink()
    assert ckpt.latest() is None
    assert [(s.step, s.kind) for s in ckpt.skipped] == [(0, "file-missing")]


def test_a_checkpoint_of_another_world_size_is_skipped_and_named(tmp_path: Path) -> None:
    save_steps(Checkpointer(tmp_path), range(1))
    two = Checkpointer(tmp_path, rank=0, world_size=2, run_id="r1")
    assert two.latest() is None
    assert [s.kind for s in two.skipped] == ["world-size-mismatch"]
    assert "world_size 1, this job has 2" in two.skipped[0].reason


def test_the_interval_is_dalys_figure_from_ha_ops_plan() -> None:
    interval = interval_from_plan(3.1 * HOUR, 30.0)
    assert round(interval / 60, 1) == 13.3
    assert interval == daly_interval(3.1 * HOUR, 30.0)
    with pytest.raises(CheckpointError, match="MTBF must be a positive"):
        interval_from_plan(-1.0, 30.0)


def test_due_counts_the_interval_from_the_last_save(tmp_path: Path) -> None:
    now = [100.0]
    ckpt = Checkpointer(tmp_path, interval_s=60.0, clock=lambda: now[0])
    assert not ckpt.due() and ckpt.due(160.0) and not ckpt.due(159.9)
    now[0] = 170.0
    assert ckpt.should_save()
    ckpt.save(1, {"m": b"x"})
    assert not ckpt.due() and ckpt.due(230.0)
    assert not Checkpointer(tmp_path / "none").due(1e12)  # no interval: never due


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR1])
def test_a_signal_only_sets_the_final_save_flag(tmp_path: Path, sig: signal.Signals) -> None:
    before = signal.getsignal(sig)
    ckpt = Checkpointer(tmp_path)
    ckpt.install_signal_handlers()
    try:
        assert not ckpt.final_save_requested and not ckpt.should_save()
        os.kill(os.getpid(), sig)
        assert ckpt.final_save_requested and ckpt.should_save()
        assert os.listdir(tmp_path) == []  # the handler saved nothing: the job's loop does, at a safe point
    finally:
        ckpt.uninstall_signal_handlers()
    assert signal.getsignal(sig) == before


def test_misuse_raises_the_librarys_error_naming_the_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ckpt = Checkpointer(tmp_path)
    for name in ("../escape", "/abs", ".hidden", "a/../b", "a//b", ""):
        with pytest.raises(CheckpointError, match="not a valid checkpoint file name") as info:
            ckpt.save(1, {name: b"x"})
        assert "checkpoint step 1 (rank 0)" in str(info.value)
    assert isinstance(info.value, HaOpsError)
    with pytest.raises(CheckpointError, match=r"checkpoint step 2 in .* \(rank 0\): .*rank-0/a"):
        ckpt.save(2, {"a": b"a file", "a/b": b"under a file"})  # an OSError, named as the library's error
    assert ckpt.latest() is None  # nothing committed
    with pytest.raises(CheckpointError, match="rank 2 is not in world_size 2"):
        Checkpointer(tmp_path, rank=2, world_size=2, run_id="x")
    with pytest.raises(CheckpointError, match="keep must be at least 1"):
        Checkpointer(tmp_path, keep=0)
    for key in ("HA_OPS_CHECKPOINT_RUN_ID", "SLURM_JOB_ID", "SLURM_RESTART_COUNT", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.delenv("TORCHELASTIC_RESTART_COUNT", raising=False)
    with pytest.raises(CheckpointError, match="needs a run id"):
        Checkpointer(tmp_path, rank=0, world_size=2)


def test_the_run_id_comes_from_the_launcher_and_changes_with_each_restart() -> None:
    assert run_id_from_env({"HA_OPS_CHECKPOINT_RUN_ID": "job/7", "SLURM_JOB_ID": "1"}) == "job_7"
    assert run_id_from_env({"SLURM_JOB_ID": "1234"}) == "1234"
    assert run_id_from_env({"SLURM_JOB_ID": "1234", "SLURM_RESTART_COUNT": "2"}) == "1234.2"
    assert run_id_from_env({"TORCHELASTIC_RUN_ID": "abc", "TORCHELASTIC_RESTART_COUNT": "0"}) == "abc.0"
    assert run_id_from_env({}) == ""


def test_the_file_barrier_times_out_naming_the_missing_ranks(tmp_path: Path) -> None:
    barrier = FileBarrier(tmp_path / ".barrier", poll_s=0.01)
    with pytest.raises(BarrierTimeout, match=r"barrier 'r1/00000005/written' in .*rank\(s\) \[1, 2\] of world_size 3"):
        barrier.wait("r1/00000005/written", 0, 3, timeout_s=0.1)
    assert (tmp_path / ".barrier" / "r1" / "00000005" / "written" / "0").exists()


def test_two_ranks_commit_one_step_holding_both_shards(tmp_path: Path) -> None:
    errors: list[BaseException] = []

    def rank(r: int) -> None:
        try:
            ckpt = Checkpointer(tmp_path, keep=2, rank=r, world_size=2, run_id="t1", barrier_timeout_s=30)
            for step in range(3):
                ckpt.save(step, {"shard.bin": payload(step * 10 + r)})
        except BaseException as e:  # reported to the main thread
            errors.append(e)

    threads = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert errors == []
    assert sorted(os.listdir(tmp_path)) == [".barrier", "step-00000001", "step-00000002"]
    assert os.listdir(tmp_path / ".barrier" / "t1") == ["00000002"]  # older steps' barrier files removed
    for r in (0, 1):
        restored = Checkpointer(tmp_path, rank=r, world_size=2, run_id="t2").latest()
        assert restored is not None and restored.step == 2
        assert restored.paths == {"shard.bin": tmp_path / "step-00000002" / f"rank-{r}" / "shard.bin"}
        assert restored.paths["shard.bin"].read_bytes() == payload(20 + r)
        assert sorted(restored.all_paths()) == ["rank-0/shard.bin", "rank-1/shard.bin"]
