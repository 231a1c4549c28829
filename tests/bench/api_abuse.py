"""Benchmark: the controller's API under abuse from hostile GPU nodes (issue 44, line 1), on 127.0.0.1 only.

The real controller (a process of its own, mutual TLS, the Slurm stand-ins of tests/bench/ingest.py) while an
attacker process (tests/hostile.py) holds `--half-open` TCP connections that never start TLS, `--slow-handshakes`
connections trickling a real ClientHello 1 byte every 5 s, and `--slow-bodies` connections with GPU nodes'
certificates trickling a report 1 byte every 5 s, each opened again when dropped: from one address (127.0.0.1, as a
job on one GPU node would: the per-address cap turns most away) or from `--addresses` loopback addresses (many nodes,
each under the caps, so that the deadlines and the workers are what is tried), with `--identities` certificates.
Meanwhile 200 agents (each its own certificate and loopback address, the agent's own poster) report at 20 a second
in all, and a health probe (a new connection each time, as a kubelet's) asks /healthz twice a second. Printed: the
share of reports served, their p99, the probe's p99, and how many attack connections were open; for the code before
issue 44 too (`--before REV`: that commit's controller, from a git worktree), beside it.

Run: .venv/bin/python tests/bench/api_abuse.py [--seconds 40] [--before bce008b] [--addresses 100 --identities 16]
The last line: `api abuse: served X% of reports, p99 Y ms, probe p99 Z ms`.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ha_ops.health.poster import HttpPoster
from ha_ops.health.report import AgentReport
from ha_ops.security.tls import ReloadingContext
from tests.bench.controller import percentile
from tests.bench.ingest import _wait_leading, certificates, files, node_name, start_controller
from tests.bench.k8s_cordon import free_port, loopback_address, stop_process, worktree

REPO = Path(__file__).resolve().parents[2]
AGENTS = 200
ATTACKERS = 10_000  # the attack's loopback addresses start here, apart from the agents' and the probe's
RATE = 20.0


# --- the benchmark -------------------------------------------------------------------------------------------------
def one_run(args: argparse.Namespace, pythonpath: str | None) -> dict[str, float]:
    with tempfile.TemporaryDirectory(dir="/var/tmp", prefix="ha-ops-abuse-") as tmp:
        folder, port = Path(tmp), free_port()
        controller = start_controller(folder, AGENTS + 1, port, pythonpath)
        attacker = None
        try:
            _wait_leading(port, folder)
            # GPU nodes' own certificates (past the agents'), and the addresses the attack comes from.
            identities = [files(node_name(AGENTS + 1 + i)) for i in range(args.identities)]
            sources = ["127.0.0.1"] if args.addresses == 1 else [loopback_address(ATTACKERS + i)
                                                                  for i in range(args.addresses)]  # fmt: skip
            argv = [sys.executable, "-m", "tests.hostile", "--host", "127.0.0.1", "--port", str(port),
                    "--ca", str(identities[0].ca_file), "--half-open", str(args.half_open),
                    "--slow-handshakes", str(args.slow_handshakes), "--slow-bodies", str(args.slow_bodies),
                    "--seconds", str(args.seconds + 20)]  # fmt: skip
            for node in identities:
                argv += ["--cert", str(node.cert_file), "--key", str(node.key_file)]
            for source in sources:
                argv += ["--source", source]
            attacker = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, text=True)
            time.sleep(15)  # the attack in place
            latencies, lost, probes = legitimate(port, args.seconds)
            assert attacker.stdout is not None
            attacker.kill()
            held = [json.loads(line) for line in attacker.stdout.read().splitlines() if line.startswith("{")]
            last = held[-1] if held else {}
            sent = len(latencies) + lost
            return {
                "served": 100.0 * len(latencies) / max(1, sent),
                "p99": percentile(latencies or [0.0], 0.99),
                "lost": float(lost),
                "probe_p99": percentile(probes, 0.99),
                "probe_failed": float(sum(1 for p in probes if p >= 5000.0)),
                "held": last,
            }  # type: ignore[dict-item]
        finally:
            if attacker is not None and attacker.poll() is None:
                attacker.kill()
            stop_process(controller, 30)


def legitimate(port: int, seconds: float) -> tuple[list[float], int, list[float]]:
    """200 agents' reports at RATE a second (each through its poster, 2 s timeout as the agent's), and the probe."""
    url = f"https://127.0.0.1:{port}/v1/reports"
    posters = [HttpPoster([url], 2.0, ReloadingContext(files(node_name(i)), server=False), loopback_address(i))
               for i in range(AGENTS)]  # fmt: skip
    latencies: list[float] = []
    lost = 0
    probes: list[float] = []
    stop = threading.Event()

    def probe() -> None:
        context = ReloadingContext(files(node_name(AGENTS - 1)), server=False).get()
        while not stop.is_set():
            started = time.monotonic()
            try:
                conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=5, context=context,
                                                   source_address=(loopback_address(AGENTS + 7), 0))  # fmt: skip
                conn.request("GET", "/healthz")
                conn.getresponse().read()
                conn.close()
                probes.append((time.monotonic() - started) * 1000)
            except (OSError, ssl.SSLError):
                probes.append(5000.0)  # (no answer within the probe's 5 s)
            stop.wait(0.5)

    prober = threading.Thread(target=probe, daemon=True)
    prober.start()
    start = time.monotonic()
    for k in range(int(seconds * RATE)):
        due = start + k / RATE
        time.sleep(max(0.0, due - time.monotonic()))
        i = k % AGENTS
        report = AgentReport(node=node_name(i), seq=k + 1, agent_id=f"bench-{i}", sent_at=time.time(),
                             state="healthy", action="none", reason="healthy")  # fmt: skip
        try:
            posters[i](report)
            latencies.append((time.monotonic() - due) * 1000)
        except OSError:
            lost += 1
    stop.set()
    prober.join(10)
    for poster in posters:
        poster.close()
    return latencies, lost, probes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--half-open", type=int, default=5000)
    parser.add_argument("--slow-handshakes", type=int, default=500)
    parser.add_argument("--slow-bodies", type=int, default=256)
    parser.add_argument("--addresses", type=int, default=1, help="addresses the attack comes from (1: 127.0.0.1, "
                        "as one GPU node; more: many nodes, each under the per-address cap)")  # fmt: skip
    parser.add_argument("--identities", type=int, default=1, help="agent certificates the slow bodies present in "
                        "turn (1: one node's; 16 x 16 = 256 under the per-certificate cap)")  # fmt: skip
    parser.add_argument("--before", default="", help="a commit before issue 44 to run the same against")
    args = parser.parse_args()
    certificates(AGENTS + 1 + max(args.identities, 10))
    runs = [("before " + args.before, worktree(args.before))] if args.before else []
    runs.append(("this code", None))
    result: dict[str, float] = {}
    for name, pythonpath in runs:
        result = one_run(args, pythonpath)
        print(f"  {name}: served {result['served']:.1f}% of {int(args.seconds * RATE)} reports ({result['lost']:.0f} "
              f"lost), p99 {result['p99']:.0f} ms; probe p99 {result['probe_p99']:.0f} ms "
              f"({result['probe_failed']:.0f} unanswered in 5 s); attack connections open at the end: "
              f"{result['held']}", flush=True)  # fmt: skip
    print(f"api abuse: served {result['served']:.1f}% of reports, p99 {result['p99']:.0f} ms, probe p99 "
          f"{result['probe_p99']:.0f} ms")  # fmt: skip


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
