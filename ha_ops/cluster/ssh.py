"""A real cluster over SSH: its spec, an Ansible inventory of its hosts, paramiko with verified host keys, and each
node's BMC. Every operation is a command from ha_ops.cluster.commands, run as rendered (so --dry-run prints exactly
what a run executes), except power, which goes to the BMC."""

from __future__ import annotations

import logging
import os
import shlex
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import ValidationError

from ha_ops.cluster import commands
from ha_ops.cluster.base import MASKED, ClusterScheduler, Service, service_endpoint
from ha_ops.cluster.commands import Command
from ha_ops.cluster.gpu import CapabilityMissing, DcgmInjector, FakeBackendInjector, GpuInjector
from ha_ops.cluster.inventory import Inventory, InventoryHost
from ha_ops.cluster.ops import FilterOp, GpuOp, LinkOp, Op, PowerOp, QdiscOp, ServiceOp, capability, describe
from ha_ops.cluster.power import PowerBackend, backend, password
from ha_ops.cluster.rollouts import DriverRollouts, RolloutSite
from ha_ops.errors import CommandFailed, HaOpsError, SpecError, TransportError
from ha_ops.monitoring.web import MonitoringClient, MonitoringSession
from ha_ops.schedulers.base import Scheduler
from ha_ops.schedulers.slurm import Slurm
from ha_ops.security.tls import ReloadingContext, TlsFiles
from ha_ops.spec.layout import compute_layout
from ha_ops.spec.load import validation_problems
from ha_ops.spec.model import ClusterSpec
from ha_ops.storage.checks import StorageChecks, replicas_of
from ha_ops.transport.http import request
from ha_ops.transport.ssh import SSHTransport
from ha_ops.util.proc import CommandResult


def state_dir(cluster: str) -> Path:
    """Where the operator's machine keeps a cluster's fault journal (XDG state home)."""
    base = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    return base / "ha-ops" / "clusters" / cluster


log = logging.getLogger(__name__)


class SshNode:
    def __init__(self, host: InventoryHost, transport: SSHTransport, gpus: int = 0) -> None:
        self.name = host.name
        self.host = host
        self.transport = transport
        self.power: PowerBackend | None = backend(host.name, host.bmc) if host.bmc else None
        self.gpus: GpuInjector | None = None
        if host.gpu_injection == "dcgm":
            self.gpus = DcgmInjector(gpus)
        elif host.gpu_injection == "fake" and host.fake_gpu_dir:
            self.gpus = FakeBackendInjector(host.fake_gpu_dir, host.ha_ops_command)
        self.capabilities = frozenset(
            {"services", "links", "filters", "qdisc"}
            | ({"power"} if self.power else set())
            | ({"gpu_faults"} if self.gpus else set())
        )

    def run(
        self, argv: Sequence[str], *, timeout: float = 30.0, check: bool = True, input: str | None = None
    ) -> CommandResult:
        return self.transport.run(argv, timeout=timeout, check=check, input=input)

    def require(self, op: Op) -> None:
        needed = capability(op)
        if needed not in self.capabilities:
            why = {"power": "no ha_ops_bmc in the inventory", "gpu_faults": "ha_ops_gpu_injection is none"}
            raise CapabilityMissing(f"{self.name} lacks {needed} for {describe(op)!r} ({why.get(needed, '')})")
        if isinstance(op, PowerOp) and op.permanent:
            raise CapabilityMissing(f"{self.name}: a real node's hardware cannot be broken on purpose "
                                    "(permanent: is for the lab)")  # fmt: skip
        if isinstance(op, PowerOp) and self.host.bmc is not None:
            password(self.host.bmc, self.name)  # a missing credential is refused before anything is journaled

    def commands(self, op: Op) -> list[Command]:
        if isinstance(op, ServiceOp):
            return commands.service(op, self.host.units)
        if isinstance(op, LinkOp):
            return commands.link(op)
        if isinstance(op, FilterOp):
            return commands.filters(op, self.host.firewall)
        if isinstance(op, QdiscOp):
            return commands.qdisc(op)
        if isinstance(op, GpuOp):
            assert self.gpus is not None
            return self.gpus.commands(op)
        return []

    def render(self, op: Op) -> list[str]:
        self.require(op)
        if isinstance(op, PowerOp):
            assert self.power is not None
            return [self.power.describe(op.action)]
        sudo = "sudo -n -- " if self.host.become else ""
        return [f"ssh {self.host.user}@{self.host.address}: {sudo}{command}" for command in self.commands(op)]

    def apply(self, op: Op) -> None:
        self.require(op)
        if isinstance(op, PowerOp):
            assert self.power is not None
            self.power.act(op.action)
            self.transport.close()  # a session does not outlive a power change (off: no FIN ever comes)
            if op.action in ("on", "cycle"):
                self._wait_for_ssh()  # what comes next on this host (an undo's next step) needs it booted
            return
        if isinstance(op, LinkOp) and not op.up:
            self._refuse_own_link(op.interface)
        starting = isinstance(op, ServiceOp) and op.action in ("start", "restart")
        for command in self.commands(op):
            result = self.run(list(command.argv), input=command.input, check=command.check and not starting,
                              timeout=30)  # fmt: skip
            if starting and not result.ok:
                self._started_or_masked(op, result)
            if isinstance(op, GpuOp) and self.gpus is not None:
                self.gpus.check(op, result.stdout)

    def _wait_for_ssh(self) -> None:
        """Until the host answers ssh again after a power on, up to `ha_ops_boot_wait_s`."""
        deadline = time.monotonic() + self.host.boot_wait_s
        while True:
            try:
                self.run(["true"], timeout=10)
                return
            except TransportError as exc:
                if time.monotonic() >= deadline:
                    raise TransportError(f"{self.name} does not answer ssh {self.host.boot_wait_s:g} s after a "
                                         f"power on: {exc}") from None  # fmt: skip
                log.info("%s does not answer ssh yet (%s); waiting for it to boot", self.name, exc)
                time.sleep(1.0)

    def _started_or_masked(self, op: ServiceOp, failed: CommandResult) -> None:
        """A failed start is an error unless the unit is masked (systemctl says so and exits 1)."""
        enabled = commands.service_enabled(op.unit, self.host.units)
        if self.run(list(enabled.argv), check=False, timeout=10).stdout.strip() == "masked":
            log.warning(MASKED, self.name, op.unit)
            return
        raise CommandFailed(failed.argv, failed.returncode, failed.stdout, failed.stderr, self.name)

    def _refuse_own_link(self, interface: str) -> None:
        """Taking down the link ha-ops' own SSH session uses would strand the fault: nothing could undo it."""
        out = self.transport.run(["sh", "-c", 'ip -o route get "${SSH_CONNECTION%% *}"'], check=False, timeout=10,
                                 privileged=False)  # fmt: skip
        words = out.stdout.split()
        if out.ok and "dev" in words and words[words.index("dev") + 1] == interface:
            raise HaOpsError(
                f"refusing to take {self.name} {interface} down: ha-ops reaches {self.name} through it, so nothing "
                "could bring it up again (reach the node over a management network, ansible_host)"
            )

    def interfaces(self) -> list[str]:
        out = self.run(["ip", "-o", "link", "show"], timeout=10).stdout
        names = [line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line]
        return [n for n in names if n != "lo"]

    def service_active(self, unit: str) -> bool:
        command = commands.service_active(unit, self.host.units)
        return self.run(list(command.argv), check=False, timeout=10).ok

    def has_service(self, unit: str) -> bool:
        command = commands.service_loaded(unit, self.host.units)
        return self.run(list(command.argv), check=False, timeout=10).stdout.strip() not in ("", "not-found")


class SshCluster:
    def __init__(
        self, spec: ClusterSpec, inventory: Inventory, journal_dir: Path | None = None, spec_file: Path | None = None
    ) -> None:
        self.spec = spec
        self.spec_file = spec_file
        self.inventory = inventory
        self.name = spec.name
        self.layout = compute_layout(spec)
        self.production = spec.production or inventory.production
        self.journal_dir = journal_dir or state_dir(spec.name)
        self._nodes: dict[str, SshNode] = {}
        self._lock = threading.Lock()  # a game day's watcher and its experiment ask for nodes at once
        self._scheduler = ClusterScheduler(spec, self.slurm, self._kubeconfig)
        self._tls: ReloadingContext | None = None
        self._monitoring: MonitoringSession | None = None

    def hosts(self) -> list[str]:
        return list(self.inventory.hosts)

    def cluster_value(self, name: str) -> Any:
        """A variable that describes the whole cluster (set under `all` or on any host): the first host's, as set."""
        return next((h.vars[name] for h in self.inventory.hosts.values() if h.vars.get(name)), None)

    def cluster_var(self, name: str) -> str | None:
        """cluster_value as text."""
        value = self.cluster_value(name)
        return None if value is None else str(value)

    def driver_rollouts(self) -> DriverRollouts:
        """Driver rollouts through the inventory's `ha_ops_rollout`: the host that runs `ha-ops rollout` (with
        Ansible, the rollout's inventory and Slurm's CLI), and how (ha_ops.cluster.rollouts.RolloutSite)."""
        value = self.cluster_value("ha_ops_rollout")
        if value is None:
            raise CapabilityMissing(f"{self.name} has no driver rollouts: no ha_ops_rollout in {self.inventory.source} "
                                    "(the host that runs `ha-ops rollout`)")  # fmt: skip
        site = RolloutSite.parse(value, str(self.inventory.source))
        if site.host not in self.inventory.hosts:
            raise SpecError(str(self.inventory.source), [f"ha_ops_rollout.host: {site.host!r} is not in it"])
        return DriverRollouts(self, site)

    @property
    def shared_dir(self) -> str | None:
        """A folder every GPU node sees at the same path (`ha_ops_shared_dir`): where a game day's jobs keep markers."""
        return self.cluster_var("ha_ops_shared_dir")

    def node(self, name: str) -> SshNode:
        with self._lock:
            return self._node(name)

    def _node(self, name: str) -> SshNode:
        if name not in self._nodes:
            host = self.inventory.host(name)
            transport = SSHTransport(
                name, host.address, user=host.user, port=host.port, key_file=host.key_file,
                known_hosts=host.known_hosts, become=host.become,
            )  # fmt: skip
            gpus = next((n.gpus for n in self.layout.nodes if n.name == name), 0)
            self._nodes[name] = SshNode(host, transport, gpus)
        return self._nodes[name]

    def _first(self, role: str) -> str:
        names = [n.name for n in self.layout.nodes_with_role(role) if n.name in self.inventory.hosts]
        if not names:
            raise SpecError(str(self.inventory.source), [f"no host with the {role} role of {self.name} is in it"])
        return names[0]

    def _default(self, service: Service) -> str | None:
        """The first host of the service's role that the inventory has (the spec's first may be left out of it)."""
        role = {"controller": "controller", "agent": "gpu"}.get(service)
        return self._first(role) if role else None

    def ha_ops_command(self, host: str) -> str:
        return self.inventory.host(host).ha_ops_command

    def slurm(self) -> Slurm:
        # Slurm's clients on a compute node: what users' jobs see, and it answers whichever controller leads.
        return Slurm(self.node(self._first("gpu")).transport, timeout=15)

    def scheduler(self) -> Scheduler:
        return self._scheduler.get()

    def _kubeconfig(self) -> Path | None:
        """The inventory's `ha_ops_kubeconfig` (relative to the inventory file), else kubectl's own."""
        value = self.cluster_var("ha_ops_kubeconfig")
        return (self.inventory.source.parent / Path(value).expanduser()).resolve() if value else None

    def http(
        self, service: Service, path: str, *, host: str | None = None, method: str = "GET", body: bytes | None = None,
        timeout: float = 5.0,
    ) -> tuple[int, bytes]:  # fmt: skip
        """Through the service host's own SSH session (as `ssh -L` would): the cluster network need not be routed
        to the operator's machine, and the service is reached at the address it listens on."""
        # The controllers' API over mutual TLS where the spec asks for it: the TLS runs end to end between the
        # operator's certificate here and the controller, through the SSH channel.
        secure = service == "controller" and self.spec.remediation is not None and self.spec.remediation.tls
        context = self._operator_tls().get() if secure else None
        target, port = service_endpoint(self.spec, self.layout, service, host if host else self._default(service))
        address = (
            str(self.layout.node(target).address) if target in {n.name for n in self.layout.nodes} else "127.0.0.1"
        )
        transport = self.node(target).transport
        connect = lambda h, p, t: transport.open_channel(h, p, timeout=t)  # noqa: E731
        if service in ("prometheus", "alertmanager"):  # with the inventory's certificate and password, if any
            monitoring = self._monitoring_session()
            url = f"{'https' if monitoring.client.tls else 'http'}://{address}:{port}{path}"
            return monitoring.request(connect, method, url, body, timeout)
        headers = {"Content-Type": "application/json"} if body is not None else {}
        url = f"{'https' if secure else 'http'}://{address}:{port}{path}"
        return request(connect, method, url, body, headers, timeout, context)

    def _relative_to_inventory(self, path: Path) -> Path:
        return (self.inventory.source.parent / path.expanduser()).resolve()

    def _monitoring_session(self) -> MonitoringSession:
        """Prometheus and Alertmanager as the inventory's `ha_ops_monitoring` says (ha_ops.monitoring.web's
        MonitoringClient: `tls` files and `username` with `password_file`, relative to the inventory); plain HTTP
        without it."""
        with self._lock:
            if self._monitoring is None:
                value = self.cluster_value("ha_ops_monitoring") or {}
                where = str(self.inventory.source)
                if not isinstance(value, dict):
                    raise SpecError(where, ["ha_ops_monitoring: a mapping (tls, username, password_file)"])
                try:
                    client = MonitoringClient.model_validate(value)
                except ValidationError as exc:
                    raise SpecError(where, [f"ha_ops_monitoring.{p}" for p in validation_problems(exc)]) from None
                update: dict[str, Any] = {}
                if client.tls is not None:
                    update["tls"] = client.tls.model_copy(update={
                        k: self._relative_to_inventory(getattr(client.tls, k))
                        for k in ("ca_file", "cert_file", "key_file")
                    })  # fmt: skip
                if client.password_file is not None:
                    update["password_file"] = self._relative_to_inventory(client.password_file)
                self._monitoring = MonitoringSession(client.model_copy(update=update))
            return self._monitoring

    def _operator_tls(self) -> ReloadingContext:
        """The operator's certificate for the controllers' API: the inventory's `ha_ops_tls` (ca_file, cert_file,
        key_file, relative to the inventory), loaded once and reloaded when the files rotate."""
        with self._lock:
            if self._tls is None:
                value = self.cluster_value("ha_ops_tls")
                where = str(self.inventory.source)
                if not isinstance(value, dict):
                    why = "the spec serves the controllers' API over mutual TLS (remediation.tls)"
                    raise SpecError(where, [f"ha_ops_tls: {why}; give the operator's ca_file, cert_file and key_file"])
                try:
                    files = TlsFiles.model_validate(value)
                except ValidationError as exc:
                    raise SpecError(where, [f"ha_ops_tls.{p}" for p in validation_problems(exc)]) from None
                files = files.model_copy(update={
                    k: self._relative_to_inventory(getattr(files, k)) for k in ("ca_file", "cert_file", "key_file")
                })  # fmt: skip
                self._tls = ReloadingContext(files, server=False)
            return self._tls

    def storage_checks(self) -> StorageChecks:
        """MooseFS from the first controller, which mounts it at `ha_ops_storage_mount` (default /mnt/moosefs)."""
        replicas = replicas_of(self.spec, self.name)
        client = self._first("controller")
        mount = PurePosixPath(str(self.inventory.host(client).vars.get("ha_ops_storage_mount", "/mnt/moosefs")))
        master = str(self.layout.service_addresses["mfsmaster"])
        return StorageChecks(self.node(client).transport, master, mount, replicas, self.journal_dir)

    def placeholders(self) -> dict[str, object]:
        """What a runbook's commands may name (ha_ops.runbooks.placeholders), from the inventory and the spec."""
        from ha_ops.runbooks.placeholders import PerHost, ssh_argv

        hosts = self.inventory.hosts

        def ssh(name: str) -> str:
            h = hosts[name]
            key = str(h.key_file.expanduser()) if h.key_file else None
            return shlex.join(ssh_argv(h.user, h.address, h.port, key, str(h.known_hosts.expanduser()), h.become))

        names = list(hosts)
        spec_hosts = [n.name for n in self.layout.nodes]
        inventory = str(self.inventory.source.resolve())

        def controller_config(name: str) -> str:  # (the ha_ops_controller role's, unless the inventory says)
            return str(hosts[name].vars.get("ha_ops_controller_config_file") or "/etc/ha-ops/controller.yaml")

        return {
            "cluster": self.name,
            "spec": str(self.spec_file or ""),
            "inventory": inventory,
            "target": shlex.join(["--inventory", inventory]),
            "controller_state": self.cluster_var("ha_ops_controller_state_dir") or "/var/lib/ha-ops/controller",
            "storage_watch_state": self.cluster_var("ha_ops_storage_watch_state_dir")
            or "/var/lib/ha-ops/storage-watch",
            "rollout_state": self._rollout_state(),
            "mfsmaster": str(self.layout.service_addresses.get("mfsmaster", "")),
            "ha_ops": shlex.join([sys.executable, "-m", "ha_ops"]),
            "ssh": PerHost("ssh", ssh, names),
            "on": PerHost("on", self.ha_ops_command, names),
            "address": PerHost("address", lambda name: str(self.layout.node(name).address), spec_hosts),
            "controller_config": PerHost("controller_config", controller_config, names),
        }

    def _rollout_state(self) -> str:
        try:
            return self.driver_rollouts().site.state_dir
        except CapabilityMissing:
            return RolloutSite.model_fields["state_dir"].default

    def close(self) -> None:
        self._scheduler.close()
        for node in self._nodes.values():
            node.transport.close()
            if node.power is not None:
                node.power.close()
