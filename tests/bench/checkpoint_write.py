"""Benchmark: checkpoint writes through ha_ops.checkpoint against the raw disk. Prints figures only.

Each run saves 256 MiB in 2 shards of 128 MiB (one step: write, fsync, sha256, manifest, rename, fsync of the
directory) into a temp directory under /tmp, and writes the same amount with
`dd if=/dev/zero of=FILE bs=4M count=64 conv=fsync` on the same disk; runs alternate, the medians are compared.
The library's figure includes hashing (sha256 of every byte, as it writes) and the fsyncs of every file and
directory; dd's includes one fsync.

Run: .venv/bin/python tests/bench/checkpoint_write.py [--runs 3] [--mib 256] [--dir /tmp]
The last line: `checkpoint write: X MB/s through ha_ops.checkpoint, Y MB/s raw (dd conv=fsync), Z% of raw`.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ha_ops.checkpoint import Checkpointer

MIB = 1 << 20
DD_RE = re.compile(r"^(\d+) bytes .* copied, ([0-9.,]+) s", re.MULTILINE)


def dd_mb_s(target: Path, mib: int) -> float:
    """dd's own byte count and seconds (its MB/s figure is rounded), as MB/s (10^6 bytes, as dd prints)."""
    done = subprocess.run(
        ["dd", "if=/dev/zero", f"of={target}", "bs=4M", f"count={mib // 4}", "conv=fsync"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "LC_ALL": "C"},
    )
    match = DD_RE.search(done.stderr)
    if match is None:
        raise SystemExit(f"could not parse dd's output: {done.stderr!r}")
    print(f"  dd: {done.stderr.strip().splitlines()[-1]}")
    return int(match.group(1)) / float(match.group(2).replace(",", ".")) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--mib", type=int, default=256, help="per checkpoint, in 2 shards (a multiple of 8)")
    parser.add_argument("--dir", default="/tmp", help="where the temp directory goes (the disk under test)")
    args = parser.parse_args()
    shard = (bytes(range(256)) * (args.mib // 2 * MIB // 256))[: args.mib // 2 * MIB]
    files = {"model.bin": shard, "optim.bin": shard}
    total = 2 * len(shard)
    work = Path(tempfile.mkdtemp(prefix="ckpt-bench-", dir=args.dir))
    lib: list[float] = []
    raw: list[float] = []
    try:
        ckpt = Checkpointer(work / "ckpt", keep=args.runs + 1)  # no pruning inside the timed saves
        for run in range(1, args.runs + 1):
            start = time.perf_counter()
            ckpt.save(run, files)
            seconds = time.perf_counter() - start
            lib.append(total / seconds / 1e6)
            print(f"run {run}: {args.mib} MiB in 2 shards in {seconds:.3f} s = {lib[-1]:.0f} MB/s through the library")
            target = work / "dd.bin"
            raw.append(dd_mb_s(target, args.mib))
            target.unlink()
            print(f"run {run}: {raw[-1]:.0f} MB/s raw (dd conv=fsync)")
        restored = ckpt.latest()
        assert restored is not None and restored.step == args.runs and restored.skipped == ()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    x, y = statistics.median(lib), statistics.median(raw)
    through = f"{x:.0f} MB/s through ha_ops.checkpoint"
    print(f"checkpoint write: {through}, {y:.0f} MB/s raw (dd conv=fsync), {x / y:.0%} of raw")


if __name__ == "__main__":
    main()
