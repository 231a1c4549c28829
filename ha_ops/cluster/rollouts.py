"""Driver rollouts on a cluster, for chaos experiments and runbook checks: `ha-ops rollout` run where the operator
runs it (the cluster's rollout host, with Ansible, the rollout's inventory and Slurm's CLI) through the cluster's own
transport, and each GPU node's driver read back from the node itself (the gpu_driver role's fact, and nvidia-smi).

The same code drives a cluster over SSH (the inventory's `ha_ops_rollout`) and the lab (ha_ops.cluster.lab, whose
rollout host is reached through its namespaces and which builds its fake drivers first)."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from typing import Any

from pydantic import Field, ValidationError

from ha_ops.cluster.base import Cluster
from ha_ops.cluster.gpu import CapabilityMissing
from ha_ops.errors import HaOpsError, SpecError
from ha_ops.rollout.ansible import DEFAULT_VERSION_COMMAND
from ha_ops.spec.load import validation_problems
from ha_ops.spec.model import StrictModel

TERMINAL = ("halted", "completed", "aborted")
DEFAULT_FACT_FILE = "/etc/ansible/facts.d/gpu_driver.fact"


class RolloutSite(StrictModel):
    """Where and how `ha-ops rollout` runs for a cluster (the inventory's `ha_ops_rollout`)."""

    host: str  # the rollout host: an inventory host
    command: list[str] = Field(default_factory=lambda: ["ha-ops", "rollout"], min_length=1)  # ha-ops rollout there
    state_dir: str = "/var/lib/ha-ops/rollout"  # on the rollout host
    driver_args: list[str] = Field(default_factory=list)  # `rollout driver` flags: --spec, --inventory, ...
    version_command: str = DEFAULT_VERSION_COMMAND  # on a GPU node: each GPU's driver version, one per line
    fact_file: str = DEFAULT_FACT_FILE  # the gpu_driver role's fact on a GPU node; {host} is the node's name

    @classmethod
    def parse(cls, value: Any, where: str) -> RolloutSite:
        try:
            return cls.model_validate(value)
        except ValidationError as exc:
            raise SpecError(where, [f"ha_ops_rollout.{p}" for p in validation_problems(exc)]) from None


class RolloutFailed(HaOpsError):
    """`ha-ops rollout` on the rollout host failed to run (not a rollout that halted: that is its result)."""

    exit_code = 1


def fleet_as_before(before: Mapping[str, str | None], active: Mapping[str, str | None],
                    reported: Mapping[str, list[str]]) -> bool:  # fmt: skip
    """Every GPU node runs the driver it ran before the rollout (`before`: None where the rollout never read it),
    and its GPUs report exactly that one."""
    return all(
        version is not None and reported.get(node) == [version] and before.get(node) in (None, version)
        for node, version in active.items()
    )


class DriverRollouts:
    def __init__(self, cluster: Cluster, site: RolloutSite) -> None:
        self.cluster = cluster
        self.site = site
        self.gpu_nodes = [n.name for n in cluster.layout.nodes_with_role("gpu") if n.name in cluster.hosts()]

    def _rollout(self, *args: str, timeout: float = 60) -> tuple[bool, str, str]:
        result = self.cluster.node(self.site.host).run([*self.site.command, *args], check=False, timeout=timeout)
        return result.ok, result.stdout, result.stderr

    def argv(self, to: str, waves: str, from_version: str | None) -> list[str]:
        """`rollout driver` as the rollout host runs it: no soak (a game day has minutes), a JSON summary."""
        since = ["--from-version", from_version] if from_version else []
        return [*self.site.command, "driver", "--to", to, *since, *self.site.driver_args, "--state-dir",
                self.site.state_dir, "--soak", "0", "--waves", waves, "--json"]  # fmt: skip

    def state(self) -> dict[str, Any]:
        """The rollout's state from `rollout status --json` ({} when there has been none)."""
        ok, out, err = self._rollout("status", "--state-dir", self.site.state_dir, "--json")
        if not ok:
            if "no rollout in" in err:
                return {}
            raise RolloutFailed(f"rollout status on {self.site.host} failed: {err.strip()[-500:]}")
        return dict(json.loads(out)["state"])

    def current(self, previous: str | None = None) -> dict[str, Any]:
        """The rollout's state, or {} while it is still `previous` (the id of the rollout before a fault's own,
        "" for none): a rollout fault's probes never judge the rollout before it."""
        state = self.state()
        return {} if previous is not None and state.get("id", "") == previous else state

    def phase(self, previous: str | None = None) -> str:
        return str(self.current(previous).get("phase", "none"))

    def active_versions(self) -> dict[str, str | None]:
        """Each GPU node's active driver from the role's fact (None where the role never installed one)."""
        out: dict[str, str | None] = {}
        for name in self.gpu_nodes:
            fact = self.cluster.node(name).run(["cat", self.site.fact_file.format(host=name)], check=False, timeout=15)
            out[name] = json.loads(fact.stdout).get("active_version") if fact.ok and fact.stdout.strip() else None
        return out

    def reported_versions(self) -> dict[str, list[str]]:
        """The driver versions each GPU node's GPUs report (nvidia-smi), distinct and sorted."""
        out = {}
        for name in self.gpu_nodes:
            result = self.cluster.node(name).run(["sh", "-c", self.site.version_command], check=False, timeout=30)
            out[name] = sorted({line.strip() for line in result.stdout.splitlines() if line.strip()})
        return out

    def fleet_as_before(self, previous: str | None = None) -> bool:
        """Judged once the rollout ended (any rollout, without `previous`; else the one after it)."""
        state = self.current(previous)
        if previous is not None and state.get("phase") not in TERMINAL:
            return False
        nodes = state.get("nodes", {})
        before = {name: (nodes.get(name, {}).get("before") or {}).get("active_version") for name in self.gpu_nodes}
        return fleet_as_before(before, self.active_versions(), self.reported_versions())

    def from_version(self) -> str:
        """The one driver the fleet runs now; refused where a GPU node has none from the role, or they differ."""
        active = self.active_versions()
        bare = sorted(n for n, v in active.items() if v is None)
        if bare:
            raise CapabilityMissing(
                f"{', '.join(bare)} run(s) no driver from the gpu_driver role (no {self.site.fact_file}): a rollout "
                "needs the fleet on one (playbooks/driver-rollout.yml; in the lab, `ha-ops lab driver-install VERSION`)"
            )
        versions = sorted({str(v) for v in active.values()})
        if len(versions) != 1:
            raise CapabilityMissing(f"the GPU nodes run different drivers ({', '.join(versions)})")
        return versions[0]

    def check(self) -> None:
        """What must hold before a rollout fault goes in (read-only): the fleet on one driver from the role."""
        self.from_version()

    # What prepare() and finish() do, for a dry run (None: nothing).
    prepares: str | None = None
    finishes: str | None = None

    def prepare(self, to: str, broken: bool, base: str) -> None:
        """Before a rollout: nothing on a real cluster, whose package source has `to` (and whose fleet runs a driver
        from the role). The lab builds `to` (broken: a build that loses every GPU) and installs `base` first."""

    def finish(self) -> None:
        """After a rollout fault is undone (nothing, on a real cluster and in the lab)."""

    def start(self, to: str, waves: str, timeout_s: float) -> str:
        """Roll `to` out and block until the rollout ends; its phase and reason."""
        argv = self.argv(to, waves, self.from_version())
        result = self.cluster.node(self.site.host).run(argv, check=False, timeout=timeout_s)
        if not result.stdout.lstrip().startswith("{"):
            raise RolloutFailed(f"the rollout to {to} on {self.site.host} printed no summary: "
                                f"{(result.stderr or result.stdout)[-1500:]}")  # fmt: skip
        summary = json.loads(result.stdout)
        return f"rollout to {to}: {summary['phase']}" + (f" ({summary['reason']})" if summary["reason"] else "")

    def abort_argv(self) -> list[str]:
        return [*self.site.command, "abort", "--rollback", "--state-dir", self.site.state_dir, "--json"]

    def end(self, timeout_s: float = 900) -> None:
        """A rollout still open is aborted with every node it changed rolled back."""
        if self.state().get("phase", "none") in (*TERMINAL, "none"):
            return
        result = self.cluster.node(self.site.host).run(self.abort_argv(), check=False, timeout=timeout_s)
        if not result.ok:
            raise RolloutFailed(f"aborting the rollout on {self.site.host} failed: {result.stderr[-1500:]}")

    def describe(self, argv: list[str]) -> str:
        return f"{self.site.host}: {shlex.join(argv)}"


def driver_rollouts(cluster: Cluster) -> DriverRollouts:
    """The cluster's driver rollouts; CapabilityMissing where it names no rollout host."""
    offer = getattr(cluster, "driver_rollouts", None)
    if offer is None:
        raise CapabilityMissing(f"{cluster.name} has no driver rollouts")
    return offer()  # type: ignore[no-any-return]
