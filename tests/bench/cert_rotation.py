"""Benchmark: certificate rotation under load, in the lab (root; issue 20, line 2). The lab's ha-ops certificates
(controllers, agents, operator, Alertmanager, Prometheus) are issued again with new keys every `--every` seconds
while, for `--minutes`, a load generator posts each GPU node's healthy report to the leading controller with that
node's agent certificate (as its agent would, over mutual TLS, reloaded as the files rotate), beside the
lab's own agents. Every report must be accepted: a refused handshake, a 4xx/5xx other than a standby's 503, or a
timeout counts as an error. The agents' own logs are read for failed reports too.

Run: sudo .venv/bin/python tests/bench/cert_rotation.py [--minutes 5] [--every 60] [--rate 10]
The last line: `cert rotation: N reports, L lost, E errors, R rotations in M min`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.integration.test_gameday import lines_since, log_sizes, rotating_certificates
from tests.labkit import call_controller, leader, make_lab, running_lab

NAME = "benchrot"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--every", type=float, default=60.0, help="seconds between rotations")
    parser.add_argument("--rate", type=float, default=10.0, help="reports per second from the load generator")
    args = parser.parse_args()
    with running_lab(make_lab(NAME)) as lab:
        gpu_nodes = [n.name for n in lab.ctx.layout.nodes_with_role("gpu")]
        agent_logs = log_sizes(lab, "agent", gpu_nodes)
        sent, errors, seq, end = 0, [], 10**6, time.time() + args.minutes * 60
        with rotating_certificates(lab, every_s=args.every) as rotations:
            while time.time() < end:
                node = gpu_nodes[sent % len(gpu_nodes)]
                seq += 1
                report = {"schema": "ha-ops/agent-report", "version": 1, "node": node, "seq": seq,
                          "agent_id": "bench", "sent_at": time.time(), "state": "healthy", "action": "none",
                          "reason": ""}  # fmt: skip
                try:
                    ctl = leader(lab) or "ctl1"
                    body = json.dumps(report).encode()
                    status, answer = call_controller(lab, ctl, "/v1/reports", body, f"agent-{node}")
                    if status != 200:
                        errors.append(f"{node}: HTTP {status}: {answer}")
                except Exception as exc:
                    errors.append(f"{node}: {exc}")
                sent += 1
                time.sleep(1.0 / args.rate)
        lost = [line for line in lines_since(agent_logs) if "report to the controller failed" in line]
    for line in (errors + lost)[:20]:
        print(line)
    print(f"agents' own reports failed: {len(lost)}; load generator errors: {len(errors)}")
    print(f"cert rotation: {sent} reports, {len(lost)} lost, {len(errors)} errors, {len(rotations)} rotations in "
          f"{args.minutes:g} min")  # fmt: skip
    return 0 if not (errors or lost) else 1


if __name__ == "__main__":
    sys.exit(main())
