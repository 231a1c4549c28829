"""Benchmark of the goodput simulator (pure, no lab): the Llama 3 run's 54 days on 16,384 GPUs, 1,000 replications
at once (the issue asks for under 10 s on a 2-core machine). Prints figures only; median of 3 runs, plus the
figures the runs validate (interruptions, ETTR) so a slow run can be told from a wrong one.

Run: .venv/bin/python tests/bench/plan_simulate.py [--replications 1000] [--runs 3]
The last line: `plan simulate: 1000 replications of 16384 GPUs x 54 days in X s`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ha_ops.plan.failures import FLEETS, failure_mix
from ha_ops.plan.presets import PRESETS
from ha_ops.plan.simulate import preset_scenario, simulate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replications", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    preset = PRESETS["llama3-16k"]
    mix = failure_mix(FLEETS[preset.fleet])
    scenario = preset_scenario(preset, mix)
    times = []
    for run in range(args.runs):
        start = time.perf_counter()
        result = simulate(scenario, args.replications, np.random.default_rng(run))
        times.append(time.perf_counter() - start)
        print(
            f"run {run + 1}: {times[-1]:.2f} s; interruptions {result.interruptions.mean:.1f} (Llama 3: 419), "
            f"ETTR {result.ettr.mean:.2%} (95% CI {result.ettr.low:.2%}-{result.ettr.high:.2%})"
        )
    median = statistics.median(times)
    verdict = "OK" if median < 10 else "SLOW"
    print(f"numpy {np.__version__}; median of {args.runs} runs: {median:.2f} s ({verdict}: under 10 s asked)")
    size = f"{args.replications} replications of {preset.gpus} GPUs x {preset.days:g} days"
    print(f"plan simulate: {size} in {median:.2f} s")


if __name__ == "__main__":
    main()
