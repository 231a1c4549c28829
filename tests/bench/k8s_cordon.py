"""Benchmark: fault to cordon on Kubernetes at scale, beside NVSentinel's published figures.

The lab's Kubernetes with 1,500 KWOK GPU nodes (examples/lab.yaml's 4 and 1,496 more) and the remediation controller
as a process (`ha-ops controller run`, the Kubernetes scheduler, its Lease and state in the API, the layer's
defaults otherwise). A load generator does what 150 (then 375) agents would do on finding an XID 79: each posts one
report and then, as the agent does once a controller accepted it, sets its node's GpuHealthy condition to False after
a random 0-2 s (the agent's `unhealthy_jitter_s`: the controller's cordons reach the API server first); all at once,
or each after a random 0-30 s delay (NVSentinel's stagger). A watch on the Nodes records when each node reads
unschedulable in the API.

Fault-to-cordon here is from the moment the agent acts (its report leaves it) to the cordon being visible in the
API. The agent's own detection is measured apart (tests/bench/agent_drain.py: within one 1 s sweep).

The safety limits are set to allow the storm (a real storm of this size trips the breaker by default, on purpose):
    safety: {breaker_max_nodes: 400, breaker_max_fraction: 0.3, max_cordons_per_minute: 1000}

NVSentinel v0.4.0, 150 of 1,500 nodes with the 0-30 s stagger: P50 16.75 s, P90 28.15 s, about 1-2.5 nodes/s;
375 nodes: P50 91 s (shared/REFERENCE-NUMBERS.md).

Run (root): .venv/bin/python tests/bench/k8s_cordon.py [--nodes 1500] [--failing 150 375] [--parallel 16]
  [--code bce008b this --repeat 3]: another commit's controller beside this one, in turn on the same lab
The last line is `k8s cordon 150/1500: p50 X s p90 Y s p99 Z s, N nodes/s` (the first --failing, no stagger).
At 25,000 nodes (issue 43): --nodes 25000 --failing 250 --arrival at-once.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from lightkube import Client
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import ConfigMap, Node

from ha_ops.health.config import KubernetesCondition
from ha_ops.health.poster import HttpPoster
from ha_ops.health.report import AgentReport
from ha_ops.lab import kubernetes
from ha_ops.lab.cluster import Lab
from ha_ops.lab.paths import LabPaths
from ha_ops.schedulers.kubernetes import (
    UNSCHEDULABLE_TAINT_KEY,
    KubernetesOptions,
    KubernetesScheduler,
    set_gpu_condition,
)
from ha_ops.spec.model import Kubernetes
from ha_ops.util.wait import wait_for
from tests.bench.controller import percentile, report
from tests.bench.kwok_scale import control_plane_usage
from tests.labkit import down_or_exit, lab_spec

NAME = "benchcordon"
NAMESPACE = "default"
SAFETY = {"breaker_max_nodes": 400, "breaker_max_fraction": 0.3, "max_cordons_per_minute": 1000}
STAGGER_S = 30.0
CONDITION_JITTER_S = KubernetesCondition().unhealthy_jitter_s  # the agent's default
PARALLEL = 16  # drains at once: the default


def controller_config(lab: Lab, nodes: list[str], run: str, port: int, parallel: int = PARALLEL) -> dict:
    """The layer's controller config (k8s_manifests.controller_config) for a process: its own Lease and state
    names per run, so each run starts from nothing."""
    return {
        "id": f"bench-{run}", "listen_address": "127.0.0.1", "port": port,
        "scheduler": "kubernetes", "partition": "gpu",
        # Plain HTTP on 127.0.0.1, meant: this measures the decisions and the API server's writes (the cost of
        # mutual TLS is tls_connections.py's and ingest.py's)
        "insecure": True,
        "kubernetes": {"kubeconfig": str(kubernetes.kubeconfig_path(lab.ctx)),
                       "lease": {"namespace": NAMESPACE, "name": f"bench-{run}"},
                       "state": {"namespace": NAMESPACE, "prefix": f"bench-{run}"}},
        "pools": {"gpu": {"nodes": nodes}},
        "safety": SAFETY,
        "parallel_actions": parallel,
    }  # fmt: skip


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def stop_process(proc: subprocess.Popen, grace_s: float) -> bool:  # type: ignore[type-arg]
    """SIGTERM, then SIGKILL after `grace_s`; whether it stopped of itself."""
    proc.terminate()
    try:
        proc.wait(grace_s)
        return True
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
        return False


def loopback_address(index: int) -> str:
    """A loopback address of its own for agent `index` (127.0.0.0/8 is all this host's; none ends in .0 or .255)."""
    a, b, c = index // (254 * 254), (index // 254) % 254, index % 254
    return f"127.{1 + a}.{1 + b}.{1 + c}"


def post(url: str, report: AgentReport, index: int) -> None:
    """`report` as the agent of node `index` sends it (its poster), from an address of its own: the API caps the
    connections from one address, and each of a fleet's agents has its own."""
    poster = HttpPoster([url], 30.0, source_address=loopback_address(index))
    try:
        poster(report)
    finally:
        poster.close()


def watch_cordons(api: Client, seen: dict[str, float], stop: threading.Event) -> None:
    """When each node first reads unschedulable, as a client watching the API sees it (a watch of cordoned nodes
    only: a watch of all 1,500 would measure this process parsing them)."""
    while not stop.is_set():
        try:
            for _, node in api.watch(Node, fields={"spec.unschedulable": "true"}):
                if node.metadata and node.metadata.name not in seen:
                    seen[str(node.metadata.name)] = time.time()
                if stop.is_set():
                    return
        except Exception:  # a watch that timed out or broke: start another
            time.sleep(0.1)


def worktree(rev: str) -> str:
    """A checkout of commit `rev` (made once, in /tmp), whose controller a benchmark runs beside this code's."""
    path = Path(tempfile.gettempdir()) / f"ha-ops-at-{rev}"
    if not path.exists():
        subprocess.run(["git", "worktree", "add", "--detach", str(path), rev], check=True, capture_output=True,
                       cwd=Path(__file__).resolve().parents[2])  # fmt: skip
    return str(path)


def one_run(lab: Lab, api: Client, nodes: list[str], failing: int, stagger: bool, tmp: Path,
            parallel: int = PARALLEL, condition_jitter_s: float = CONDITION_JITTER_S,
            checkout: str | None = None) -> dict[str, float]:  # fmt: skip
    """One storm; `checkout`: another checkout's controller (`-m` from its folder imports its ha_ops)."""
    run = f"{failing}-{'s' if stagger else 'n'}-{int(time.time())}"
    config = tmp / f"{run}.yaml"
    port = free_port()
    settings = controller_config(lab, nodes, run, port, parallel)
    if checkout and "insecure:" not in (Path(checkout) / "ha_ops/remediation/config.py").read_text():
        del settings["insecure"]  # (a controller from before it was secure by default: plain HTTP without asking)
    config.write_text(yaml.safe_dump(settings))
    log = (tmp / f"{run}.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "ha_ops", "controller", "run", "--config", str(config)],
                            stdout=log, stderr=subprocess.STDOUT, cwd=checkout)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        # (25,000 nodes: its first list of the Nodes, through an API server that serves 40 drains a second, takes
        # minutes, not seconds)
        startup_s = max(60.0, len(nodes) / 50)
        wait_for("the controller leading", lambda: _leading(url), timeout=startup_s, interval=0.2)
        # As a controller that has run a while: its watches of the nodes and pods have their first lists in.
        wait_for("the controller's watches listed", lambda: _watches_synced(url), timeout=startup_s, interval=0.2)
        # And its takeover's background write of the node records done (a fleet over PRELOAD_AT_TAKEOVER nodes):
        # at 10,000 nodes that write's ConfigMap POSTs ran during the storm and skewed it.
        wait_for("the controller's records written", lambda: _records_written(url), timeout=startup_s, interval=0.5)
        victims = random.Random(failing).sample(nodes, failing)
        delays = {n: random.uniform(0, STAGGER_S) if stagger else 0.0 for n in victims}
        seen: dict[str, float] = {}
        stop = threading.Event()
        watcher = threading.Thread(target=watch_cordons, args=(api, seen, stop), daemon=True)
        watcher.start()
        time.sleep(1.0)  # the watch established
        before = api_requests(lab)
        sent: dict[str, float] = {}
        conditioned: dict[str, float] = {}  # each agent's condition written
        answered: dict[str, float] = {}  # its report answered (the decision written)
        start = time.time()

        def agent(node: str) -> None:
            # As the agent on a Kubernetes node acts on a fault (health/agent.py): its report, then, the report
            # accepted, its node's GpuHealthy condition after a random 0-unhealthy_jitter_s.
            time.sleep(max(0.0, start + delays[node] - time.time()))
            sent[node] = time.time()
            body = report(node, 1, True).model_copy(update={"agent_id": f"agent-{node}", "sent_at": time.time()})
            post(f"{url}/v1/reports", body, victims.index(node))
            answered[node] = time.time()
            time.sleep(random.uniform(0.0, condition_jitter_s))
            set_gpu_condition(api, node, "False", body.reason)
            conditioned[node] = time.time()

        with ThreadPoolExecutor(max_workers=failing) as pool:
            list(pool.map(agent, victims))
        wait_for(f"{failing} nodes cordoned", lambda: set(victims) <= set(seen), timeout=300, interval=0.2)
        stop.set()
        during = api_requests(lab) - before
        busiest = ", ".join(f"{what} {n}" for what, n in during.most_common(8))
        print(f"  API requests from the first report to the last cordon and the agents' conditions: {busiest}",
              flush=True)  # fmt: skip
        latencies = [seen[n] - sent[n] for n in victims]
        first, last = min(sent.values()), max(seen[n] for n in victims)
        return {
            "p50": percentile(latencies, 0.5), "p90": percentile(latencies, 0.9), "p99": percentile(latencies, 0.99),
            "mean": statistics.fmean(latencies), "rate": failing / (last - first) if not stagger else 0.0,
            "span": last - first,
            "condition_p50": percentile([conditioned[n] - sent[n] for n in victims], 0.5),
            "answered_p50": percentile([answered[n] - sent[n] for n in victims], 0.5),
            "answered_p99": percentile([answered[n] - sent[n] for n in victims], 0.99),
        }  # fmt: skip
    finally:
        if not stop_process(proc, 30):
            print("  (the controller did not stop within 30 s of SIGTERM: killed)")
        log.close()
        # Every node the run took out returned (the cordoned ones only: one list, not a read of all 1,500).
        scheduler = KubernetesScheduler(api, KubernetesOptions(pool="gpu"))
        cordoned = [str(n.metadata.name) for n in api.list(Node, fields={"spec.unschedulable": "true"}) if n.metadata]
        with ThreadPoolExecutor(max_workers=16) as pool:
            list(pool.map(scheduler.resume, cordoned))
        for cm in api.list(ConfigMap, namespace=NAMESPACE, labels={"ha-ops.io/state": f"bench-{run}"}):
            api.delete(ConfigMap, str(cm.metadata.name), namespace=NAMESPACE)  # type: ignore[union-attr]
        api.delete(Lease, f"bench-{run}", namespace=NAMESPACE)


def api_alone(api: Client, nodes: list[str], count: int) -> str:
    """The API server's own ceiling here, with no controller: `count` nodes drained by PARALLEL writers through the
    same adapter (a cordon PATCH and a condition PATCH each, as the controller writes them), then cordon PATCHes
    alone; every node returned after each."""
    scheduler = KubernetesScheduler(api, KubernetesOptions(pool="gpu"))
    targets = nodes[:count]
    out = []
    for what, act in (("drains (cordon + condition)", lambda n: scheduler.drain(n, "ha-ops: bench api alone")),
                      ("cordon PATCHes", lambda n: api.patch(Node, n, {"spec": {"unschedulable": True}}))):  # fmt: skip
        settle(api)
        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
            list(pool.map(act, targets))
        took = time.monotonic() - started
        out.append(f"{count} {what} in {took:.2f} s, {count / took:.0f} nodes/s")
        with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
            list(pool.map(lambda n: api.patch(Node, n, {"spec": {"unschedulable": None}}), targets))
            list(pool.map(scheduler.resume, targets))
    settle(api)
    return f"  API server alone, {PARALLEL} writers: " + "; ".join(out)


REQUEST = re.compile(r"^apiserver_request_total\{([^}]*)\} ([0-9.e+]+)$")


def api_requests(lab: Lab) -> Counter[str]:
    """The API server's requests so far by verb, resource and subresource (its own metrics, as kubectl reads them)."""
    text = subprocess.run(["kubectl", f"--kubeconfig={kubernetes.kubeconfig_path(lab.ctx)}", "get", "--raw",
                           "/metrics"], capture_output=True, text=True, timeout=60, check=True).stdout  # fmt: skip
    counts: Counter[str] = Counter()
    for line in text.splitlines():
        found = REQUEST.match(line)
        if found:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', found.group(1)))
            what = f"{labels.get('verb')} {labels.get('resource')}" + (
                f"/{labels['subresource']}" if labels.get("subresource") else ""
            )
            counts[what] += int(float(found.group(2)))
    return counts


def kcm_backlog(api: Client) -> int:
    """The node writes kube-controller-manager still owes: a `not-ready` taint on a Ready node (every KWOK node
    registers not Ready; the lab's 1,500 take it minutes to clear, at a few writes a second), or an `unschedulable`
    taint that does not match the node's cordon. Measured with that backlog, a storm would compete with it: a
    steady cluster has none."""
    owed = 0
    for node in api.list(Node):
        taints = {t.key for t in (node.spec.taints if node.spec and node.spec.taints else [])}
        conditions = node.status.conditions if node.status and node.status.conditions else []
        ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
        cordoned = bool(node.spec and node.spec.unschedulable)
        stale = ready and "node.kubernetes.io/not-ready" in taints
        owed += stale or cordoned != (UNSCHEDULABLE_TAINT_KEY in taints)
    return owed


def settle(api: Client, nodes: int = 1500) -> None:
    started = time.monotonic()
    # (25,000 nodes: 820 s on an idle machine, over 900 s beside other work)
    wait_for("kube-controller-manager's node writes done", lambda: kcm_backlog(api) == 0,
             timeout=max(900.0, nodes * 0.08), interval=5)  # fmt: skip
    print(f"  kube-controller-manager settled (no node write owed) after {time.monotonic() - started:.0f} s",
          flush=True)  # fmt: skip


def _leading(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/v1/state", timeout=2) as answer:
            return json.loads(answer.read()).get("state") is not None
    except OSError:
        return False


def _metric_lines(url: str, name: str) -> list[str]:
    with urllib.request.urlopen(f"{url}/metrics", timeout=2) as answer:
        return [line for line in answer.read().decode().splitlines() if line.startswith(name)]


def _watches_synced(url: str) -> bool:
    lines = _metric_lines(url, "ha_ops_controller_watch_synced")
    return bool(lines) and all(line.endswith(" 1.0") for line in lines)


def _records_written(url: str) -> bool:
    """None left to write; or a controller from before the metric (--code of an earlier commit), which it leads."""
    lines = _metric_lines(url, "ha_ops_controller_records_unwritten{")
    return all(line.endswith(" 0.0") for line in lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1500)
    parser.add_argument("--failing", type=int, nargs="+", default=[150, 375])
    parser.add_argument("--keep", action="store_true", help="leave the lab up (and reuse one that is)")
    parser.add_argument("--parallel", type=int, default=PARALLEL, help="the controller's parallel_actions")
    parser.add_argument("--arrival", choices=("both", "at-once", "stagger"), default="both",
                        help="the reports all at once, over 0-30 s, or both (the default)")  # fmt: skip
    parser.add_argument("--condition-jitter", type=float, default=CONDITION_JITTER_S,
                        help="the agents' unhealthy_jitter_s (default: the agent's)")  # fmt: skip
    parser.add_argument("--code", nargs="+", default=["this"], metavar="REV",
                        help="whose controller: `this` (the working tree) and/or commits, each run in turn on the "
                        "same lab, --repeat times (a comparison on one lab at one hour)")  # fmt: skip
    parser.add_argument("--repeat", type=int, default=1, help="each storm this many times per --code")
    args = parser.parse_args()
    checkouts = {rev: None if rev == "this" else worktree(rev) for rev in args.code}
    spec = lab_spec(NAME)
    gpu_nodes = sum(p.count for p in spec.pools)
    kube = Kubernetes(extra_kwok_nodes=args.nodes - gpu_nodes)
    spec = spec.model_copy(update={"kubernetes": kube, "firewall": None})  # (the firewall knows no Kubernetes flows)
    lab = Lab(spec, LabPaths.for_lab(NAME))
    tmp = Path(f"/tmp/{NAME}")
    tmp.mkdir(exist_ok=True)
    results: dict[tuple[int, bool], dict[str, float]] = {}
    try:
        started = time.monotonic()
        lab.up(timeout=max(900, args.nodes * 0.12))  # (25,000 nodes: registered and Ready in minutes)
        print(f"lab up with {args.nodes} KWOK GPU nodes in {time.monotonic() - started:.0f} s", flush=True)
        with kubernetes.client(lab.ctx, timeout=60) as api:
            nodes = sorted(kubernetes.ready_nodes(api))
            settle(api, len(nodes))
            print(control_plane_usage(lab, len(nodes)), flush=True)
            print(api_alone(api, nodes, 150), flush=True)
            arrivals = {"both": (True, False), "at-once": (False,), "stagger": (True,)}[args.arrival]
            for failing, stagger, _, rev in itertools.product(args.failing, arrivals, range(args.repeat), args.code):
                settle(api)
                r = one_run(lab, api, nodes, failing, stagger, tmp, args.parallel, args.condition_jitter,
                            checkouts[rev])  # fmt: skip
                if rev == args.code[-1]:
                    results[(failing, stagger)] = r
                what = ("0-30 s stagger" if stagger else "all at once") + ("" if rev == "this" else f", code {rev}")
                rate = f", {r['rate']:.0f} nodes/s" if not stagger else ""
                print(f"  {failing}/{len(nodes)} {what}: p50 {r['p50']:.2f} s p90 {r['p90']:.2f} s "
                      f"p99 {r['p99']:.2f} s{rate} (last cordon {r['span']:.1f} s after the first report; "
                      f"the agents' condition written p50 {r['condition_p50']:.2f} s, their reports answered "
                      f"p50 {r['answered_p50']:.2f} s p99 {r['answered_p99']:.2f} s)", flush=True)  # fmt: skip
    finally:
        if not args.keep:
            down_or_exit(lab)
    print("NVSentinel v0.4.0 (150/1,500, 0-30 s stagger): P50 16.75 s, P90 28.15 s, 1-2.5 nodes/s; 375 nodes: P50 91 s")
    main_run = results.get((args.failing[0], False))
    if main_run:
        print(f"k8s cordon {args.failing[0]}/{args.nodes}: p50 {main_run['p50']:.2f} s p90 {main_run['p90']:.2f} s "
              f"p99 {main_run['p99']:.2f} s, {main_run['rate']:.0f} nodes/s")  # fmt: skip


if __name__ == "__main__":
    main()
