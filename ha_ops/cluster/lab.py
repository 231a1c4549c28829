"""The local lab behind the cluster port: nodes are network namespaces, services are the lab's supervised
processes (no init system), power is the lab's BMC (ha_ops.lab.node), GPUs are the fake backend's files. Filters and
rate limits are the very commands a real host runs (ha_ops.cluster.commands), entered into the node's namespace."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ha_ops.cluster import commands
from ha_ops.cluster.base import Service
from ha_ops.cluster.gpu import CapabilityMissing
from ha_ops.cluster.ops import FilterOp, GpuOp, LinkOp, Op, PowerOp, QdiscOp, ServiceOp, capability, describe
from ha_ops.errors import SpecError
from ha_ops.lab import netns
from ha_ops.lab.cluster import Lab
from ha_ops.lab.http import http_get, http_post
from ha_ops.lab.node import LabNode
from ha_ops.schedulers.slurm import Slurm
from ha_ops.util.proc import CommandResult, run


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
            raise CapabilityMissing(f"{self.name} cannot {describe(op)}: it lacks {capability(op)}")

    def apply(self, op: Op) -> None:
        self._require(op)
        node = self.handle
        if isinstance(op, ServiceOp):
            getattr(node, op.action)(op.unit)
        elif isinstance(op, LinkOp):
            (node.link_up if op.up else node.link_down)(op.interface)
        elif isinstance(op, PowerOp):
            if op.action == "off":
                node.power_off(permanently=op.permanent)
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
        return self.handle.is_running(unit)


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

    @classmethod
    def named(cls, name: str) -> LabCluster:
        return cls(Lab.from_state(name))

    def hosts(self) -> list[str]:
        return list(self.lab.state().nodes)  # hosts and switches, as built from the spec

    def node(self, name: str) -> LabClusterNode:
        if name not in self.hosts():
            raise SpecError(f"lab {self.name}", [f"{name!r} is not a node of it (it has {', '.join(self.hosts())})"])
        return LabClusterNode(self.lab, name)

    def slurm(self) -> Slurm:
        return Slurm(self.lab.transport(self.layout.nodes_with_role("gpu")[0].name), timeout=15)

    def http(
        self, service: Service, path: str, *, host: str | None = None, method: str = "GET", body: bytes | None = None,
        timeout: float = 5.0,
    ) -> tuple[int, bytes]:  # fmt: skip
        if service == "controller":
            if self.spec.remediation is None:
                raise SpecError(self.name, ["remediation: the spec has no remediation controller"])
            target, port = host or self.layout.nodes_with_role("controller")[0].name, self.spec.remediation.port
        else:
            mon = self.spec.monitoring
            target = host or mon.host.name
            port = mon.prometheus_port if service == "prometheus" else mon.alertmanager_port
        url = f"http://{self.layout.node(target).address}:{port}{path}"
        where = self.lab.ctx.netns(target)
        if method == "GET":
            return http_get(where, url, timeout=timeout)
        return http_post(where, url, body or b"", timeout=timeout)

    def close(self) -> None:
        return None
