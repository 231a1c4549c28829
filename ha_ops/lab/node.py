"""Handles on lab nodes for tests, chaos and runbooks: run a command, control a named service, take a link
down and up, read logs. The same verbs a real node offers through its transport."""

from __future__ import annotations

import signal
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING

from ha_ops.errors import LabError
from ha_ops.gpu.fake import FakeGpus
from ha_ops.lab import kubernetes, netns, process
from ha_ops.lab.agents import gpu_dir
from ha_ops.lab.fabric import HOST_IF
from ha_ops.lab.state import LabState, ServiceState, service_key
from ha_ops.transport.lab import LabTransport
from ha_ops.util.proc import CommandResult
from ha_ops.util.wait import wait_for

if TYPE_CHECKING:
    from ha_ops.lab.cluster import Lab


class UnitMasked(LabError):
    """A start of a masked service (systemctl: "Unit ... is masked")."""


class LabNode:
    def __init__(self, lab: Lab, name: str) -> None:
        self.lab = lab
        self.name = name
        state = lab.state()
        if name != "host" and name not in state.nodes:
            raise LabError(f"no node {name!r} in lab {lab.spec.name!r}; nodes: {', '.join(state.nodes)}")

    # --- commands -------------------------------------------------------------------------------------------
    @property
    def transport(self) -> LabTransport:
        return self.lab.transport(self.name)

    def run(
        self, argv: list[str], *, timeout: float = 30.0, check: bool = True, input: str | None = None
    ) -> CommandResult:
        return self.transport.run(argv, timeout=timeout, check=check, input=input)

    # --- services -------------------------------------------------------------------------------------------
    def services(self) -> list[str]:
        return [s.service for s in self.lab.state().services.values() if s.node == self.name]

    def _service(self, state: LabState, service: str) -> ServiceState:
        svc = state.services.get(service_key(self.name, service))
        if svc is None:
            raise LabError(
                f"node {self.name} runs no service {service!r}; it runs: {', '.join(self.services()) or 'none'}"
            )
        return svc

    def _live_pid(self, service: str) -> int | None:
        state = self.lab.state()
        svc = self._service(state, service)
        return svc.pid if self.lab._service_alive(state, svc) else None

    def is_running(self, service: str) -> bool:
        pid = self._live_pid(service)
        return pid is not None and not process.is_stopped(pid)

    def is_frozen(self, service: str) -> bool:
        pid = self._live_pid(service)
        return pid is not None and process.is_stopped(pid)

    def pid(self, service: str) -> int | None:
        return self._live_pid(service)

    def stop(self, service: str, grace: float = 3.0) -> None:
        """Graceful stop (SIGTERM, then SIGKILL after `grace`)."""
        pid = self._live_pid(service)
        if pid is not None:
            process.terminate(pid, grace)

    def kill(self, service: str) -> None:
        """Abrupt death (SIGKILL), as in a crash."""
        pid = self._live_pid(service)
        if pid is not None:
            process.signal_pid(pid, signal.SIGCONT)
            process.signal_pid(pid, signal.SIGKILL)
            process.wait_gone(pid, 2.0)

    def freeze(self, service: str) -> None:
        """SIGSTOP: alive but unresponsive, the hardest failure for peers to judge."""
        pid = self._live_pid(service)
        if pid is None:
            raise LabError(f"{self.name}/{service} is not running; nothing to freeze")
        process.signal_pid(pid, signal.SIGSTOP)
        # Signal delivery is asynchronous: return once the process really is stopped.
        wait_for(f"{self.name}/{service} stopped", lambda: process.is_stopped(pid), timeout=2, interval=0.005)

    def thaw(self, service: str) -> None:
        pid = self._live_pid(service)
        if pid is not None:
            process.signal_pid(pid, signal.SIGCONT)
            wait_for(f"{self.name}/{service} running", lambda: not process.is_stopped(pid), timeout=2, interval=0.005)

    def start(self, service: str) -> int:
        """Start the service again with its original command line if it is not running; returns its PID. A masked
        service is refused (UnitMasked)."""
        with self.lab._locked():
            state = self.lab.state()
            svc = self._service(state, service)
            if self.lab._service_alive(state, svc):
                assert svc.pid is not None
                return svc.pid
            if svc.masked:
                raise UnitMasked(f"{self.name}/{service} is masked: nothing starts it until it is unmasked")
            svc.pid = self.lab._spawn(state, svc)
            state.save(self.lab.paths.state_file)
        if service == "mfsmount":
            # Services started after it (a power cycle starts them in order) keep files on it: the controller's lease
            # and state. Started before the file system is mounted, they would find the dead mount or the bare folder.
            from ha_ops.lab.storage_ops import wait_mounted

            wait_mounted(self.lab, self.name)
        return svc.pid

    def restart(self, service: str) -> int:
        self.stop(service)
        return self.start(service)

    def is_masked(self, service: str) -> bool:
        return self._service(self.lab.state(), service).masked

    def mask(self, service: str, now: bool = False) -> None:
        """`systemctl mask [--now]`: the service is not started again (by a power cycle, a rollback or anyone) until
        it is unmasked; `now` stops it too."""
        self._set_masked(service, True)
        if now:
            self.stop(service)

    def unmask(self, service: str) -> None:
        self._set_masked(service, False)

    def restore_storage_master(self) -> None:
        """`mfsmaster -a` here: the metalogger promoted (ha_ops.lab.storage_ops.start_restored_master)."""
        from ha_ops.lab.storage_ops import start_restored_master

        start_restored_master(self.lab, self.name)

    def _set_masked(self, service: str, masked: bool) -> None:
        with self.lab._locked():
            state = self.lab.state()
            self._service(state, service).masked = masked
            state.save(self.lab.paths.state_file)

    # --- power (the lab's BMC) -------------------------------------------------------------------------------
    @property
    def _dead_marker(self) -> Path:
        return self.lab.ctx.node_dir(self.name) / "hardware-dead"

    @property
    def _off_marker(self) -> Path:
        return self.lab.ctx.node_dir(self.name) / "powered-off"

    def power_off(self, permanently: bool = False) -> None:
        """Power loss: every process on the node dies (its services and the jobs it runs) and every link goes
        down. `permanently`: broken hardware, which no power cycle brings back."""
        self._off_marker.write_text("the BMC powered this node off\n")
        if permanently:
            self._dead_marker.write_text("no power cycle brings this node back\n")
        holder = self.lab.state().nodes[self.name].holder_pid  # the namespace is the hardware: it stays
        for service in self.services():
            self.kill(service)
        for pid in netns.pids_in(self.lab.ctx.netns(self.name)):
            if pid != holder:
                process.signal_pid(pid, signal.SIGCONT)
                process.signal_pid(pid, signal.SIGKILL)
        for interface in self.interfaces():
            self.link_down(interface)
        kubernetes.power(self.lab.ctx, self.name, on=False)  # a KWOK node's kubelet dies with it

    def power_is_on(self) -> bool:
        """What the node's BMC reports: on unless powered off (and not booted again since)."""
        return not self._off_marker.exists()

    def powered_on(self) -> bool:
        """Every service running and every link up: the node is as a power cycle leaves it."""
        return all(self.is_running(s) for s in self.services() if not self.is_masked(s)) and not self.links_down()

    def repair_hardware(self) -> None:
        """Dead hardware replaced: the next power cycle boots the node."""
        self._dead_marker.unlink(missing_ok=True)

    def power_cycle(self, repair: bool = False) -> None:
        """What a BMC power cycle does: the node boots again (links up, its services started afresh). A node
        powered off permanently stays dead unless `repair` (the hardware was replaced)."""
        if self._dead_marker.exists() and not repair:
            raise LabError(f"{self.name} does not come back: its hardware is dead (power cycle changed nothing)")
        self.repair_hardware()
        for service in self.services():
            self.kill(service)
        for interface in self.interfaces():
            self.link_up(interface)
        for service in self.services():
            if not self.is_masked(service):
                self.start(service)
        kubernetes.power(self.lab.ctx, self.name, on=True)
        self._off_marker.unlink(missing_ok=True)

    # --- links ----------------------------------------------------------------------------------------------
    def interfaces(self) -> list[str]:
        out = netns.ip("-o", "link", "show", netns=self.lab.ctx.netns(self.name)).stdout
        return [line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ": lo:" not in line]

    def links_down(self) -> list[str]:
        """Interfaces set administratively down (no UP among their flags)."""
        out = netns.ip("-o", "link", "show", netns=self.lab.ctx.netns(self.name)).stdout
        down = []
        for line in out.splitlines():
            name, flags = line.split(":")[1].strip().split("@")[0], line.split("<", 1)[1].split(">", 1)[0]
            if name != "lo" and "UP" not in flags.split(","):
                down.append(name)
        return down

    def link_down(self, interface: str = HOST_IF) -> None:
        self._link(interface, "down")

    def link_up(self, interface: str = HOST_IF) -> None:
        self._link(interface, "up")

    def _link(self, interface: str, updown: str) -> None:
        if interface not in self.interfaces():
            raise LabError(f"node {self.name} has no interface {interface!r}; it has: {', '.join(self.interfaces())}")
        ns = self.lab.ctx.netns(self.name)
        netns.ip("link", "set", interface, updown, netns=ns)
        if updown == "up" and interface == HOST_IF:
            # The kernel drops routes through a link that goes down; a host's network setup puts them back.
            gateway = self.lab.ctx.layout.leaf(self.lab.ctx.layout.node(self.name).leaf).gateway
            netns.ip("route", "replace", "default", "via", str(gateway), netns=ns)

    # --- fake GPUs ------------------------------------------------------------------------------------------
    def gpus(self) -> FakeGpus:
        """The node's fake GPUs, for fault injection (GPU nodes only)."""
        if "gpu" not in self.lab.ctx.layout.node(self.name).roles:
            raise LabError(f"node {self.name} has no GPUs")
        return FakeGpus(gpu_dir(self.lab.ctx, self.name))

    # --- logs -----------------------------------------------------------------------------------------------
    def log_files(self, service: str) -> list[Path]:
        svc = self._service(self.lab.state(), service)
        files = [Path(svc.log)]
        own = {"slurmctld": "slurmctld.log", "slurmd": "slurmd.log", "zebra": "../frr/zebra.log",
               "bgpd": "../frr/bgpd.log", "bfdd": "../frr/bfdd.log"}  # fmt: skip
        if service in own:
            files.append((Path(svc.log).parent / own[service]).resolve())
        return [f for f in files if f.exists()]

    def logs(self, service: str, lines: int = 100) -> str:
        """The last `lines` lines of the service's logs (its own log file and its captured output)."""
        chunks = []
        for path in self.log_files(service):
            with open(path, errors="replace") as handle:
                tail = deque(handle, maxlen=lines)
            chunks.append(f"==> {path} <==\n" + "".join(tail))
        return "\n".join(chunks)
