"""Fuzz figures per parser (issues 20 and 44): runs tests/unit/test_parsers_fuzz.py with more examples and prints,
for each parser, how many inputs it was given and how they ended: refused with ha-ops' own error (clean errors), a
traceback, or accepted though its oracle (tests/unit/fuzz_oracles.py) knows the input is garbage (garbage accepted),
beside how many inputs the oracle knew to be garbage. The suite fails on the first traceback or garbage accepted of a
parser (hypothesis then shrinks it: the inputs it tries are counted too).

    .venv/bin/python tests/bench/fuzz_parsers.py [--examples 300]

The last line: `fuzz: N inputs over P parsers, T tracebacks, G garbage accepted`; exit 1 if the suite failed."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OUTCOMES = ("clean", "accepted", "traceback", "known", "garbage")  # (test_parsers_fuzz.tally's)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=300, help="hypothesis examples per parser (default 300)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as figures:
        env = {**os.environ, "HA_OPS_FUZZ_FIGURES": figures, "HA_OPS_FUZZ_EXAMPLES": str(args.examples)}
        result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                 str(REPO / "tests/unit/test_parsers_fuzz.py")], cwd=REPO, env=env,
                                capture_output=True, text=True)  # fmt: skip
        counts: dict[str, dict[str, int]] = {}
        for path in Path(figures).iterdir():
            name, _, outcome = path.name.rpartition(".")
            counts.setdefault(name, dict.fromkeys(OUTCOMES, 0))[outcome] = int(path.read_text())
    for name, seen in sorted(counts.items()):
        inputs = seen["clean"] + seen["accepted"] + seen["traceback"]
        print(f"{name:28} {inputs:6} inputs {seen['clean']:6} clean errors {seen['traceback']:3} tracebacks "
              f"{seen['garbage']:3} garbage accepted (of {seen['known']} known garbage)")  # fmt: skip
    if result.returncode != 0:
        print(result.stdout[-3000:], file=sys.stderr)
    total = {o: sum(seen[o] for seen in counts.values()) for o in OUTCOMES}
    inputs = total["clean"] + total["accepted"] + total["traceback"]
    print(
        f"fuzz: {inputs} inputs over {len(counts)} parsers, {total['traceback']} tracebacks, "
        f"{total['garbage']} garbage accepted"
    )
    return 0 if result.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
