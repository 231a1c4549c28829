"""The one place a scheduler adapter is opened, for every caller (the remediation controller, a rollout, the agent,
a cluster port): which adapter, over which transport or client. The Kubernetes client library is imported only when
Kubernetes is asked for."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal

from ha_ops.schedulers.base import Scheduler
from ha_ops.schedulers.slurm import Slurm

if TYPE_CHECKING:
    from lightkube import Client

    from ha_ops.schedulers.kubernetes import KubernetesOptions

SchedulerKind = Literal["slurm", "kubernetes"]


def local_slurm(host: str | None = None, timeout: float = 10.0) -> Slurm:
    """Slurm through its commands on this host (`host`: this host's name in the cluster, for messages)."""
    from ha_ops.transport.local import LocalTransport

    return Slurm(LocalTransport(host), timeout=timeout)


def open_scheduler(
    kind: SchedulerKind,
    *,
    slurm_host: str | None = None,
    slurm_timeout: float = 10.0,
    kubernetes_client: Client | None = None,
    kubeconfig: Path | None = None,
    kubernetes_options: KubernetesOptions | None = None,
) -> Scheduler:
    """Slurm (this host's commands, as `slurm_host`) or Kubernetes (through
    `kubernetes_client`, or a client for `kubeconfig`: None, the pod's service account or $KUBECONFIG)."""
    if kind == "slurm":
        return local_slurm(slurm_host, slurm_timeout)
    from ha_ops.schedulers.kubernetes import KubernetesOptions, KubernetesScheduler, client_from_kubeconfig

    client = kubernetes_client or client_from_kubeconfig(kubeconfig)
    return KubernetesScheduler(client, kubernetes_options or KubernetesOptions())
