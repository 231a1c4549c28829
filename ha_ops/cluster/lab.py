"""The local lab behind the cluster port: nodes are network namespaces, services are the lab's supervised
processes (no init system), power is the lab's BMC (ha_ops.lab.node), GPUs are the fake backend's files. Filters and
rate limits are the very commands a real host runs (ha_ops.cluster.commands), entered into the node's namespace."""

from __future__ import annotations

import logging
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from ha_ops.cluster import commands
from ha_ops.cluster.base import MASKED, ClusterScheduler, Service, service_endpoint
from ha_ops.cluster.gpu import CapabilityMissing
from ha_ops.cluster.ops import FilterOp, GpuOp, LinkOp, Op, PowerOp, QdiscOp, ServiceOp, capability, describe
from ha_ops.cluster.rollouts import DriverRollouts, RolloutSite
from ha_ops.errors import SpecError
from ha_ops.lab import kubernetes, monitoring, netns
from ha_ops.lab import tls as lab_tls
from ha_ops.lab.cluster import Lab
from ha_ops.lab.http import http_get, http_post
from ha_ops.lab.node import LabNode
from ha_ops.schedulers.base import Scheduler
from ha_ops.schedulers.slurm import Slurm
from ha_ops.storage.checks import StorageChecks, replicas_of
from ha_ops.util.proc import CommandResult, run

log = logging.getLogger(__name__)


class LabClusterNode:
    def __init__(self, lab: Lab, name: str) -> None:
        self.lab = lab
        self.name = name
        self.handle = LabNode(lab, name)
        gpu = name in _hosts(lab) and "gpu" in lab.ctx.layout.node(name).roles
        self.capabilities = frozenset(
            {"services", "links", "filters", "qdisc", "power"} | ({"gpu_faults"} if gpu else set())
        )

    def run(
        self, argv: Sequence[str], *, timeout: float = 30.0, check: bool = True, input: str | None = None
    ) -> CommandResult:
        return self.handle.run(list(argv), timeout=timeout, check=check, input=input)

    def _netns_prefix(self) -> list[str]:
        # Filters and qdiscs need only the node's network namespace (switches have no hostname or mounts of their own).
        return ["nsenter", f"--net={netns.NETNS_DIR / self.lab.ctx.netns(self.name)}"]

    def _commands(self, op: Op) -> list[commands.Command]:
        if isinstance(op, FilterOp):
            return commands.filters(op, "iptables")
        if isinstance(op, QdiscOp):
            return commands.qdisc(op)
        return []

    def render(self, op: Op) -> list[str]:
        self._require(op)
        lab_commands = self._commands(op)
        if lab_commands:
            return [f"{' '.join(self._netns_prefix())} {c}" for c in lab_commands]
        return [f"lab {self.lab.spec.name}: {describe(op)}"]

    def _require(self, op: Op) -> None:
        if capability(op) not in self.capabilities:
            raise CapabilityMissing(f"{self.name} lacks {capability(op)} for {describe(op)!r}")

    def apply(self, op: Op) -> None:
        self._require(op)
        node = self.handle
        if isinstance(op, ServiceOp):
            if op.action in ("start", "restart") and node.is_masked(op.unit):
                log.warning(MASKED, self.name, op.unit)
                return
            getattr(node, op.action)(op.unit)
        elif isinstance(op, LinkOp):
            (node.link_up if op.up else node.link_down)(op.interface)
        elif isinstance(op, PowerOp):
            if op.action == "off":
                node.power_off(permanently=op.permanent)
            elif op.action == "on" and node.powered_on():
                if op.repair:
                    node.repair_hardware()  # the controller's power cycle already brought it back: leave it running
            else:
                node.power_cycle(repair=op.repair)
        elif isinstance(op, GpuOp):
            gpus = node.gpus()
            if op.fault == "clear":
                gpus.clear(op.gpu)
            else:
                assert op.gpu is not None
                gpus.inject(op.fault, op.gpu, xid=op.xid, celsius=op.celsius, permanent=op.permanent)
        else:
            for command in self._commands(op):
                run([*self._netns_prefix(), *command.argv], input=command.input, check=command.check, timeout=10)

    def interfaces(self) -> list[str]:
        return self.handle.interfaces()

    def service_active(self, unit: str) -> bool:
        return unit in self.handle.services() and self.handle.is_running(unit)  # as systemctl: no such unit, inactive

    def has_service(self, unit: str) -> bool:
        return unit in self.handle.services()


def _hosts(lab: Lab) -> set[str]:
    return {n.name for n in lab.ctx.layout.nodes}


class LabCluster:
    def __init__(self, lab: Lab) -> None:
        self.lab = lab
        self.spec = lab.spec
        self.name = lab.spec.name
        self.layout = lab.ctx.layout
        self.production = lab.spec.production
        self.journal_dir: Path = lab.paths.root
        self._scheduler = ClusterScheduler(lab.spec, self.slurm, lambda: kubernetes.kubeconfig_path(lab.ctx))

    @classmethod
    def named(cls, name: str) -> LabCluster:
        return cls(Lab.from_state(name))

    def hosts(self) -> list[str]:
        return list(self.lab.state().nodes)  # hosts and switches, as built from the spec

    def node(self, name: str) -> LabClusterNode:
        if name not in self.hosts():
            raise SpecError(f"lab {self.name}", [f"{name!r} is not a node of it (it has {', '.join(self.hosts())})"])
        return LabClusterNode(self.lab, name)

    def ha_ops_command(self, host: str) -> str:
        from ha_ops.lab.drivers import ha_ops_command

        self.node(host)  # a name the lab has, or SpecError
        return ha_ops_command()  # lab nodes share the host's filesystem, so its interpreter

    def slurm(self) -> Slurm:
        return Slurm(self.lab.transport(self.layout.nodes_with_role("gpu")[0].name))

    def http(
        self, service: Service, path: str, *, host: str | None = None, method: str = "GET", body: bytes | None = None,
        timeout: float = 5.0,
    ) -> tuple[int, bytes]:  # fmt: skip
        if service in ("prometheus", "alertmanager"):  # over TLS with a password where the lab serves them so
            return monitoring.request(self.lab.ctx, service, path, method, body, timeout)
        target, port = service_endpoint(self.spec, self.layout, service, host)
        # The controllers' API over mutual TLS where the spec asks for it, with the lab operator's certificate.
        secure = service == "controller" and lab_tls.enabled(self.lab.ctx)
        url = f"{'https' if secure else 'http'}://{self.layout.node(target).address}:{port}{path}"
        where, context = self.lab.ctx.netns(target), lab_tls.operator_context(self.lab.ctx) if secure else None
        if method == "GET":
            return http_get(where, url, timeout=timeout, context=context)
        return http_post(where, url, body or b"", timeout=timeout, context=context)

    def scheduler(self) -> Scheduler:
        return self._scheduler.get()

    def close(self) -> None:
        self._scheduler.close()

    # --- the lab's own extras ---------------------------------------------------------------------------------
    @property
    def shared_dir(self) -> Path:
        """A folder every node sees at this same path (the game day's jobs write their markers there)."""
        return self.lab.paths.shared

    def storage_checks(self) -> StorageChecks:
        from ha_ops.lab import storage_ops

        replicas_of(self.spec, self.name)  # CapabilityMissing without MooseFS
        return storage_ops.storage_checks(self.lab)

    def driver_rollouts(self) -> LabDriverRollouts:
        from ha_ops.lab import rollouts

        return LabDriverRollouts(self, RolloutSite.model_validate(rollouts.site(self.lab.ctx)))

    def placeholders(self) -> dict[str, object]:
        """What a runbook's commands may name (ha_ops.runbooks.placeholders): {ssh:HOST} enters the node, {on:HOST}
        runs this ha-ops there, {target} names the lab, {controller_state}, {storage_watch_state}, {rollout_state}
        and {mfsmaster} as on any cluster; and, for lab_run steps, {lab}, {root}, {spec}, {python}."""
        from ha_ops.lab import controllers, rollouts, storage
        from ha_ops.lab.drivers import ha_ops_command
        from ha_ops.lab.inventory import write_spec
        from ha_ops.runbooks.placeholders import PerHost

        ctx = self.lab.ctx
        spec = write_spec(ctx)  # the lab's own spec, for steps that rebuild or repair it
        master = self.layout.service_addresses.get("mfsmaster", "")
        ha_ops = ha_ops_command()
        hosts = self.hosts()
        return {
            "cluster": self.name, "lab": self.name, "root": str(self.lab.paths.root), "python": sys.executable,
            "spec": str(spec), "mfsmaster": str(master), "ha_ops": ha_ops, "target": f"--target lab:{self.name}",
            "controller_state": str(controllers.state_dir(self.lab.ctx)),
            "storage_watch_state": str(storage.watcher_state_dir(ctx)) if storage.enabled(ctx) else "",
            "rollout_state": str(rollouts.files(self.lab).state_dir),
            "ssh": PerHost("ssh", lambda name: f"{ha_ops} lab exec {shlex.quote(name)} --name {self.name} --", hosts),
            "on": PerHost("on", lambda name: ha_ops, hosts),
            "address": PerHost("address", lambda name: str(self.layout.node(name).address),
                               [n.name for n in self.layout.nodes]),
            "controller_config": PerHost("controller_config", lambda name: str(controllers.config_path(ctx, name)),
                                         hosts),
        }  # fmt: skip


class LabDriverRollouts(DriverRollouts):
    """Rollouts in the lab: the drivers are built here first (the lab is its own package source) and the base one
    installed where the role never ran. The remediation controllers keep running: the rollout announces each batch
    to them as a maintenance window (ha_ops.rollout.coordination), so they leave a bad driver's lost GPUs alone."""

    prepares = "build the drivers, install the base one where the role never ran"

    def __init__(self, cluster: LabCluster, site: RolloutSite) -> None:
        super().__init__(cluster, site)
        self.lab = cluster.lab

    def check(self) -> None:
        """Nothing to check beforehand: prepare() installs the base driver where the role never ran."""

    def prepare(self, to: str, broken: bool, base: str) -> None:
        from ha_ops.lab import rollouts

        rollouts.prepare(self.lab, base, {to: not broken})
