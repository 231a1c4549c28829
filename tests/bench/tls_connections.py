"""Benchmark: what a new mutually authenticated connection costs the controller's API server (ha_ops.util.http_front),
on 127.0.0.1: agents reconnecting after a controller restart or a failover each bring one.

The server runs in a process of its own (the real HttpFront with the controller's certificate, trivial routes); this
process opens `--connections` new connections from `--callers` threads, each with a node certificate of its own (the
ingestion bench's CA, tests/bench/ingest.py), sends one report-sized POST and closes. Printed: connections a second,
the server's CPU ms per connection (its /proc/PID/stat), and p50/p99 from connect to answer. Both run on this
machine, so the callers' own handshakes share its cores.

Run: .venv/bin/python tests/bench/tls_connections.py [--connections 1200] [--callers 32]
The last line: `tls connections: X/s, Y CPU ms per connection, p99 Z ms`.
"""

from __future__ import annotations

import argparse
import http.client
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ha_ops.security.tls import ReloadingContext
from tests.bench.controller import percentile
from tests.bench.ingest import certificates, files, node_name, proc_figures
from tests.bench.k8s_cordon import free_port, stop_process

SERVER = """
import signal, sys, threading
from tests.bench.ingest import files
from ha_ops.security.tls import ReloadingContext
from ha_ops.util.http_front import HttpFront, Limits, Response

class Routes:
    def early(self, method, path, headers, identity): return None
    def body_limit(self, path): return 100_000
    def handle(self, request): return Response(200, b'{"accepted": true}')

server = HttpFront(Routes(), "127.0.0.1", int(sys.argv[1]), ReloadingContext(files("controller"), server=True).get,
                   Limits())
signal.signal(signal.SIGTERM, lambda *_: server.shutdown())
thread = threading.Thread(target=server.serve_forever)
thread.start()
print("serving", flush=True)
thread.join()
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--connections", type=int, default=1200)
    parser.add_argument("--callers", type=int, default=32)
    args = parser.parse_args()
    certificates(args.connections)
    contexts = [ReloadingContext(files(node_name(i)), server=False).get() for i in range(args.connections)]
    port = free_port()
    repo = Path(__file__).resolve().parents[2]
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(port)], cwd=repo, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "serving"
        latencies: list[float] = []
        failed: list[str] = []
        lock = threading.Lock()
        pending = iter(range(args.connections))

        def caller() -> None:
            body = b'{"node": "x"}'.ljust(600)
            while True:
                with lock:
                    i = next(pending, None)
                if i is None:
                    return
                started = time.monotonic()
                conn = http.client.HTTPSConnection("127.0.0.1", port, context=contexts[i], timeout=30)
                try:
                    conn.request("POST", "/v1/reports", body, {"Content-Type": "application/json"})
                    conn.getresponse().read()
                    with lock:
                        latencies.append((time.monotonic() - started) * 1000)
                except OSError as exc:
                    with lock:
                        failed.append(str(exc))
                finally:
                    conn.close()

        cpu0, _ = proc_figures(server.pid)
        began = time.monotonic()
        threads = [threading.Thread(target=caller) for _ in range(args.callers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        took = time.monotonic() - began
        cpu1, _ = proc_figures(server.pid)
    finally:
        stop_process(server, 10)
    served = len(latencies)
    rate, cpu_ms = served / took, (cpu1 - cpu0) * 1000 / max(1, served)
    p50, p99 = percentile(latencies or [0.0], 0.5), percentile(latencies or [0.0], 0.99)
    print(f"  {served} of {args.connections} new connections in {took:.2f} s from {args.callers} callers "
          f"({len(failed)} failed {failed[:2]}); p50 {p50:.0f} ms")  # fmt: skip
    print(f"tls connections: {rate:.0f}/s, {cpu_ms:.2f} CPU ms per connection, p99 {p99:.0f} ms")


if __name__ == "__main__":
    main()
