"""Benchmark: a storm on a Slurm of 1,000+ nodes, fault to drained (issue 43).

Slurm: the lab's own (Debian 12's 22.05): a real slurmctld with every node in slurm.conf, and a real slurmd for each
node, all on 127.0.0.1, each on a port of its own (`slurmd -N <node>`, as the lab starts them), so the nodes register,
answer pings, read IDLE and take drains as a real cluster's do (about 7 MiB of memory each). (Debian's
`slurm-wlm-emulator` does not run here: its slurmctld, built with --enable-front-end, stops with "No front end nodes
defined", while the shared libslurm it loads, built without, stops on FrontendName in slurm.conf.) munged, slurmctld
and the slurmds run under a folder of their own and are stopped by PID.

The remediation controller runs as a process (`ha-ops controller run`, the Slurm scheduler through this host's
scontrol/sinfo/squeue, its state on files), as on a Slurm controller host. A load generator posts, at once, the
report an agent sends on an XID 79 for each of the failing nodes; a poller (`sinfo -t drain`, every 50 ms) records
when each node first reads drained in Slurm.

The safety limits are set to allow the storm (a real storm of this size trips the breaker by default, on purpose):
    safety: {breaker_max_nodes: 400, breaker_max_fraction: 0.3, max_cordons_per_minute: 1000}

Run (root): .venv/bin/python tests/bench/slurm_scale.py [--nodes 1000] [--failing 100] [--trials 3]
The last line is `slurm drain 100/N: p50 X s p99 Y s, R nodes/s` (the trials' drains together).
"""

from __future__ import annotations

import argparse
import os
import random
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ha_ops.schedulers.slurm import expand_hostlist
from ha_ops.util.wait import wait_for
from tests.bench.controller import percentile, report
from tests.bench.k8s_cordon import _leading, free_port, post, stop_process

SAFETY = {"breaker_max_nodes": 400, "breaker_max_fraction": 0.3, "max_cordons_per_minute": 1000}
POLL_S = 0.05
SLURMD_PORTS = 21001  # the first node's slurmd port; one port a node from there


def node_names(count: int) -> list[str]:
    return [f"bench{i:05d}" for i in range(1, count + 1)]


def slurm_conf(work: Path, nodes: int, ctld_port: int, slurmd_port: int) -> str:
    return "\n".join([
        "ClusterName=bench",
        f"SlurmctldHost={socket.gethostname().split('.')[0]}(127.0.0.1)",
        "SlurmUser=root", "SlurmdUser=root",
        "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={work / 'munge.socket'}",
        f"StateSaveLocation={work / 'state'}", f"SlurmdSpoolDir={work / 'spool' / '%n'}",
        f"SlurmctldPidFile={work / 'slurmctld.pid'}", f"SlurmdPidFile={work / 'spool' / '%n.pid'}",
        f"SlurmctldLogFile={work / 'slurmctld.log'}", f"SlurmdLogFile={work / 'spool' / '%n.log'}",
        f"SlurmctldPort={ctld_port}", "SlurmdDebug=error",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none", "SelectType=select/linear", "MpiDefault=none",
        "ReturnToService=2", "MailProg=/bin/true",
        "SlurmdTimeout=300", "SlurmctldTimeout=30",
        "SlurmdParameters=config_overrides",  # (the CPUs and memory slurm.conf says, not this host's)
        f"NodeName=bench[00001-{nodes:05d}] NodeHostname=localhost NodeAddr=127.0.0.1 "
        f"Port=[{slurmd_port}-{slurmd_port + nodes - 1}] CPUs=8 RealMemory=1000 State=UNKNOWN",
        "PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
    ]) + "\n"  # fmt: skip


class SlurmEmulator:
    """munged, slurmctld and the front-end slurmd, started and stopped by PID."""

    def __init__(self, work: Path, nodes: int) -> None:
        self.work, self.nodes = work, nodes
        self.procs: list[subprocess.Popen[bytes]] = []
        self.conf = work / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

    def start(self) -> None:
        for sub in ("state", "spool", "munge"):
            (self.work / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(self.work / "munge", 0o700)
        key = self.work / "munge" / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        os.chmod(key, 0o400)
        self.conf.write_text(slurm_conf(self.work, self.nodes, free_port(), SLURMD_PORTS))
        munge = self.work / "munge"
        self._spawn(["/usr/sbin/munged", "--foreground", "--force", f"--socket={self.work / 'munge.socket'}",
                     f"--key-file={key}", f"--pid-file={munge / 'munged.pid'}", f"--seed-file={munge / 'seed'}",
                     f"--log-file={self.work / 'munged.log'}"])  # fmt: skip
        wait_for("munged", lambda: (self.work / "munge.socket").is_socket(), timeout=10, interval=0.05)
        self._spawn(["/usr/sbin/slurmctld", "-D", "-i", "-f", str(self.conf)])
        wait_for("slurmctld answering", lambda: self.run(["scontrol", "ping"]).returncode == 0, timeout=60)
        for name in node_names(self.nodes):
            (self.work / "spool" / name).mkdir()
            self._spawn(["/usr/sbin/slurmd", "-D", "-f", str(self.conf), "-N", name], quiet=True)
        wait_for(f"{self.nodes} nodes idle", lambda: self.idle() == self.nodes, timeout=600, interval=2)

    def _spawn(self, argv: list[str], quiet: bool = False) -> None:
        out = subprocess.DEVNULL if quiet else (self.work / f"{Path(argv[0]).name}.out").open("wb")
        self.procs.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=self.env))

    def run(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, capture_output=True, text=True, env=self.env, timeout=60, check=False)

    def idle(self) -> int:
        out = self.run(["sinfo", "-h", "-t", "idle", "-o", "%D"]).stdout.split()
        return sum(int(n) for n in out)

    def drained(self) -> set[str]:
        out = self.run(["sinfo", "-h", "-t", "drain", "-o", "%N"]).stdout.split()
        return {name for expression in out for name in expand_hostlist(expression)}

    def resume_all(self) -> None:
        drained = sorted(self.drained())
        for start in range(0, len(drained), 256):
            self.run(["scontrol", "update", f"NodeName={','.join(drained[start : start + 256])}", "State=RESUME"])

    def stop(self) -> None:
        for proc in reversed(self.procs):
            stop_process(proc, 15)


def controller_config(work: Path, names: list[str], port: int, run: int) -> dict:
    return {
        "id": f"bench-{run}", "listen_address": "127.0.0.1", "port": port, "scheduler": "slurm", "partition": "gpu",
        "state_dir": str(work / f"controller-{run}"), "pools": {"gpu": {"nodes": names}}, "safety": SAFETY,
        "slurm_fence": {"enabled": False},  # one controller, nothing to fence
        "insecure": True,  # plain HTTP on 127.0.0.1, meant: this measures Slurm's side
    }  # fmt: skip


def one_run(slurm: SlurmEmulator, names: list[str], failing: int, run: int) -> tuple[list[float], float]:
    port = free_port()
    config = slurm.work / f"controller-{run}.yaml"
    config.write_text(yaml.safe_dump(controller_config(slurm.work, names, port, run)))
    log = (slurm.work / f"controller-{run}.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "ha_ops", "controller", "run", "--config", str(config)],
                            stdout=log, stderr=subprocess.STDOUT, env=slurm.env)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for("the controller leading", lambda: _leading(url), timeout=60, interval=0.2)
        time.sleep(2.0)  # its first node-state poll and ticks behind it
        victims = random.Random(run).sample(names, failing)
        seen: dict[str, float] = {}
        sent: dict[str, float] = {}
        answered: dict[str, float] = {}  # each report answered: its decision written

        def agent(node: str) -> None:
            sent[node] = time.time()
            body = report(node, 1, True).model_copy(update={"agent_id": f"agent-{node}", "sent_at": sent[node]})
            post(f"{url}/v1/reports", body, victims.index(node))
            answered[node] = time.time()

        with ThreadPoolExecutor(max_workers=failing) as pool:
            futures = [pool.submit(agent, n) for n in victims]
            deadline = time.time() + 300
            while not set(victims) <= set(seen) and time.time() < deadline:
                now = time.time()
                for name in slurm.drained():
                    seen.setdefault(name, now)
                time.sleep(POLL_S)
            for future in futures:
                future.result()
        missing = set(victims) - set(seen)
        if missing:
            raise SystemExit(f"{len(missing)} nodes never drained, e.g. {sorted(missing)[:5]}")
        latencies = [seen[n] - sent[n] for n in victims]
        span = max(seen[n] for n in victims) - min(sent.values())
        answers = [answered[n] - sent[n] for n in victims]
        print(f"  reports answered (decided and written) p50 {percentile(answers, 0.5):.2f} s "
              f"p99 {percentile(answers, 0.99):.2f} s", flush=True)  # fmt: skip
        return latencies, failing / span
    finally:
        stop_process(proc, 30)
        log.close()
        slurm.resume_all()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--failing", type=int, default=100)
    parser.add_argument("--trials", type=int, default=3)
    args = parser.parse_args()
    names = node_names(args.nodes)
    work = Path(tempfile.mkdtemp(prefix="haops-slurmscale-"))
    slurm = SlurmEmulator(work, args.nodes)
    started = time.monotonic()
    all_latencies: list[float] = []
    rates = []
    try:
        slurm.start()
        print(f"Slurm up with {args.nodes} nodes idle in {time.monotonic() - started:.0f} s ({work})",
              flush=True)  # fmt: skip
        read = time.monotonic()
        slurm.run(["sinfo", "--json"])
        print(f"  one `sinfo --json` of {args.nodes} nodes: {time.monotonic() - read:.2f} s", flush=True)
        for run in range(1, args.trials + 1):
            latencies, rate = one_run(slurm, names, args.failing, run)
            all_latencies += latencies
            rates.append(rate)
            print(f"  trial {run}: {args.failing}/{args.nodes} drained p50 {percentile(latencies, 0.5):.2f} s "
                  f"p99 {percentile(latencies, 0.99):.2f} s max {max(latencies):.2f} s, {rate:.0f} nodes/s",
                  flush=True)  # fmt: skip
    finally:
        slurm.stop()
    rate = sorted(rates)[len(rates) // 2]
    print(f"slurm drain {args.failing}/{args.nodes}: p50 {percentile(all_latencies, 0.5):.2f} s "
          f"p99 {percentile(all_latencies, 0.99):.2f} s, {rate:.0f} nodes/s")  # fmt: skip


if __name__ == "__main__":
    main()
