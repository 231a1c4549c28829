"""Shared helpers for lab tests and benchmarks: a lab under a test-only name, and leftover detection."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ha_ops.lab.cluster import Lab, netns_prefix, pids_naming
from ha_ops.lab.mgmt import root_interface
from ha_ops.lab.netns import list_with_prefix
from ha_ops.lab.paths import LabPaths
from ha_ops.lab.process import cmdline
from ha_ops.spec import ClusterSpec, load_spec

REPO = Path(__file__).resolve().parents[1]
LAB_SPEC = REPO / "examples" / "lab.yaml"


def lab_spec(name: str) -> ClusterSpec:
    """The example lab under another name, so tests never touch a developer's own lab."""
    return load_spec(LAB_SPEC).model_copy(update={"name": name})


def make_lab(name: str) -> Lab:
    return Lab(lab_spec(name), LabPaths.for_lab(name))


def leftovers(name: str) -> list[str]:
    """Everything of lab `name` still present: namespaces, processes naming its folder, mounts."""
    found = [f"namespace {ns}" for ns in list_with_prefix(netns_prefix(name))]
    if Path(f"/sys/class/net/{root_interface(name)}").exists():  # the management network's end on this machine
        found.append(f"interface {root_interface(name)}")
    root = str(LabPaths.for_lab(name).root)
    for pid in pids_naming(Path(root)):
        command = cmdline(pid) or ["?"]
        found.append(f"process {pid}: {' '.join(command)[:120]}")
    for line in Path("/proc/mounts").read_text().splitlines():
        if netns_prefix(name) in line or root in line:
            found.append(f"mount {line}")
    if Path(root).exists():
        found.append(f"directory {root}")
    return found


@contextmanager
def running_lab(lab: Lab) -> Iterator[Lab]:
    """The lab built from nothing (a run killed earlier may have left one behind) and removed afterwards with
    nothing of it left, also when `up` fails half way: a failed fixture must not leave daemons running for the
    rest of the suite."""
    lab.down()
    try:
        lab.up()
        yield lab
    finally:
        lab.down()
    assert leftovers(lab.spec.name) == []


def down_or_exit(lab: Lab) -> None:
    """For benchmarks: take the lab down and stop with an error if anything of it is left."""
    lab.down()
    left = leftovers(lab.spec.name)
    if left:
        raise SystemExit(f"leftovers after down: {left}")


# --- the remediation controllers in a lab ------------------------------------------------------------------


def controller_nodes(lab: Lab) -> list[str]:
    return [n.name for n in lab.ctx.layout.nodes_with_role("controller")]


def controller_url(lab: Lab, node: str) -> str:
    assert lab.spec.remediation is not None
    scheme = "https" if lab.spec.remediation.tls else "http"
    return f"{scheme}://{lab.ctx.layout.node(node).address}:{lab.spec.remediation.port}"


def target(lab: Lab) -> dict[str, str]:
    """The experiment configuration that names this lab (what chaos actions and probes take)."""
    return {"ha_ops_target": f"lab:{lab.spec.name}"}


def cluster(lab: Lab):  # -> LabCluster
    """The lab behind the cluster port (what the fault journal and the game day take)."""
    from ha_ops.cluster.lab import LabCluster

    return LabCluster(lab)


@dataclass(frozen=True)
class OverSsh:
    """The lab reached as a real cluster: the inventory `ha-ops lab inventory --ssh` writes, and an environment
    whose XDG state home (where `--inventory` runs keep their fault journal) is the test's own."""

    inventory: Path
    env: dict[str, str]

    def ha_ops(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "ha_ops", *args], capture_output=True, text=True,
                              timeout=timeout, env=self.env)  # fmt: skip


def over_ssh(lab: Lab, folder: Path) -> OverSsh:
    inventory = folder / "inventory.yml"
    subprocess.run([sys.executable, "-m", "ha_ops", "lab", "inventory", "--ssh", "--lab", lab.spec.name, "--out",
                    str(inventory)], check=True, capture_output=True, timeout=60)  # fmt: skip
    return OverSsh(inventory, {**os.environ, "XDG_STATE_HOME": str(folder / "state")})


def leader(lab: Lab) -> str | None:
    """The controller whose /healthz says it leads (None while nobody does)."""
    from ha_ops.chaos.probes import remediation_leader

    found = remediation_leader(target(lab))
    return None if found == "none" else found


def call_controller(
    lab: Lab, node: str, path: str, body: bytes | None = None, identity: str = "operator"
) -> tuple[int, dict]:
    """A call to `node`'s controller; over TLS (the lab's `remediation.tls`) with the certificate of `identity`
    (`operator`, `agent-gpu1`, `alertmanager`, ...)."""
    import json

    from ha_ops.lab import tls
    from ha_ops.lab.http import http_get, http_post

    url = controller_url(lab, node) + path
    netns = lab.ctx.netns(node)
    context = tls.client_context(lab.ctx, identity) if tls.enabled(lab.ctx) else None
    if body is not None:
        status, raw = http_post(netns, url, body, context=context)
    else:
        status, raw = http_get(netns, url, context=context)
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, {"raw": raw.decode(errors="replace")}


def on_controller_storage(lab: Lab, script: str, *args: str) -> str:
    """Run `sh -c script` on the controllers' shared state folder ($1, then args) as a node sees it. On MooseFS (the
    full lab) through a node's own mount: the first of the storage's clients that answers within 3 s, since a node
    cut off from the network hangs on it; else the host folder every node shares."""
    from ha_ops.errors import TransportError
    from ha_ops.lab import storage
    from ha_ops.lab.controllers import state_dir

    argv = ["sh", "-c", script, "sh", str(state_dir(lab.ctx)), *args]
    if not storage.enabled(lab.ctx):
        return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=30).stdout
    # A node powered off (its mfsmount gone) would show an empty folder: only a live mount counts.
    argv[2] = f"mountpoint -q {storage.MOUNT} || exit 4; {script}"
    problems = []
    for node in storage.clients(lab.ctx):
        try:
            return lab.transport(node).run(argv, timeout=3).stdout
        except TransportError as e:
            problems.append(f"{node}: {e}")
    raise AssertionError(f"no node reads the controllers' state on MooseFS: {problems}")


def audit_entries(lab: Lab) -> list[dict]:
    import json

    text = on_controller_storage(lab, '[ ! -e "$1/audit.jsonl" ] || cat "$1/audit.jsonl"')
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def bmc_resets(lab: Lab) -> list[tuple[str, str]]:
    """[(reset type, host)] as the lab's BMC logged them, oldest first."""
    import re

    path = lab.ctx.paths.host_logs / "bmc.log"
    text = path.read_text(errors="replace") if path.exists() else ""
    return re.findall(r"bmc: ComputerSystem\.Reset (\w+) (\S+)", text)


def reset_remediation(lab: Lab) -> None:
    """Tests start from a clean cluster: healthy GPUs, no jobs, spares out, every node in service, and controllers
    with no history (a fresh state, lease and audit log)."""
    from ha_ops.schedulers.slurm import Slurm
    from ha_ops.util.wait import wait_for

    for node in controller_nodes(lab):
        handle = lab.node(node)
        handle.thaw("controller")
        handle.stop("controller", grace=1.0)
    gpu_nodes = lab.ctx.layout.nodes_with_role("gpu")
    for node in gpu_nodes:
        lab.node(node.name).gpus().clear()
    slurm = Slurm(lab.transport(gpu_nodes[0].name))
    lab.node(gpu_nodes[0].name).run(["scancel", "--user", "root"], check=False)
    slurm.set_partition_nodes(lab.spec.schedulers.slurm.partition, [n.name for n in gpu_nodes if not n.spare])
    for node in gpu_nodes:
        if slurm.node(node.name).drained:
            slurm.resume(node.name)
    on_controller_storage(lab, 'cd "$1" && rm -rf state.json state.json.damaged-* lease.json lease.token terms '
                               "audit.jsonl views snapshots snapshot-records nodes")  # fmt: skip
    from ha_ops.lab import audit_sink

    if audit_sink.enabled(lab.ctx):  # the sink's copy and what each controller shipped: a new history there too
        for node in controller_nodes(lab):
            audit_sink.marker_file(lab.ctx, node).unlink(missing_ok=True)
        if audit_sink.shipped_log(lab.ctx).exists():
            os.truncate(audit_sink.shipped_log(lab.ctx), 0)  # (rsyslog appends to the file it holds open)
    for node in controller_nodes(lab):
        lab.node(node).start("controller")
    wait_for("a controller leads", lambda: leader(lab), timeout=15, interval=0.1)
    # And the other one serves too: a test that talks to the standby right away must not find it still starting.
    # (wait_for counts a refused connection as "not yet")
    wait_for("every controller answering",
             lambda: all(call_controller(lab, n, "/healthz")[0] == 200 for n in controller_nodes(lab)), timeout=15,
             interval=0.1)  # fmt: skip
    wait_for("every GPU node idle", lambda: not lab.slurm_problems(), timeout=30, interval=0.2)


# --- containers and Ansible ----------------------------------------------------------------------------------


def script_env(script: str) -> dict[str, str]:
    """This environment plus the `export K=V` lines a set-up script prints with `--env` (scripts/containers.sh:
    podman's configuration; scripts/ansible.sh: that and the collections)."""
    out = subprocess.run(["bash", str(REPO / "scripts" / script), "--env"], capture_output=True, text=True,
                         check=True, timeout=60)  # fmt: skip
    env = dict(os.environ)
    for line in out.stdout.splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        env[key] = value
    return env


def firewall_matrix_problems(lab: Lab) -> list[str]:
    """The host firewalls probed: every host pair and every TCP port some flow opens, from inside the source's
    namespace. An allowed flow must answer (accepted, or refused where nothing listens: the SYN got in), a blocked
    one get no answer at all (dropped), and each host's drop counter count them. What differs, one line each."""
    import errno
    import os
    from collections import Counter
    from concurrent.futures import ThreadPoolExecutor

    from ha_ops.errors import TransportError
    from ha_ops.lab import firewall, netns
    from ha_ops.security.firewall import matrix

    assert firewall.enabled(lab.ctx)
    layout = lab.ctx.layout
    before = {n.name: firewall.dropped(lab.ctx, n.name) for n in layout.nodes}

    def answered(src: str, dst: str, port: int) -> bool:
        try:
            netns.connect_in(lab.ctx.netns(src), (str(layout.node(dst).address), port), timeout=1.0).close()
            return True
        except TransportError as exc:
            # connect_in names the errno's text: refused means the SYN got in and nothing listens there
            return os.strerror(errno.ECONNREFUSED) in str(exc)

    table = matrix(lab.spec, layout)
    with ThreadPoolExecutor(max_workers=48) as pool:
        seen = list(pool.map(lambda row: answered(*row[:3]), table))
    wrong = [f"{s} -> {d}:{p}: {'answered' if got else 'dropped'}, the spec says {'allowed' if ok else 'blocked'}"
             for (s, d, p, ok), got in zip(table, seen, strict=True) if got != ok]  # fmt: skip
    blocked = Counter(d for s, d, p, ok in table if not ok)
    if sum(blocked.values()) <= 100 or sum(ok for *_, ok in table) <= 50:
        wrong.append(f"too few probes to mean anything: {len(table)}, blocked {dict(blocked)}")
    for node, count in blocked.items():  # each dropped probe counted (retransmitted SYNs count again)
        if firewall.dropped(lab.ctx, node) - before[node] < count:
            wrong.append(f"{node}: its drop counter counted fewer than the {count} probes it dropped")
    return wrong
