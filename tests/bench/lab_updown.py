"""Benchmark: lab up and lab down times for examples/lab.yaml, median of 3 (root). Prints figures only.

Run: sudo .venv/bin/python tests/bench/lab_updown.py [--runs N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.labkit import leftovers, make_lab

NAME = "bench"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    lab = make_lab(NAME)
    lab.down()
    ups, downs = [], []
    for i in range(args.runs):
        start = time.monotonic()
        lab.up()
        ups.append(time.monotonic() - start)
        start = time.monotonic()
        lab.down()
        downs.append(time.monotonic() - start)
        left = leftovers(NAME)
        print(f"run {i + 1}: up {ups[-1]:.2f} s, down {downs[-1]:.2f} s, leftovers {len(left)}", flush=True)
        if left:
            raise SystemExit(f"leftovers after down: {left}")
    print(f"lab up:   median {statistics.median(ups):.2f} s (min {min(ups):.2f}, max {max(ups):.2f}; goal < 30 s)")
    lo, hi = min(downs), max(downs)
    print(f"lab down: median {statistics.median(downs):.2f} s (min {lo:.2f}, max {hi:.2f}; goal < 10 s)")


if __name__ == "__main__":
    main()
