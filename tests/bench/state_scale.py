"""Benchmark: the controller's state at 25,000 nodes (issue 43), on files in a temporary folder.

A controller takes over a fleet of N nodes (every record into its shard), each node's agent reports once (a last
report per node, written in group commits of 200), then a heartbeat from every node; a second controller then takes
over. Prints the largest document written, the bytes written by the reports and by the heartbeats, and the new
leader's takeover time (the state loaded, every record's text known).

Run: .venv/bin/python tests/bench/state_scale.py [--nodes 25000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ha_ops.remediation.documents import DirectoryDocuments
from ha_ops.remediation.model import LastReport
from tests.unit.test_remediation_controller import Clock, Rig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=25_000)
    args = parser.parse_args()
    writes: list[tuple[str, int]] = []
    write = DirectoryDocuments.write

    def counting(documents: DirectoryDocuments, name: str, text: str) -> None:
        writes.append((name, len(text.encode())))
        write(documents, name, text)

    DirectoryDocuments.write = counting  # type: ignore[method-assign]
    names = tuple(f"gpu{i:05d}" for i in range(args.nodes))
    with tempfile.TemporaryDirectory() as tmp:
        clock = Clock()
        rig = Rig(Path(tmp), nodes=names, spares=("s1",))
        began = time.perf_counter()
        rig.c.lease_step()
        first = time.perf_counter() - began

        def everyone(state: str, seq: int) -> int:
            mark = len(writes)
            for start in range(0, len(names), 200):
                with rig.c.term.lock:
                    assert rig.c.state is not None
                    report = LastReport(state=state, action="none", reason="", seq=seq, agent_id="a", at=clock.now)
                    for name in names[start : start + 200]:
                        rig.c.state.nodes[name].last_report = report
                rig.c.term.persist()
            return sum(size for name, size in writes[mark:] if not name.startswith("views/"))

        reported = everyone("healthy", 1)
        heartbeats = everyone("healthy", 2)
        rig.c.lease.release()
        successor = Rig(Path(tmp), "ctl2", rig.clock)
        successor.clock.now += 5.0
        began = time.perf_counter()
        successor.c.lease_step()
        takeover = time.perf_counter() - began
        assert successor.c.is_leader
        biggest = max(writes, key=lambda w: w[1])
        print(f"first takeover of a fresh fleet: {first:.2f} s (every record into its shard)")
        print(f"a report from every node: {reported / 1024:.0f} KiB written; a heartbeat from every node: "
              f"{heartbeats} bytes written")  # fmt: skip
        print(f"largest document written: {biggest[0]} {biggest[1] / 1024:.1f} KiB")
        print(f"state {args.nodes} nodes: takeover {takeover:.2f} s, largest document {biggest[1] / 1024:.0f} KiB, "
              f"heartbeat bytes written {heartbeats}")  # fmt: skip


if __name__ == "__main__":
    main()
