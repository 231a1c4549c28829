"""The local lab behind the cluster port: nodes are network namespaces, services are the lab's supervised
processes (no init system), power is the lab's BMC (ha_ops.lab.node), GPUs are the fake backend's files. Filters and
rate limits are the very commands a real host runs (ha_ops.cluster.commands), entered into the node's namespace."""

from __future__ import annotations

import json
import logging
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from ha_ops.cluster import commands
from ha_ops.cluster.base import Service, service_endpoint
from ha_ops.cluster.gpu import CapabilityMissing
from ha_ops.cluster.ops import FilterOp, GpuOp, LinkOp, Op, PowerOp, QdiscOp, ServiceOp, capability, describe
from ha_ops.errors import LabError, SpecError
from ha_ops.lab import netns
from ha_ops.lab.cluster import Lab
from ha_ops.lab.http import http_get, http_post
from ha_ops.lab.node import LabNode
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
            if (
                op.action == "start"
                and op.unit == "mfsmaster"
                and self.lab.state().storage_master not in (None, self.name)
            ):
                return  # the metalogger was promoted meanwhile: the old master stays fenced (two masters would split)
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
        return self.handle.is_running(unit)

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
        return Slurm(self.lab.transport(self.layout.nodes_with_role("gpu")[0].name))

    def http(
        self, service: Service, path: str, *, host: str | None = None, method: str = "GET", body: bytes | None = None,
        timeout: float = 5.0,
    ) -> tuple[int, bytes]:  # fmt: skip
        target, port = service_endpoint(self.spec, self.layout, service, host)
        url = f"http://{self.layout.node(target).address}:{port}{path}"
        where = self.lab.ctx.netns(target)
        if method == "GET":
            return http_get(where, url, timeout=timeout)
        return http_post(where, url, body or b"", timeout=timeout)

    def close(self) -> None:
        return None

    # --- the lab's own extras (ha_ops.chaos.actions.lab_extension) -------------------------------------------
    @property
    def shared_dir(self) -> Path:
        """A folder every node sees at this same path (the game day's jobs write their markers there)."""
        return self.lab.paths.shared

    def storage_master(self) -> str:
        from ha_ops.lab import storage

        return self.lab.state().storage_master or storage.master_node(self.lab.ctx)

    def storage_checks(self) -> StorageChecks:
        from ha_ops.lab import storage_ops

        replicas_of(self.spec, self.name)  # CapabilityMissing without MooseFS
        return storage_ops.storage_checks(self.lab)

    def driver_rollout(self, to: str, broken: bool, base: str, waves: str, timeout_s: float) -> str:
        from ha_ops.lab import rollouts

        self.lab.use_controllers(False)
        rollouts.prepare(self.lab, base, {to: not broken})
        current = set(rollouts.active_versions(self.lab).values())
        if len(current) != 1:
            raise LabError(f"the GPU nodes run different drivers ({', '.join(map(str, sorted(current, key=str)))})")
        (from_version,) = current
        assert from_version is not None
        argv = rollouts.rollout_args(self.lab, to, from_version, "--soak", "0", "--waves", waves)
        result = rollouts.on_operator_node(self.lab, *argv, timeout=timeout_s)
        if not result.stdout.lstrip().startswith("{"):
            raise LabError(f"the rollout to {to} printed no summary: {result.stderr[-1500:]}")
        summary = json.loads(result.stdout)
        return f"rollout to {to}: {summary['phase']}" + (f" ({summary['reason']})" if summary["reason"] else "")

    def end_driver_rollout(self) -> None:
        from ha_ops.lab import rollouts

        state = rollouts.rollout_state(self.lab)
        if state and state["phase"] not in ("halted", "completed", "aborted"):
            state_dir = str(rollouts.files(self.lab).state_dir)
            argv = [
                sys.executable,
                "-m",
                "ha_ops",
                "rollout",
                "abort",
                "--rollback",
                "--state-dir",
                state_dir,
                "--json",
            ]
            result = rollouts.on_operator_node(self.lab, *argv, timeout=900)
            if not result.ok:
                log.error("aborting the rollout failed: %s", result.stderr[-1500:])
        self.lab.use_controllers(True)

    def rollout_phase(self) -> str:
        from ha_ops.lab import rollouts

        return str(rollouts.rollout_state(self.lab).get("phase", "none"))

    def rollout_fleet_as_before(self) -> bool:
        from ha_ops.lab import rollouts

        nodes = rollouts.rollout_state(self.lab).get("nodes", {})
        active, reported = rollouts.active_versions(self.lab), rollouts.reported_versions(self.lab)
        for name, version in active.items():
            before = (nodes.get(name, {}).get("before") or {}).get("active_version")
            if version is None or reported[name] != [version] or before not in (None, version):
                return False
        return True

    def placeholders(self) -> dict[str, object]:
        """What a runbook's commands may name (ha_ops.runbooks.placeholders): {ssh:HOST} enters the node, {on:HOST}
        runs this ha-ops there, {target} names the lab, {controller_state} and {mfsmaster} as on any cluster; and, for
        lab_run steps, {lab}, {root}, {spec}, {python}."""
        from ha_ops.lab import controllers
        from ha_ops.lab.drivers import ha_ops_command
        from ha_ops.lab.inventory import write_spec
        from ha_ops.runbooks.placeholders import PerHost

        spec = write_spec(self.lab.ctx)  # the lab's own spec, for steps that rebuild or repair it
        master = self.layout.service_addresses.get("mfsmaster", "")
        ha_ops = ha_ops_command()
        hosts = self.hosts()
        return {
            "cluster": self.name, "lab": self.name, "root": str(self.lab.paths.root), "python": sys.executable,
            "spec": str(spec), "mfsmaster": str(master), "ha_ops": ha_ops, "target": f"--target lab:{self.name}",
            "controller_state": str(controllers.state_dir(self.lab.ctx)),
            "ssh": PerHost("ssh", lambda name: f"{ha_ops} lab exec {shlex.quote(name)} --name {self.name} --", hosts),
            "on": PerHost("on", lambda name: ha_ops, hosts),
            "address": PerHost("address", lambda name: str(self.layout.node(name).address),
                               [n.name for n in self.layout.nodes]),
        }  # fmt: skip
