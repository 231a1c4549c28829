"""Benchmark: the controller's ingestion of agent reports at fleet scale (issue 43, line 2), on 127.0.0.1.

The real controller (`ha-ops controller run`, a process of its own) serves its API over mutual TLS; its state on
files in a folder on disk. Each node has its own certificate from a CA made here, and its own loopback address
(127.x.y.z: as many peers as nodes, each under the server's cap per address). Load generators, processes of their
own (12,500 nodes each: one process holds at most its open-files limit of connections), send each node's heartbeat
through the agent's own poster (ha_ops.health.poster.HttpPoster: one kept-alive connection per node) every
`--interval` s, spread evenly (an open loop: each report has a due time, and its latency is measured from that
time, so a generator or controller that falls behind shows it). First every node connects
and reports once, then one interval of heartbeats warms up (not measured); then `--seconds` of steady heartbeats
are measured:

- achieved rate, p50/p99 from due time to answer, errors (anything but 200, or no answer within the agent's 2 s);
- the controller's CPU ms per report (its /proc/PID/stat), bytes it wrote per second (/proc/PID/io write_bytes:
  what reached the disk's layer), and the state's size on disk (and its largest document);
- with `--find-max`: the rate raised in steps (the interval halved) for 15 s each until p99 passes 250 ms or a
  report fails: the highest rate held.

The scheduler is Slurm with `sinfo`/`squeue`/`scontrol` stand-ins on PATH that answer N idle nodes and no jobs
(25,000 slurmd are not what this measures: tests/bench/slurm_scale.py runs a real Slurm).

Run: .venv/bin/python tests/bench/ingest.py [--nodes 1500 5000 25000] [--seconds 60] [--find-max]
The last line: `ingest N nodes: X reports/s sustained, p99 Y ms, Z CPU ms per report, W bytes written per s`,
for the largest --nodes.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import resource
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ha_ops.health.poster import HttpPoster
from ha_ops.health.report import AgentReport
from ha_ops.remediation.heartbeats import Heartbeats, heartbeat_s
from ha_ops.security import tls
from ha_ops.security.pki import CertificateAuthority
from ha_ops.security.tls import ReloadingContext, TlsFiles
from tests.bench.controller import percentile
from tests.bench.k8s_cordon import free_port, loopback_address, stop_process

CERTS = Path("/tmp/ha-ops-ingest-certs")  # kept between runs: 25,000 certificates take a while to make
P99_GOAL_MS = 250.0
PER_GENERATOR = 12_500  # nodes per load generator process (each holds a connection per node)
THREADS = 48  # each generator's senders (each report waits for its answer; a node's reports go one at a time)


def node_name(i: int) -> str:
    return f"gpu{i:05d}"


def _issue(names: list[str]) -> None:
    ca = CertificateAuthority(CERTS)
    for name in names:
        ca.issue(name, name, groups=(tls.AGENTS,))


def certificates(count: int) -> None:
    """The CA, the controller's certificate and one per node (made in two processes; kept for the next run)."""
    ca = CertificateAuthority(CERTS)
    ca.ensure("ha-ops ingest bench CA")
    ca.issue("controller", "ingest", groups=("ha-ops:controllers",), server_names=("127.0.0.1",))
    missing = [node_name(i) for i in range(count) if not (CERTS / f"{node_name(i)}.key").exists()]
    if missing:
        started = time.monotonic()
        with ProcessPoolExecutor(2) as pool:
            list(pool.map(_issue, [missing[i::8] for i in range(8)]))
        print(f"  {len(missing)} node certificates made in {time.monotonic() - started:.0f} s", flush=True)


def files(name: str) -> TlsFiles:
    return TlsFiles(ca_file=CERTS / "ca.crt", cert_file=CERTS / f"{name}.crt", key_file=CERTS / f"{name}.key",
                    reload_s=3600)  # fmt: skip


def fake_slurm(folder: Path, count: int) -> Path:
    """sinfo, squeue and scontrol stand-ins: `count` idle nodes, no jobs, every update accepted."""
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    nodes = [{"name": node_name(i), "state": ["IDLE"], "reason": ""} for i in range(count)]
    (folder / "sinfo.json").write_text(json.dumps({"nodes": nodes}))
    answers = {"sinfo": f"cat {folder / 'sinfo.json'}", "squeue": "echo '{\"jobs\": []}'", "scontrol": "true"}
    for command, body in answers.items():
        (bin_dir / command).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / command).chmod(0o755)
    return bin_dir


def start_controller(folder: Path, count: int, port: int, pythonpath: str | None = None) -> subprocess.Popen:  # type: ignore[type-arg]
    """The controller as a process; `pythonpath`: another checkout's ha_ops (an earlier commit's, to compare)."""
    config = {
        "id": "ingest", "listen_address": "127.0.0.1", "port": port, "state_dir": str(folder / "state"),
        "scheduler": "slurm", "partition": "gpu",
        "pools": {"gpu": {"nodes": [node_name(i) for i in range(count)]}},
        "tls": json.loads(files("controller").model_dump_json()),
        "slurm_fence": {"enabled": False},
    }  # fmt: skip
    (folder / "controller.yaml").write_text(yaml.safe_dump(config))
    env = {**os.environ, "PATH": f"{fake_slurm(folder, count)}:{os.environ['PATH']}"}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    log = (folder / "controller.log").open("w")
    # (cwd: `-m` puts it first on sys.path, so another checkout's ha_ops is imported from there)
    return subprocess.Popen([sys.executable, "-m", "ha_ops", "controller", "run", "--config",
                             str(folder / "controller.yaml")], stdout=log, stderr=subprocess.STDOUT, env=env,
                            preexec_fn=_more_files, cwd=pythonpath)  # fmt: skip


def _more_files() -> None:
    """The open-files limit at its hard value (the controller does that itself too; a generator needs it)."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def proc_figures(pid: int) -> tuple[float, int]:
    """CPU seconds and bytes written so far by a process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    io = dict(line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())
    return cpu, int(io["write_bytes"])


# --- the load generators (processes of their own) ------------------------------------------------------------------
def generate(port: int, first: int, last: int, count: int, phases: list[tuple[float, float]]) -> None:
    """Nodes first..last-1 of `count` connect and report once; then, for each phase (interval s, seconds), once the
    parent writes the phase's start (a wall-clock time) on stdin, heartbeats on schedule (node i due at
    start + i/count * interval, then every interval). Prints one JSON line per phase: latencies (ms) and errors."""
    _more_files()
    url = f"https://127.0.0.1:{port}/v1/reports"
    mine = range(first, last)
    posters = {i: HttpPoster([url], 2.0, ReloadingContext(files(node_name(i)), server=False), loopback_address(i))
               for i in mine}  # fmt: skip
    seqs = dict.fromkeys(mine, 0)
    told: set[float] = set()  # the heartbeats the controller's answers asked for

    def send(i: int) -> str | None:
        seqs[i] += 1
        name = node_name(i)
        report = AgentReport(node=name, seq=seqs[i], agent_id=f"bench-{name}", sent_at=time.time(), state="healthy",
                             action="none", reason="healthy")  # fmt: skip
        try:
            told.add(posters[i](report).get("heartbeat_s", 0.0))
            return None
        except OSError as exc:
            return str(exc)[:200]

    def run(schedule: list[tuple[float, int]]) -> tuple[list[float], list[str]]:
        latencies: list[float] = []
        errors: list[str] = []
        cursor = iter(schedule)
        lock = threading.Lock()

        def worker() -> None:
            while True:
                with lock:
                    item = next(cursor, None)
                if item is None:
                    return
                due, i = item
                time.sleep(max(0.0, due - time.monotonic()))
                error = send(i)
                with lock:
                    (errors.append(error) if error else latencies.append((time.monotonic() - due) * 1000))

        threads = [threading.Thread(target=worker) for _ in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return latencies, errors

    started = time.monotonic()
    _, errors = run([(started, i) for i in mine])  # connect and report once, as fast as it goes
    print(json.dumps({"phase": "connect", "seconds": time.monotonic() - started, "errors": errors[:5],
                      "failed": len(errors), "told": sorted(told)}), flush=True)  # fmt: skip
    for interval, seconds in phases:
        start = time.monotonic() + float(sys.stdin.readline()) - time.time()
        schedule = sorted((start + (i / count) * interval + k * interval, i)
                          for k in range(max(1, round(seconds / interval))) for i in mine)  # fmt: skip
        latencies, errors = run([(due, i) for due, i in schedule if due < start + seconds])
        print(json.dumps({"phase": "done", "latencies": latencies, "errors": errors[:5], "failed": len(errors)}),
              flush=True)  # fmt: skip
    for poster in posters.values():
        poster.close()


# --- the benchmark -------------------------------------------------------------------------------------------------
def measure(count: int, seconds: float, interval: float | None, find_max: bool) -> dict[str, float]:
    certificates(count)
    with tempfile.TemporaryDirectory(dir="/var/tmp", prefix="ha-ops-ingest-") as tmp:
        folder = Path(tmp)
        port = free_port()
        controller = start_controller(folder, count, port)
        generators: list[subprocess.Popen] = []  # type: ignore[type-arg]
        try:
            _wait_leading(port, folder)
            # The heartbeat the controller asks of this fleet (remediation/heartbeats.py: 10 s up to 5,000 nodes,
            # then longer), unless --interval sets one.
            asked = heartbeat_s(count, Heartbeats())
            interval = interval or asked
            # A first interval not measured: every agent's connection kept since its first report (a connect phase
            # longer than the server's idle_s ends with the first connections closed, and their agents connect again).
            phases = [(interval, interval), (interval, seconds)]
            if find_max:
                phases += [(interval / 2**k, 15.0) for k in range(1, 6)]
            # (one process holds at most the open-files limit of connections: 20,000 on this machine)
            slices = -(-count // PER_GENERATOR)
            bounds = [(k * count // slices, (k + 1) * count // slices) for k in range(slices)]
            generators = [subprocess.Popen([sys.executable, __file__, "--generate", str(port), str(a), str(b),
                                            str(count), json.dumps(phases)], stdin=subprocess.PIPE,
                                           stdout=subprocess.PIPE, text=True) for a, b in bounds]  # fmt: skip
            connects = [json.loads(_line(g)) for g in generators]
            failed = sum(c["failed"] for c in connects)
            told = sorted({t for c in connects for t in c["told"]})
            print(f"  {count} nodes ({len(generators)} generator processes) connected and reported once in "
                  f"{max(c['seconds'] for c in connects):.1f} s ({failed} failed "
                  f"{[e for c in connects for e in c['errors']][:2]}); the controller's answers asked for a "
                  f"heartbeat of {told} s", flush=True)  # fmt: skip
            assert told == [asked], f"the controller asked for {told}, the bench expected {asked}"
            result: dict[str, float] = {}
            for phase_index, (phase_interval, phase_seconds) in enumerate(phases):
                start = time.time() + 1.0
                for g in generators:
                    assert g.stdin is not None
                    g.stdin.write(f"{start}\n")
                    g.stdin.flush()
                time.sleep(max(0.0, start - time.time()))
                began, (cpu0, written0) = time.monotonic(), proc_figures(controller.pid)
                dones = [json.loads(_line(g)) for g in generators]
                took = time.monotonic() - began
                cpu, written = proc_figures(controller.pid)
                event = {
                    "interval": phase_interval,
                    "seconds": phase_seconds,
                    "latencies": [x for d in dones for x in d["latencies"]],
                    "errors": [e for d in dones for e in d["errors"]],
                    "failed": sum(d["failed"] for d in dones),
                }
                figures = _figures(event, took, cpu - cpu0, written - written0)
                if phase_index == 0:
                    print(f"  (warm-up: {figures['rate']:.0f} reports/s, p99 {figures['p99']:.0f} ms, "
                          f"{figures['failed']:.0f} failed)", flush=True)  # fmt: skip
                    continue
                _print_phase(count, event, figures)
                if not result:
                    result = figures
                elif figures["p99"] <= P99_GOAL_MS and not event["failed"]:
                    result["max_rate"] = max(result.get("max_rate", 0.0), figures["rate"])
                if find_max and (figures["p99"] > P99_GOAL_MS or event["failed"]):
                    break
            result.setdefault("max_rate", result["rate"] if result["p99"] <= P99_GOAL_MS and not result["failed"]
                              else 0.0)  # fmt: skip
            state = folder / "state"
            sizes = [p.stat().st_size for p in state.rglob("*") if p.is_file()]
            result["state_bytes"], result["largest"] = float(sum(sizes)), float(max(sizes, default=0))
            print(f"  state on disk: {sum(sizes) / 1024:.0f} KiB in {len(sizes)} files, the largest "
                  f"{max(sizes, default=0) / 1024:.0f} KiB", flush=True)  # fmt: skip
            return result
        finally:
            for g in generators:
                g.kill()
                g.wait(30)
            if not stop_process(controller, 30):
                print("  (the controller did not stop within 30 s of SIGTERM: killed)")


def _line(generator: subprocess.Popen) -> str:  # type: ignore[type-arg]
    assert generator.stdout is not None
    line = generator.stdout.readline()
    if not line:
        raise SystemExit(f"a load generator ended (exit {generator.wait(30)})")
    return line


def _figures(event: dict, took: float, cpu_s: float, written: int) -> dict[str, float]:
    latencies = event["latencies"] or [0.0]
    served = len(event["latencies"])
    return {
        # (served over the time they took: a controller that falls behind serves the phase's reports late)
        "rate": served / max(took, event["seconds"]), "offered": 1 / event["interval"],
        "p50": percentile(latencies, 0.5), "p99": percentile(latencies, 0.99),
        "failed": float(event["failed"]), "cpu_ms": cpu_s * 1000 / max(1, served), "cpu_share": cpu_s / took,
        "written_per_s": written / took,
    }  # fmt: skip


def _print_phase(count: int, event: dict, f: dict[str, float]) -> None:
    print(f"  {count} nodes, heartbeat every {event['interval']:g} s ({count / event['interval']:.0f}/s offered): "
          f"{f['rate']:.0f} reports/s, p50 {f['p50']:.1f} ms p99 {f['p99']:.1f} ms, {f['failed']:.0f} failed "
          f"{event['errors'][:2]}; controller {f['cpu_ms']:.3f} CPU ms per report ({f['cpu_share'] * 100:.0f}% of a "
          f"core), {f['written_per_s']:.0f} bytes written per s", flush=True)  # fmt: skip


def _wait_leading(port: int, folder: Path) -> None:
    context = ReloadingContext(files(node_name(0)), server=False).get()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=2, context=context)
            conn.request("GET", "/healthz")
            if json.loads(conn.getresponse().read()).get("leader"):
                conn.close()
                return
            conn.close()
        except (OSError, ssl.SSLError, ValueError):
            pass
        time.sleep(0.3)
    raise SystemExit(f"the controller did not lead within 120 s: {(folder / 'controller.log').read_text()[-2000:]}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--generate":
        generate(*map(int, sys.argv[2:6]), [tuple(p) for p in json.loads(sys.argv[6])])  # type: ignore[call-arg]
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[1500, 5000, 25000])
    parser.add_argument("--seconds", type=float, default=60.0, help="steady heartbeats measured (default 60)")
    parser.add_argument("--interval", type=float, default=None, help="each node's heartbeat (default: what the "
                        "controller asks of the fleet in its answers, remediation/heartbeats.py)")  # fmt: skip
    parser.add_argument("--find-max", action="store_true", help="then raise the rate until p99 passes 250 ms")
    args = parser.parse_args()
    results = {}
    for count in args.nodes:
        results[count] = measure(count, args.seconds, args.interval, args.find_max)
        if args.find_max:
            print(f"  {count} nodes: highest rate with p99 <= {P99_GOAL_MS:.0f} ms and none failed: "
                  f"{results[count]['max_rate']:.0f} reports/s", flush=True)  # fmt: skip
    count = max(results)
    r = results[count]
    print(f"ingest {count} nodes: {r['rate']:.0f} reports/s sustained, p99 {r['p99']:.0f} ms, "
          f"{r['cpu_ms']:.2f} CPU ms per report, {r['written_per_s']:.0f} bytes written per s")  # fmt: skip


if __name__ == "__main__":
    main()
