"""Benchmark of the CLI's start-up: `ha-ops health check --json`, as Slurm runs it as its HealthCheckProgram on every
node (issue 21 asks for at most 0.6 s). Runs the installed console script 3 times in a subprocess and prints each
wall time and the median. Without a GPU the check exits 3 (unknown) at once, so what is timed is the start-up:
the imports, the option parsing, NVML's load. Prints figures only; the interpreter's own start-up for scale, and
whether .pyc files are written (a pip install compiles them; with PYTHONDONTWRITEBYTECODE set, every run compiles).

Run: .venv/bin/python tests/bench/cli_startup.py [--runs 3]
The last line: `cli startup: health check --json median X s of 3 (goal 0.6 s)`.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

GOAL_S = 0.6
HA_OPS = shutil.which("ha-ops", path=str(Path(sys.executable).parent)) or "ha-ops"


def timed(argv: list[str]) -> tuple[float, int]:
    start = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
    return time.perf_counter() - start, done.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    python, _ = timed([sys.executable, "-c", "pass"])
    print(f"python -c pass: {python:.3f} s")
    if sys.flags.dont_write_bytecode:  # no __pycache__ written: every run compiles its modules from source
        print("PYTHONDONTWRITEBYTECODE is set: no .pyc is written, so the times include compiling every module")
    times = []
    for run in range(args.runs):
        elapsed, code = timed([HA_OPS, "health", "check", "--json"])
        times.append(elapsed)
        print(f"run {run + 1}: {elapsed:.3f} s (exit {code}: 0 healthy, 1 unhealthy, 3 unknown or no GPU)")
    median = statistics.median(times)
    print(f"median {median:.3f} s ({'OK' if median <= GOAL_S else 'SLOW'}: at most {GOAL_S} s asked)")
    print(f"cli startup: health check --json median {median:.2f} s of {args.runs} (goal {GOAL_S} s)")


if __name__ == "__main__":
    main()
