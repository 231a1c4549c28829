"""Benchmark: the lab's MooseFS (examples/lab-storage.yaml, root). Prints figures only.

1. Time to full redundancy after a chunkserver is lost, with 200 MiB of data (goal <= 5 s), 3 trials.
2. Time to serve again after the master is lost, without a human: kill -> the storage watcher on the metalogger's node
   fences the master and promotes the metalogger -> a client reads and writes (goal <= 10 s).

Run: sudo .venv/bin/python tests/bench/storage.py
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ha_ops.lab import storage, storage_ops
from ha_ops.lab.cluster import Lab
from ha_ops.lab.paths import LabPaths
from ha_ops.spec import load_spec
from ha_ops.util.wait import wait_for
from tests.labkit import REPO

NAME = "benchstor"


def main() -> None:
    spec = load_spec(REPO / "examples" / "lab-storage.yaml").model_copy(update={"name": NAME})
    lab = Lab(spec, LabPaths.for_lab(NAME))
    lab.down()
    lab.up()
    try:
        manifest = storage_ops.write_files(lab, 200, 1, folder="bench")
        paths = list(manifest)
        print(f"wrote {len(paths)} MiB in {len(paths)} files, 2 copies each")
        times = []
        want = len(storage.chunkservers(lab.ctx))

        def connected() -> int:
            return len(storage_ops.moosefs(lab).health().chunkservers)

        for trial, victim in enumerate(("cs1", "cs2", "cs3")):
            lab.node(victim).kill("chunkserver")
            start = time.monotonic()
            # Measured from the kill, but only counted once the master has noticed the loss.
            wait_for("the master sees the loss", lambda: connected() == want - 1, timeout=30, interval=0.02)
            wait_for(
                "every chunk at 2 copies",
                lambda: not storage_ops.under_replicated(lab, paths),
                timeout=120,
                interval=0.05,
            )
            times.append(time.monotonic() - start)
            assert storage_ops.unreadable_files(lab, manifest) == []
            print(f"trial {trial + 1}: {victim} killed -> full redundancy in {times[-1]:.2f} s", flush=True)
            lab.node(victim).start("chunkserver")
            wait_for("chunkserver back", lambda: connected() == want, timeout=60)
        print(
            f"chunkserver loss -> full redundancy (200 MiB): median {statistics.median(times):.2f} s, "
            f"max {max(times):.2f} s (goal <= 5 s)"
        )

        probe = storage.MOUNT / "bench" / "f1"
        client = storage_ops.client(lab)
        check = ["sh", "-c", f"cat {probe} >/dev/null && echo ok > {storage.MOUNT}/after"]
        lab.node(storage.master_node(lab.ctx)).kill("mfsmaster")
        start = time.monotonic()
        wait_for(
            "a client reads and writes again",
            # a request stuck in the mount's retry back-off is given up after 2 s: when a new request is served
            lambda: client.run(check, check=False, timeout=2).ok,
            timeout=60,
            interval=0.05,
        )
        served = time.monotonic() - start
        assert storage_ops.unreadable_files(lab, manifest) == []
        print(
            f"master killed -> reads and writes served again without a human (the watcher fenced and promoted; "
            f"all {len(paths)} files intact): {served:.2f} s (goal <= 10 s)"
        )
    finally:
        lab.down()


if __name__ == "__main__":
    main()
