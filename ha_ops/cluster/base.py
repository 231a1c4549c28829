"""The cluster port: what chaos experiments, game days and runbook checks need from a cluster, whichever it is.
Implementations: SshCluster (a real cluster: an inventory, SSH, its BMCs) and LabCluster (the local lab through its
namespaces, for the fast tests). See docs/architecture.md, "The cluster port"."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from ha_ops.cluster.ops import Op
from ha_ops.errors import SpecError
from ha_ops.schedulers.base import Scheduler
from ha_ops.schedulers.slurm import Slurm
from ha_ops.spec.layout import Layout
from ha_ops.spec.model import ClusterSpec
from ha_ops.util.proc import CommandResult

if TYPE_CHECKING:
    from lightkube import Client

# What a node may be able to do; an operation needing a capability the node lacks is refused before anything is
# journaled or injected (ha_ops.cluster.ops.capability names the one each operation needs).
CAPABILITIES = ("services", "links", "filters", "qdisc", "power", "gpu_faults")
Service = Literal["prometheus", "alertmanager", "controller", "agent"]
# A start of a masked unit is left undone on every cluster: an operator masks a unit to fence it (a MooseFS master
# replaced by its promoted metalogger), and no rollback may bring it back (two masters would split the metadata).
MASKED = "%s: %s is masked (fenced by an operator); left stopped"


class ClusterNode(Protocol):
    name: str
    capabilities: frozenset[str]

    def run(
        self, argv: Sequence[str], *, timeout: float = 30.0, check: bool = True, input: str | None = None
    ) -> CommandResult: ...

    def render(self, op: Op) -> list[str]:
        """What `apply(op)` would run or send, one line each, for --dry-run."""
        ...

    def apply(self, op: Op) -> None:
        """Carry the operation out; CapabilityMissing when the node cannot, TransportError when it is unreachable.
        Starting a masked unit does nothing (MASKED)."""
        ...

    def interfaces(self) -> list[str]: ...

    def service_active(self, unit: str) -> bool:
        """Running and not frozen, as far as the node can tell (systemd counts a frozen unit as active)."""
        ...

    def has_service(self, unit: str) -> bool: ...


class Cluster(Protocol):
    name: str
    spec: ClusterSpec
    layout: Layout
    production: bool
    journal_dir: Path  # on the operator's machine: the fault journal outlives a killed run and an unreachable node

    def hosts(self) -> list[str]:
        """The hosts faults may target (an inventory's hosts; the lab's nodes and switches)."""
        ...

    def node(self, name: str) -> ClusterNode:
        """A host of hosts(); SpecError for any other name, before anything is touched."""
        ...

    def slurm(self) -> Slurm: ...

    def ha_ops_command(self, host: str) -> str:
        """How ha-ops runs on `host`, as a shell word list (the inventory's ha_ops_command; the lab's interpreter)."""
        ...

    def scheduler(self) -> Scheduler:
        """The scheduler the remediation controllers act on (the spec's `remediation.scheduler`): Slurm, as slurm(),
        or the Kubernetes API as the operator reaches it. Probes judge nodes in service through it."""
        ...

    def http(
        self, service: Service, path: str, *, host: str | None = None, method: str = "GET", body: bytes | None = None,
        timeout: float = 5.0,
    ) -> tuple[int, bytes]:  # fmt: skip
        """A request to a cluster service (on `host`, or its first host; an agent's on the node named): status and
        body."""
        ...

    def close(self) -> None: ...


def service_endpoint(spec: ClusterSpec, layout: Layout, service: Service, host: str | None = None) -> tuple[str, int]:
    """The host a service runs on (`host`, or the spec's first) and its port."""
    if service == "agent":
        return host or layout.nodes_with_role("gpu")[0].name, spec.monitoring.agent_port
    if service == "controller":
        if spec.remediation is None:
            raise SpecError(spec.name, ["remediation: the spec has no remediation controller"])
        return host or layout.nodes_with_role("controller")[0].name, spec.remediation.port
    mon = spec.monitoring
    return host or mon.host.name, mon.prometheus_port if service == "prometheus" else mon.alertmanager_port


class ClusterScheduler:
    """A cluster's scheduler(), opened on first use and closed with the cluster: Slurm through `slurm`, or a
    Kubernetes client for `kubeconfig()` (None: $KUBECONFIG or ~/.kube/config, as kubectl finds it)."""

    def __init__(self, spec: ClusterSpec, slurm: Callable[[], Slurm], kubeconfig: Callable[[], Path | None]) -> None:
        self.spec = spec
        self._slurm = slurm
        self._kubeconfig = kubeconfig
        self._client: Client | None = None

    def get(self) -> Scheduler:
        if self.spec.scheduler == "slurm":
            return self._slurm()
        from ha_ops.schedulers.kubernetes import KubernetesOptions, client_from_kubeconfig
        from ha_ops.schedulers.open import open_scheduler

        if self._client is None:  # (one client for the cluster's life, closed with it)
            self._client = client_from_kubeconfig(self._kubeconfig())
        options = KubernetesOptions(pool=self.spec.gpu_partition)
        return open_scheduler("kubernetes", kubernetes_client=self._client, kubernetes_options=options)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
