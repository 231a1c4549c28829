"""`--dry-run` with a cluster: every action of the experiment is called against a planning stand-in for the cluster,
which checks each operation's target and capability on the real cluster (read-only: its hosts, interfaces and
services are asked) and records, per host, the exact commands the operation and its undo would run, instead of
running them. Nothing is injected and nothing is journaled."""

from __future__ import annotations

import importlib
import shlex
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ha_ops.chaos import target
from ha_ops.cluster.base import Cluster, ClusterNode
from ha_ops.cluster.gpu import CapabilityMissing
from ha_ops.cluster.ops import Op
from ha_ops.cluster.rollouts import DriverRollouts, driver_rollouts
from ha_ops.util.proc import CommandResult

# The lab's extras (ha_ops.cluster.lab.LabCluster) that change the cluster.
ACTING_EXTRAS = ("placeholders",)


@dataclass
class Planned:
    activity: str
    host: str
    line: str
    undo: bool = False


@dataclass
class _Recorder:
    planned: list[Planned] = field(default_factory=list)
    activity: str = ""
    undo: bool = False


class PlanningNode:
    def __init__(self, real: ClusterNode, recorder: _Recorder) -> None:
        self.real = real
        self.name = real.name
        self.capabilities = real.capabilities
        self._recorder = recorder

    def run(self, argv: Sequence[str], *, timeout: float = 30.0, check: bool = True, input: str | None = None
            ) -> CommandResult:  # fmt: skip
        return self.real.run(argv, timeout=timeout, check=check, input=input)  # what probes ask: read-only

    def render(self, op: Op) -> list[str]:
        return self.real.render(op)

    def apply(self, op: Op) -> None:
        rec = self._recorder
        rec.planned += [Planned(rec.activity, op.host, line, rec.undo) for line in self.real.render(op)]

    def interfaces(self) -> list[str]:
        return self.real.interfaces()

    def service_active(self, unit: str) -> bool:
        return self.real.service_active(unit)

    def has_service(self, unit: str) -> bool:
        return self.real.has_service(unit)


class PlanningRollouts:
    """A cluster's driver rollouts that record the rollout commands instead of running them; reads pass through."""

    READS = ("site", "check", "state", "phase", "fleet_as_before")

    def __init__(self, real: DriverRollouts, recorder: _Recorder) -> None:
        self.real = real
        self._recorder = recorder

    def __getattr__(self, name: str) -> Any:
        if name not in self.READS:
            raise AttributeError(name)
        return getattr(self.real, name)

    def _plan(self, line: str | None) -> None:
        if line is not None:
            rec = self._recorder
            rec.planned.append(Planned(rec.activity, self.real.site.host, line, rec.undo))

    def prepare(self, to: str, broken: bool, base: str) -> None:
        self._plan(self.real.prepares and f"{self.real.prepares} (to {to}, broken={broken}, base {base})")

    def start(self, to: str, waves: str, timeout_s: float) -> str:
        try:
            since: str | None = self.real.from_version()
        except CapabilityMissing:  # the lab installs its base driver first
            since = None
        self._plan(shlex.join(self.real.argv(to, waves, since)))
        return f"(dry run) rollout to {to}"

    def end(self, timeout_s: float = 900) -> None:
        self._plan(f"if the rollout is still open: {shlex.join(self.real.abort_argv())}")

    def finish(self) -> None:
        self._plan(self.real.finishes)


class PlanningCluster:
    """The real cluster's hosts and layout, a throw-away journal, and nodes that record instead of acting."""

    def __init__(self, real: Cluster, journal_dir: Path) -> None:
        self.real = real
        self.name, self.spec, self.layout, self.production = real.name, real.spec, real.layout, real.production
        self.journal_dir = journal_dir
        self.recorder = _Recorder()
        if hasattr(real, "lab"):
            self.lab = real.lab  # the lab's extras are recorded by name below, never run

    def hosts(self) -> list[str]:
        return self.real.hosts()

    def node(self, name: str) -> PlanningNode:
        return PlanningNode(self.real.node(name), self.recorder)

    def ha_ops_command(self, host: str) -> str:
        return self.real.ha_ops_command(host)

    def slurm(self):  # -> Slurm
        return self.real.slurm()

    def scheduler(self):  # -> Scheduler (read by probes; no action changes it)
        return self.real.scheduler()

    def http(self, *args: Any, **kwargs: Any) -> tuple[int, bytes]:
        return self.real.http(*args, **kwargs)

    def driver_rollouts(self) -> PlanningRollouts:
        return PlanningRollouts(driver_rollouts(self.real), self.recorder)

    def plan_note(self, host: str, line: str) -> None:
        """A step a rollback would take that is not one operation (waiting for the cluster to be whole again)."""
        self.recorder.planned.append(Planned(self.recorder.activity, host, line, self.recorder.undo))

    def note_undo(self, ops: list[Op]) -> None:
        before, self.recorder.undo = self.recorder.undo, True
        try:
            for op in ops:
                self.node(op.host).apply(op)
        finally:
            self.recorder.undo = before

    def close(self) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        # The lab's extras: those that act (a driver rollout) are recorded, not run; those that read pass through.
        if not hasattr(self.real, name):
            raise AttributeError(name)
        if name not in ACTING_EXTRAS:
            return getattr(self.real, name)

        def planned(*args: Any, **kwargs: Any) -> str:
            shown = ", ".join([*map(repr, args), *(f"{k}={v!r}" for k, v in kwargs.items())])
            self.recorder.planned.append(Planned(self.recorder.activity, "lab", f"{name}({shown})", self.recorder.undo))
            return f"(dry run) {name}"

        return planned


def plan_commands(experiment: dict[str, Any], cluster: Cluster) -> list[Planned]:
    """Per host, what each action of the method and of the rollbacks would run (undo lines marked)."""
    from chaoslib import substitute

    configuration = experiment.get("configuration", {})
    with tempfile.TemporaryDirectory(prefix="ha-ops-dry-run-") as journal:
        planning = PlanningCluster(cluster, Path(journal))
        with target.using(planning, configuration):  # type: ignore[arg-type]
            for section in ("method", "rollbacks"):
                for activity in experiment.get(section) or []:
                    provider = activity.get("provider", {})
                    if activity.get("type") != "action" or provider.get("type") != "python":
                        continue
                    if provider.get("func") == "hold_fault":
                        planning.recorder.planned.append(Planned(activity["name"], "-", "hold the fault", False))
                        continue
                    planning.recorder.activity = activity.get("name", provider.get("func", ""))
                    planning.recorder.undo = section == "rollbacks"
                    func = getattr(importlib.import_module(provider["module"]), provider["func"])
                    arguments = substitute(provider.get("arguments") or {}, configuration, {})
                    func(**arguments, configuration=configuration)
    return planning.recorder.planned
