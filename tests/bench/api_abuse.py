"""Benchmark: the controller's API under abuse from one hostile GPU node (issue 44, line 1), on 127.0.0.1 only.

The real controller (a process of its own, mutual TLS, the Slurm stand-ins of tests/bench/ingest.py) while an
attacker process, from one address (127.0.0.1, as a job on one GPU node would), holds `--half-open` TCP connections
that never start TLS, `--slow-handshakes` connections trickling a real ClientHello 1 byte every 5 s, and
`--slow-bodies` connections with a GPU node's certificate trickling a report 1 byte every 5 s, each opened again
when dropped. Meanwhile 200 agents (each its own certificate and loopback address, the agent's own poster) report
at 20 a second in all, and a health probe (a new connection each time, as a kubelet's) asks /healthz twice a second.
Printed: the share of reports served, their p99, the probe's p99, and how many attack connections were open; for
the code before issue 44 too (`--before REV`: that commit's controller, from a git worktree), beside it.

Run: .venv/bin/python tests/bench/api_abuse.py [--seconds 40] [--before bce008b]
The last line: `api abuse: served X% of reports, p99 Y ms, probe p99 Z ms`.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ha_ops.health.agent import HttpPoster
from ha_ops.health.report import AgentReport
from ha_ops.security.tls import ReloadingContext
from tests.bench.controller import percentile
from tests.bench.ingest import _more_files, _wait_leading, certificates, files, node_name, start_controller
from tests.bench.k8s_cordon import free_port, loopback_address, stop_process, worktree

AGENTS = 200
RATE = 20.0
TRICKLE_S = 5.0


def client_hello() -> bytes:
    """The first flight of a real TLS client (a ClientHello), to trickle."""
    context = ReloadingContext(files(node_name(0)), server=False).get()
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    with contextlib.suppress(ssl.SSLWantReadError):  # (it waits for the server's answer: the hello is out)
        tls.do_handshake()
    return outgoing.read()


# --- the attacker (a process of its own) ---------------------------------------------------------------------------
def attack(port: int, half_open: int, slow_handshakes: int, slow_bodies: int, seconds: float) -> None:
    _more_files()
    hello = client_hello()
    context = ReloadingContext(files(node_name(AGENTS)), server=False).get()  # (a GPU node's own certificate)
    body_head = (b"POST /v1/reports HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 100000\r\n\r\n")  # fmt: skip
    held: dict[str, list[list]] = {"half-open": [], "slow handshake": [], "slow body": []}  # [socket, bytes sent]
    wanted = {"half-open": half_open, "slow handshake": slow_handshakes, "slow body": slow_bodies}
    opened = dict.fromkeys(wanted, 0)

    def connect(kind: str) -> list | None:
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=1.0, source_address=("127.0.0.1", 0))
            if kind == "slow body":
                sock = context.wrap_socket(sock, server_hostname="127.0.0.1")
                sock.sendall(body_head)
            opened[kind] += 1
            return [sock, 0]
        except (OSError, ssl.SSLError):
            return None

    end = time.time() + seconds
    while time.time() < end:
        for kind, entries in held.items():
            entries[:] = [e for e in entries if e[0] is not None]
            while len(entries) < wanted[kind] and time.time() < end:
                entry = connect(kind)
                if entry is None:
                    break
                entries.append(entry)
        for kind in ("slow handshake", "slow body"):
            for entry in held[kind]:
                sock, sent = entry
                try:
                    if kind == "slow handshake":
                        sock.send(hello[sent % len(hello) : sent % len(hello) + 1])
                    else:
                        sock.send(b"{")
                    entry[1] += 1
                except (OSError, ssl.SSLError):
                    sock.close()
                    entry[0] = None  # dropped: opened again next round
        print(json.dumps({k: len([e for e in v if e[0] is not None]) for k, v in held.items()} | {"opened": opened}),
              flush=True)  # fmt: skip
        time.sleep(TRICKLE_S)
    for entries in held.values():
        for entry in entries:
            if entry[0] is not None:
                entry[0].close()


# --- the benchmark -------------------------------------------------------------------------------------------------
def one_run(args: argparse.Namespace, pythonpath: str | None) -> dict[str, float]:
    with tempfile.TemporaryDirectory(dir="/var/tmp", prefix="ha-ops-abuse-") as tmp:
        folder, port = Path(tmp), free_port()
        controller = start_controller(folder, AGENTS + 1, port, pythonpath)
        attacker = None
        try:
            _wait_leading(port, folder)
            attacker = subprocess.Popen([sys.executable, __file__, "--attack", str(port), str(args.half_open),
                                         str(args.slow_handshakes), str(args.slow_bodies), str(args.seconds + 20)],
                                        stdout=subprocess.PIPE, text=True)  # fmt: skip
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
    if len(sys.argv) > 1 and sys.argv[1] == "--attack":
        attack(*map(int, sys.argv[2:6]), float(sys.argv[6]))  # type: ignore[call-arg]
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--half-open", type=int, default=5000)
    parser.add_argument("--slow-handshakes", type=int, default=500)
    parser.add_argument("--slow-bodies", type=int, default=256)
    parser.add_argument("--before", default="", help="a commit before issue 44 to run the same against")
    args = parser.parse_args()
    certificates(AGENTS + 10)
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
