"""The local lab cluster: `up` (idempotent reconcile), `status` (real liveness) and `down` (removes everything).

Every node, switch or host, is a network namespace plus a *holder* process that owns the node's hostname (UTS)
and mount namespace: a private tmpfs on /run, the node's own folder at NODE_DIR and the lab's hosts file on
/etc/hosts. Daemons and commands enter the holder's namespaces with nsenter, so each node has its own view.

Over 400 lines because `up` and `down` are one ordered sequence over every part of the lab (each part's own module
does the work); split, the order that makes them idempotent would be spread over files.
"""

from __future__ import annotations

import fcntl
import hashlib
import http.client
import logging
import os
import shutil
import signal
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from ha_ops.errors import LabError, NotRootError, SpecError
from ha_ops.lab import (
    agents,
    audit_sink,
    bmc,
    controllers,
    drivers,
    fabric,
    firewall,
    kubelets,
    kubernetes,
    mgmt,
    monitoring,
    netns,
    process,
    slurm,
    sshd,
    storage,
    systemctl,
    tls,
)
from ha_ops.lab.context import LabContext, ServiceDef
from ha_ops.lab.http import http_get
from ha_ops.lab.paths import NODE_DIR, LabPaths, netns_name
from ha_ops.lab.state import LabState, NodeState, ServiceState, service_key
from ha_ops.spec import ClusterSpec, compute_layout
from ha_ops.transport.lab import LabTransport
from ha_ops.util.wait import wait_for

if TYPE_CHECKING:
    from lightkube import Client

    from ha_ops.lab.node import LabNode

log = logging.getLogger(__name__)

HOLDER_ARGV = ["sleep", "infinity"]
FACTS_DIR = Path("/etc/ansible/facts.d")
HOLDER_SCRIPT = f"""set -e
hostname "$1"
mount -t tmpfs -o mode=0755,size=64m hao-run /run
mkdir -p /run/sshd /run/munge {NODE_DIR} /run/lock
mount --bind "$2" /run/munge
mount --bind "$3" {NODE_DIR}
mount --bind "$4" /etc/hosts
mount --bind "$5" /usr/local/sbin
# A node's root has its own dotfiles: this machine's (a Python version manager's shell set-up, ~0.1 s) would run
# before every command an SSH session runs on the node.
[ ! -f "$HOME/.bashrc" ] || mount --bind "$6" "$HOME/.bashrc"
# The gpu_driver role's fact where a real host keeps it (lab nodes share /etc with this machine).
mount --bind "$7" {FACTS_DIR}
touch {NODE_DIR}/.holder-ready
exec sleep infinity
"""

REQUIRED_COMMANDS = ["ip", "nsenter", "unshare", "setsid", "vtysh", "ssh-keygen", "scontrol", "sinfo"]
UP_TIMEOUT_S = 45.0

Progress = Callable[[str], None]


def _no_progress(_: str) -> None:
    return None


def spec_digest(spec: ClusterSpec) -> str:
    return hashlib.sha256(spec.model_dump_json().encode()).hexdigest()[:16]


class Lab:
    def __init__(self, spec: ClusterSpec, paths: LabPaths | None = None) -> None:
        self.spec = spec
        self.paths = paths or LabPaths.for_lab(spec.name)
        self.ctx = LabContext(spec, compute_layout(spec), self.paths)

    # --- loading --------------------------------------------------------------------------------------------
    @classmethod
    def from_state(cls, name: str, base: Path | None = None) -> Lab:
        paths = LabPaths.for_lab(name, base)
        state = LabState.load(paths.state_file)
        return cls(ClusterSpec.model_validate(state.spec), paths)

    def state(self) -> LabState:
        return LabState.load(self.paths.state_file)

    def _new_state(self) -> LabState:
        return LabState(
            lab=self.spec.name,
            root=str(self.paths.root),
            spec_digest=spec_digest(self.spec),
            spec=self.spec.model_dump(mode="json"),
        )

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.paths.lock_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.paths.lock_file, "a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    # --- up -------------------------------------------------------------------------------------------------
    def up(self, progress: Progress = _no_progress, timeout: float = UP_TIMEOUT_S) -> LabState:
        existing = [f"failure_domains[{i}].subnet" for i, d in enumerate(self.spec.failure_domains) if d.subnet]
        if existing:  # the lab builds its own fabric and addresses; a cluster that exists is reached, not built
            raise SpecError(existing[0], ["an existing cluster's subnet: the lab builds its own fabric and addresses "
                                          "(run ha-ops on that cluster with its inventory instead)"])  # fmt: skip
        _require_root()
        missing = [c for c in REQUIRED_COMMANDS if shutil.which(c) is None]
        if missing:
            raise LabError(f"missing commands: {', '.join(missing)}; run 'make setup'")
        with self._locked():
            state = self._load_or_new_state()
            state.phase = "building"
            self._save(state)
            try:
                self._reconcile(state, progress, timeout)
            except BaseException:
                state.phase = "failed"
                self._save(state)
                raise
            state.phase = "up"
            self._save(state)
            return state

    def _load_or_new_state(self) -> LabState:
        if not self.paths.state_file.exists():
            return self._new_state()
        state = LabState.load(self.paths.state_file)
        if state.spec_digest != spec_digest(self.spec):
            raise LabError(f"lab {self.spec.name!r} is already up from a different spec; run 'ha-ops lab down' first")
        return state

    def _save(self, state: LabState) -> None:
        state.save(self.paths.state_file)

    def _reconcile(self, state: LabState, progress: Progress, timeout: float) -> None:
        ctx = self.ctx
        progress("writing configuration")
        for directory in (self.paths.etc, self.paths.ssh, self.paths.shared, self.paths.host_logs):
            directory.mkdir(parents=True, exist_ok=True)
        for name in ctx.switch_names() + ctx.host_names():
            (ctx.node_dir(name) / "log").mkdir(parents=True, exist_ok=True)
        self._write_hosts_file()
        fabric.prepare(ctx)
        slurm.prepare(ctx)
        sshd.prepare(ctx)
        bmc.prepare(ctx)
        tls.prepare(ctx)  # before the configs that name the certificates
        monitoring.prepare(ctx)
        audit_sink.prepare(ctx)
        agents.prepare(ctx)
        controllers.prepare(ctx)
        storage.prepare(ctx)
        kubernetes.prepare(ctx)
        kubelets.prepare(ctx)

        progress(f"creating {len(ctx.switch_names()) + len(ctx.host_names())} nodes")
        for name in ctx.switch_names():
            self._ensure_node(state, name, "switch", None)
        for node in ctx.layout.nodes:
            self._ensure_node(state, node.name, "host", str(node.address))
        fabric.wire(ctx)
        mgmt.wire(ctx)
        firewall.apply(ctx)  # before any daemon listens
        kubelets.network(ctx, state)

        progress("starting the fabric (FRR)")
        self._ensure_services(state, fabric.zebra_services(ctx))
        for switch in ctx.switch_names():
            wait_for(f"zebra on {switch}", lambda s=switch: fabric.zserv_ready(ctx, s), timeout=10, interval=0.02)
        self._ensure_services(state, fabric.routing_services(ctx))

        progress("starting munged, sshd, Slurm, Prometheus and Alertmanager")
        if storage.enabled(ctx):
            progress("starting MooseFS (master, chunkservers, metalogger) and mounting it")
            self._ensure_storage(state)
        self._ensure_services(state, [slurm.munged_service(ctx)])
        wait_for("munged socket", lambda: slurm.munge_socket(ctx).is_socket(), timeout=10, interval=0.02)
        self._ensure_services(state, sshd.sshd_services(ctx) + fabric.netwatch_services(ctx))
        self._ensure_services(state, [systemctl.supervisor_service(ctx), bmc.service(ctx)])
        self._ensure_services(state, slurm.slurm_services(ctx))
        self._ensure_services(state, monitoring.monitoring_services(ctx) + audit_sink.services(ctx))
        if not kubernetes.controllers_use_it(ctx):  # (else once their API is ready, below)
            self._ensure_services(state, controllers.controller_services(ctx))
        self._ensure_services(state, agents.agent_services(ctx))
        if kubernetes.enabled(ctx):
            progress(
                "starting Kubernetes (etcd, kube-apiserver; its controller manager, scheduler and KWOK once it is up)"
            )
            self._ensure_services(state, kubernetes.api_services(ctx) + kubelets.relay_services(ctx))
            self._ensure_kubelet_runtimes(state, progress)

        deadline = time.monotonic() + timeout
        progress("waiting for BGP sessions and ECMP routes")
        wait_for("BGP established and ECMP routes installed", lambda: not fabric.fabric_problems(ctx),
                 timeout=max(1.0, deadline - time.monotonic()), interval=0.1)  # fmt: skip
        progress("waiting for Slurm: a controller in control, every GPU node idle")
        wait_for(
            "Slurm ready",
            lambda: not self.slurm_problems(),
            timeout=max(1.0, deadline - time.monotonic()),
            interval=0.2,
        )
        wait_for("every slurmctld answering", lambda: self._every_slurmctld_answers(state),
                 timeout=max(1.0, deadline - time.monotonic()), interval=0.5)  # fmt: skip
        if kubernetes.enabled(ctx):
            self._ensure_kubernetes_nodes(state, progress, deadline)
            if kubernetes.controllers_use_it(ctx):
                progress("starting the remediation controllers (on Kubernetes)")
                self._ensure_services(state, controllers.controller_services(ctx))
        progress("waiting for Prometheus, Alertmanager, sshd and the agents")
        wait_for("monitoring and sshd ready", lambda: not self.endpoint_problems(),
                 timeout=max(1.0, deadline - time.monotonic()), interval=0.1)  # fmt: skip

    def _ensure_kubernetes_nodes(self, state: LabState, progress: Progress, deadline: float) -> None:
        with kubernetes.client(self.ctx) as api:
            self._register_kubernetes_nodes(api, state, progress, deadline)
            kubernetes.grant_controllers(self.ctx, api)
            if kubelets.names(self.ctx):
                wait_for("every kubelet node Ready", lambda: not kubelets.problems(api, self.ctx),
                         timeout=max(60.0, deadline - time.monotonic()), interval=0.5)  # fmt: skip
                kubelets.advertise_gpus(api, self.ctx)

    def _ensure_kubelet_runtimes(self, state: LabState, progress: Progress) -> None:
        """containerd first (the API relay is already up), the pause image in each runtime, then the kubelets (a
        kubelet that found no pause image would fail its first pods)."""
        ctx = self.ctx
        if not kubelets.names(ctx):
            return
        progress(f"starting containerd and kubelet on {', '.join(kubelets.names(ctx))}")
        self._ensure_services(state, kubelets.runtime_services(ctx))
        for node in kubelets.names(ctx):
            wait_for(f"containerd on {node}", kubelets.runtime_socket(ctx, node).is_socket, timeout=20, interval=0.05)
        kubelets.ensure_pause_image(ctx)
        self._ensure_services(state, kubelets.kubelet_services(ctx))

    def _register_kubernetes_nodes(self, api: Client, state: LabState, progress: Progress, deadline: float) -> None:
        progress("waiting for the Kubernetes API")
        # The API server's first start creates its RBAC bootstrap and priority levels: allow it a minute of its own.
        wait_for(
            "kube-apiserver ready",
            lambda: kubernetes.api_ready(api),
            timeout=max(60.0, deadline - time.monotonic()),
            interval=0.25,
        )
        self._ensure_services(state, kubernetes.component_services(self.ctx))
        total = len(kubernetes.gpu_nodes(self.ctx))
        progress(f"Kubernetes API ready; controller manager, scheduler and KWOK started; registering {total} GPU nodes")
        created = kubernetes.register_nodes(self.ctx, api)
        progress(f"registered {created} new KWOK GPU node(s); waiting for all {total} to be Ready")
        wait_for("every KWOK GPU node Ready", lambda: not kubernetes.problems(self.ctx, api),
                 timeout=max(60.0 + total / 20, deadline - time.monotonic()), interval=0.5)  # fmt: skip

    def _ensure_storage(self, state: LabState) -> None:
        from ha_ops.lab import storage_ops

        storage_ops.ensure(self, state)

    def _write_hosts_file(self) -> None:
        lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
        lines += [f"{n.address}\t{n.name}" for n in self.ctx.layout.nodes]
        self.paths.hosts_file.parent.mkdir(parents=True, exist_ok=True)
        self.paths.hosts_file.write_text("\n".join(lines) + "\n")

    def _ensure_node(self, state: LabState, name: str, kind: str, address: str | None) -> None:
        ns = self.ctx.netns(name)
        current = state.nodes.get(name)
        netns.create(ns)
        if current and current.holder_pid and process.matches(current.holder_pid, HOLDER_ARGV, ns):
            return
        # A lost holder took the node's mount namespace with it: whatever still runs there is stale.
        process.kill_all_in_netns(ns)
        node_dir = self.ctx.node_dir(name)
        ready = node_dir / ".holder-ready"
        ready.unlink(missing_ok=True)
        enter = [
            "nsenter",
            f"--net={netns.NETNS_DIR / ns}",
            "--",
            "unshare",
            "--uts",
            "--mount",
            "--propagation",
            "private",
            "--",
        ]
        sbin = systemctl.install_shim(node_dir, systemctl.socket_path(self.ctx), name)
        if name in {n.name for n in self.ctx.layout.nodes_with_role("gpu")}:
            drivers.install_nvidia_smi(self.ctx, name, sbin)
        facts = node_dir / "ansible"
        facts.mkdir(exist_ok=True)
        FACTS_DIR.mkdir(parents=True, exist_ok=True)  # the mount point: an empty folder on this machine
        argv = [
            "sh",
            "-c",
            HOLDER_SCRIPT,
            "hao-holder",
            name,
            str(self.paths.munge),
            str(node_dir),
            str(self.paths.hosts_file),
            str(sbin),
            str(self._node_bashrc(node_dir)),
            str(facts),
        ]
        pid = process.spawn(argv, node_dir / "log" / "holder.log", enter=enter)
        wait_for(f"node {name} namespaces", ready.exists, timeout=5, interval=0.01)
        wait_for(f"node {name} holder", lambda: process.matches(pid, HOLDER_ARGV, ns), timeout=5, interval=0.01)
        state.nodes[name] = NodeState(name=name, kind=kind, netns=ns, holder_pid=pid, address=address)  # type: ignore[arg-type]
        # Services of this node lost their namespaces; forget their PIDs so they are started again.
        for svc in state.services.values():
            if svc.node == name:
                svc.pid = None
        self._save(state)

    @staticmethod
    def _node_bashrc(node_dir: Path) -> Path:
        path = node_dir / "bashrc"
        path.write_text("# the lab node's own ~/.bashrc (ha_ops.lab.cluster): nothing runs before a command\n")
        return path

    def _ensure_services(self, state: LabState, services: list[ServiceDef]) -> None:
        for svc in services:
            key = service_key(svc.node, svc.service)
            current = state.services.get(key)
            if current and self._service_alive(state, current):
                continue
            state.services[key] = ServiceState(node=svc.node, service=svc.service, argv=svc.argv, log=str(svc.log))
            state.services[key].pid = self._spawn(state, state.services[key])
            self._save(state)

    def _spawn(self, state: LabState, svc: ServiceState) -> int:
        if svc.service == "mfsmount":
            # A mount whose client died stays as a dead FUSE mount until it is unmounted.
            holder = state.nodes[svc.node].holder_pid
            assert holder is not None
            LabTransport(svc.node, holder).run(["umount", "-l", str(storage.MOUNT)], check=False, timeout=10)
        if svc.node == "host":
            return process.spawn(svc.argv, Path(svc.log))
        node = state.nodes[svc.node]
        assert node.holder_pid is not None
        transport = LabTransport(node.name, node.holder_pid)
        return process.spawn(
            svc.argv, Path(svc.log), enter=transport.enter_prefix(), env={**os.environ, **self.ctx.node_env()}
        )

    def _service_alive(self, state: LabState, svc: ServiceState) -> bool:
        ns = None if svc.node == "host" else state.nodes[svc.node].netns
        return process.matches(svc.pid, svc.argv, ns)

    # --- status ---------------------------------------------------------------------------------------------
    def transport(self, node: str) -> LabTransport:
        state = self.state()
        if node not in state.nodes or state.nodes[node].holder_pid is None:
            raise LabError(f"no node {node!r} in lab {self.spec.name!r}")
        return LabTransport(node, state.nodes[node].holder_pid, env=self.ctx.node_env())  # type: ignore[arg-type]

    def _client_node(self) -> str:
        """Where Slurm client commands run: a GPU node, as a user's login would."""
        return self.ctx.layout.nodes_with_role("gpu")[0].name

    def slurm_nodes(self) -> dict[str, dict[str, str]]:
        out = self.transport(self._client_node()).run(["sinfo", "-h", "-N", "-o", "%N|%T|%G"], timeout=10).stdout
        nodes = {}
        for line in out.splitlines():
            name, node_state, gres = line.strip().split("|")
            nodes[name] = {"state": node_state, "gres": gres}
        return nodes

    def slurm_controllers(self) -> dict[str, str]:
        """Controller host -> UP/DOWN as `scontrol ping` reports it."""
        from ha_ops.schedulers.slurm import Slurm

        return dict(Slurm(self.transport(self._client_node())).controllers())

    def _every_slurmctld_answers(self, state: LabState) -> bool:
        """Both controllers, not just one in control: a backup that started while the primary was still writing
        the shared state can exit at once (Slurm reads an empty cluster name); start it again (under up's lock)."""
        self._ensure_services(state, [s for s in slurm.slurm_services(self.ctx) if s.service == "slurmctld"])
        return all(answer == "UP" for answer in self.slurm_controllers().values())

    def slurm_problems(self) -> list[str]:
        try:
            nodes = self.slurm_nodes()
        except Exception as exc:
            return [f"no Slurm controller answers: {exc}"]
        return self._slurm_node_problems(nodes)

    def _slurm_node_problems(self, nodes: dict[str, dict[str, str]]) -> list[str]:
        problems = []
        for node in self.ctx.layout.nodes_with_role("gpu"):
            info = nodes.get(node.name)
            if info is None:
                problems.append(f"{node.name}: not in sinfo")
            elif info["state"] != "idle" and info["state"] not in ("allocated", "mixed", "completing"):
                problems.append(f"{node.name}: {info['state']}")
        return problems

    def _http_problem(self, node: str, url: str, what: str) -> str | None:
        """None if `url` answers 200 from inside `node`'s namespace, else what went wrong."""
        try:
            context = tls.operator_context(self.ctx) if url.startswith("https://") else None
            status, _ = http_get(self.ctx.netns(node), url, timeout=2, context=context)
        except Exception as exc:
            return f"{what}: {exc}"
        return None if status == 200 else f"{what}: {url} returned {status}"

    def _monitoring_problem(self, server: monitoring.Server) -> str | None:
        """None if Prometheus or Alertmanager is ready (asked as the operator, over TLS with the password where the
        lab serves them so), else what went wrong."""
        try:
            status, _ = monitoring.request(self.ctx, server, "/-/ready", timeout=2)
        except Exception as exc:
            return f"{server}: {exc}"
        return None if status == 200 else f"{server}: /-/ready returned {status}"

    def endpoint_problems(self, include_controllers: bool = True) -> list[str]:
        """What does not answer yet: Prometheus, Alertmanager, every sshd, agent and (optionally) controller."""
        ctx = self.ctx
        mon = ctx.spec.monitoring.host.name
        checks: list[tuple[str, str, str]] = []
        if include_controllers:
            checks += [
                (n.name, f"{url}/healthz", f"{n.name} controller")
                for n, url in zip(ctx.layout.nodes_with_role("controller"), controllers.base_urls(ctx), strict=False)
            ]
        port = ctx.spec.monitoring.agent_port
        checks += [
            (n.name, f"http://{n.address}:{port}/metrics", f"{n.name} agent") for n in ctx.layout.nodes_with_role("gpu")
        ]
        problems = [p for server in monitoring.SERVERS if (p := self._monitoring_problem(server))]
        problems += [p for node, url, what in checks if (p := self._http_problem(node, url, what))]
        listeners = [(node.name, (str(node.address), 22), f"{node.name} sshd") for node in ctx.layout.nodes]
        if audit_sink.enabled(ctx):
            listeners.append((mon, (audit_sink.address(ctx), audit_sink.PORT), "the audit sink (rsyslog)"))
        for node_name, where, what in listeners:  # on the hosts' own network, as the controllers reach them
            try:
                netns.connect_in(ctx.netns(node_name), where, timeout=1).close()
            except Exception as exc:
                problems.append(f"{what}: {exc}")
        return problems + self._operator_problems()

    def _operator_problems(self) -> list[str]:
        """What the operator's machine reaches the lab through, as it would a real cluster: every node's sshd on the
        management network, the BMC, and the supervisor the nodes' systemctl asks."""
        ctx, problems = self.ctx, []
        for name in mgmt.nodes(ctx):
            try:
                socket.create_connection((str(mgmt.address(ctx, name)), 22), timeout=1).close()
            except OSError as exc:
                problems.append(f"{name} sshd on the management network: {exc}")
        if not systemctl.socket_path(ctx).is_socket():
            problems.append(f"the lab's supervisor (the nodes' systemctl): no socket at {systemctl.socket_path(ctx)}")
        try:  # http.client, not urllib: no proxy from the environment may get in between
            connection = http.client.HTTPConnection(str(mgmt.operator_address(ctx)), bmc.PORT, timeout=1)
            connection.request("GET", "/redfish/v1")
            connection.getresponse().read()
            connection.close()
        except OSError as exc:
            problems.append(f"the lab's BMC at {bmc.url(ctx)}: {exc}")
        return problems

    def status(self) -> dict:
        """Real liveness of every piece; `healthy` only when all of it is up."""
        state = self.state()
        problems: list[str] = []
        nodes = {}
        for name, node in state.nodes.items():
            ok_ns, ok_holder = (
                netns.exists(node.netns),
                process.matches(node.holder_pid, HOLDER_ARGV, node.netns),
            )
            nodes[name] = {"kind": node.kind, "netns": ok_ns, "holder": ok_holder, "address": node.address}
            if not (ok_ns and ok_holder):
                problems.append(f"node {name}: {'holder process' if ok_ns else 'namespace'} missing")
        services = {}
        for key, svc in state.services.items():
            alive = self._service_alive(state, svc)
            frozen = alive and svc.pid is not None and process.is_stopped(svc.pid)
            services[key] = {
                "pid": svc.pid,
                "state": "frozen" if frozen else ("running" if alive else "dead"),
            }
            if services[key]["state"] != "running":
                problems.append(f"service {key}: {services[key]['state']}")
        if all(v["netns"] and v["holder"] for v in nodes.values()):
            problems += fabric.fabric_problems(self.ctx)
        slurm_info: dict = {}
        try:
            slurm_info = {"controllers": self.slurm_controllers(), "nodes": self.slurm_nodes()}
            problems += self._slurm_node_problems(slurm_info["nodes"])
        except Exception as exc:
            problems.append(f"slurm: no controller answers ({exc})")
        problems += self.endpoint_problems()
        if kubernetes.enabled(self.ctx):
            problems += kubernetes.problems(self.ctx)
        return {
            "lab": state.lab,
            "root": state.root,
            "phase": state.phase,
            "healthy": not problems and state.phase == "up",
            "nodes": nodes,
            "services": services,
            "slurm": slurm_info,
            "prometheus": monitoring.prometheus_url(self.ctx),
            "alertmanager": monitoring.alertmanager_url(self.ctx),
            "kubernetes": kubernetes.summary(self.ctx),
            "problems": problems,
        }

    def use_controllers(self, on: bool) -> None:
        """Switch the lab between agents that report to the remediation controllers (on) and agents that drain in
        Slurm themselves with the controllers stopped (off), as on a Slurm-only cluster without a controller."""
        agents.write_configs(self.ctx, report_to_controllers=on)
        for node in self.ctx.layout.nodes_with_role("controller"):
            handle = self.node(node.name)
            if "controller" in handle.services():
                handle.start("controller") if on else handle.stop("controller")
        for node in self.ctx.layout.nodes_with_role("gpu"):
            self.node(node.name).restart("agent")
        wait_for(
            "agents (and controllers) answering",
            lambda: not self.endpoint_problems(include_controllers=on),
            timeout=30,
            interval=0.2,
        )

    # --- node handles ---------------------------------------------------------------------------------------
    def node(self, name: str) -> LabNode:
        from ha_ops.lab.node import LabNode  # node.py imports this module

        return LabNode(self, name)

    # --- down -----------------------------------------------------------------------------------------------
    def down(self, progress: Progress = _no_progress) -> list[str]:
        return teardown(self.spec.name, self.paths, progress)


def teardown(name: str, paths: LabPaths, progress: Progress = _no_progress) -> list[str]:
    """Remove everything a lab created, from its state file where readable and by name prefix regardless.

    Returns what was removed. Works on a half-built lab and without any state at all.
    """
    _require_root()
    removed: list[str] = []
    state: LabState | None = None
    try:
        state = LabState.load(paths.state_file)
    except LabError as exc:
        log.info("no usable state (%s); sweeping by name", exc)
    progress("stopping services")
    if state is not None:
        # Kubelets first, so none restarts a container while containerd removes them all (with their cgroups).
        kubelets_running = [s for s in state.services.values() if s.service == "kubelet" and s.node in state.nodes]
        process.terminate_all([s.pid for s in kubelets_running
                               if s.pid and process.matches(s.pid, s.argv, state.nodes[s.node].netns)])  # fmt: skip
        removed += kubelets.stop_containers(paths.root)
        live = []
        for svc in state.services.values():
            node = state.nodes.get(svc.node)
            ns = node.netns if node is not None else None
            if svc.pid and process.matches(svc.pid, svc.argv, ns):
                live.append(svc.pid)
                removed.append(f"process {svc.pid} ({svc.node}/{svc.service})")
        # The lab is being destroyed: daemons get a short grace together, not one after another.
        process.terminate_all(live)
    # Anything else whose command line names this lab's folder was started by the lab (e.g. after a lost state).
    for pid in pids_naming(paths.root):
        process.signal_pid(pid, signal.SIGCONT)
        process.signal_pid(pid, signal.SIGKILL)
        process.wait_gone(pid, 2.0)
        removed.append(f"process {pid} (stray)")
    progress("removing namespaces")
    names = set(netns.list_with_prefix(netns_prefix(name)))
    if state is not None:
        names |= {n.netns for n in state.nodes.values() if netns.exists(n.netns)}
    for ns in sorted(names):
        for pid in process.kill_all_in_netns(ns):
            removed.append(f"process {pid} (in {ns})")
        netns.delete(ns)
        removed.append(f"namespace {ns}")
    if paths.root.exists():
        shutil.rmtree(paths.root)
        removed.append(f"directory {paths.root}")
    paths.lock_file.unlink(missing_ok=True)
    return removed


def netns_prefix(lab: str) -> str:
    return netns_name(lab, "")


def pids_naming(root: Path) -> list[int]:
    """Live processes (zombies aside) whose command line names a path under `root`: what a lab started."""
    needle = str(root).encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            raw = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if (needle + b"/" in raw or raw.endswith(needle + b"\0")) and process.matches_any_state(int(entry.name)):
            pids.append(int(entry.name))
    return pids


def _require_root() -> None:
    if os.geteuid() != 0:
        raise NotRootError("the lab needs root (network namespaces, daemons); run it with sudo")
