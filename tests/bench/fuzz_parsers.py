"""Fuzz figures per parser (issue 20): runs tests/unit/test_parsers_fuzz.py with more examples and prints, for each
parser, how many inputs it was given and how many came out as a traceback (the suite fails on the first one).

    .venv/bin/python tests/bench/fuzz_parsers.py [--examples 300]

The last line: `fuzz: N inputs over P parsers, T tracebacks`."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=300, help="hypothesis examples per parser (default 300)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as figures:
        env = {**os.environ, "HA_OPS_FUZZ_FIGURES": figures, "HA_OPS_FUZZ_EXAMPLES": str(args.examples)}
        result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                 str(REPO / "tests/unit/test_parsers_fuzz.py")], cwd=REPO, env=env,
                                capture_output=True, text=True)  # fmt: skip
        counts = {p.stem: int(p.read_text()) for p in Path(figures).glob("*.count")}
    failed = [line for line in result.stdout.splitlines() if line.startswith("FAILED")]
    for name, count in sorted(counts.items()):
        broke = sum(1 for line in failed if f"[{name}" in line or f"-{name}]" in line)
        print(f"{name:30} {count:6} inputs  {broke} traceback(s)")
    if result.returncode != 0:
        print(result.stdout[-3000:], file=sys.stderr)
    print(f"fuzz: {sum(counts.values())} inputs over {len(counts)} parsers, {len(failed)} tracebacks")
    return 0 if result.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
