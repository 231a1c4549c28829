"""The one place that opens what the controller talks to: its lease, the documents that keep its state, audit log
and views (files or ConfigMaps), the Kubernetes clients they need, its certificates and the audit shipper. Everything
else receives these parts already open (app.py builds the controller from them)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ha_ops.errors import SpecError
from ha_ops.remediation.audit import AuditLog, read_key
from ha_ops.remediation.audit_sink import AuditShipper
from ha_ops.remediation.certificates import CertificateService
from ha_ops.remediation.config import ControllerConfig
from ha_ops.remediation.documents import DirectoryDocuments, Documents
from ha_ops.remediation.lease import LeaderLease, Lease
from ha_ops.remediation.snapshots import SnapshotRing
from ha_ops.remediation.store import StateStore

if TYPE_CHECKING:  # (lightkube only where the config asks for Kubernetes)
    from ha_ops.remediation.k8s_lease import LeaderLabel


@dataclass(frozen=True)
class Parts:
    """A controller's adapters, open."""

    lease: LeaderLease
    leader_label: LeaderLabel | None
    documents: Documents
    store: StateStore
    snapshots: SnapshotRing
    certificates: CertificateService | None
    shipper: AuditShipper | None
    audit: AuditLog


def open_parts(config: ControllerConfig, clock: Callable[[], float]) -> Parts:
    """Open everything the config names; a part that cannot open stops the controller at start, naming it."""
    if config.state_dir is not None:
        config.state_dir.mkdir(parents=True, exist_ok=True)
    lease = make_lease(config, clock)
    documents = make_documents(config)
    known = config.node_names()
    # Its own certificate issued before anything loads it (the API's server, the audit shipper).
    certificates = make_certificates(config, known)
    shipper = AuditShipper(config.audit_sink, config.id) if config.audit_sink is not None else None
    key = read_key(config.audit_key_file) if config.audit_key_file else None
    return Parts(
        lease=lease,
        leader_label=make_leader_label(config, lease),
        documents=documents,
        store=StateStore(documents, lease),
        snapshots=SnapshotRing(documents, config.state_snapshots, lease, clock),  # (snapshots.py)
        certificates=certificates,
        shipper=shipper,
        audit=AuditLog(documents, key=key, sink=shipper),
    )


def make_lease(config: ControllerConfig, clock: Callable[[], float]) -> LeaderLease:
    """The lease the config names: a Kubernetes Lease, or a file in the shared state folder."""
    if config.kubernetes is not None and config.kubernetes.lease is not None:
        from ha_ops.remediation.k8s_lease import KubernetesLease
        from ha_ops.schedulers.kubernetes import client_from_kubeconfig

        where = config.kubernetes.lease
        # Its own client, with a timeout under the lease's life: a renewal must not outlast the term it renews.
        client = client_from_kubeconfig(config.kubernetes.kubeconfig, timeout_s=max(1.0, config.lease_ttl_s / 2))
        return KubernetesLease(client, where.name, where.namespace, config.id, config.lease_ttl_s,
                               config.lease_margin_s, clock, watch=True)  # fmt: skip
    assert config.state_dir is not None  # (the config's validator)
    return Lease(config.state_dir, config.id, config.lease_ttl_s, config.lease_margin_s, clock)


def make_leader_label(config: ControllerConfig, lease: LeaderLease) -> LeaderLabel | None:
    """The leader label on this controller's own pod, where the config asks for it (the Kubernetes layer's),
    written through the Kubernetes lease's client: from the lease's loop, with its short timeout."""
    k8s = config.kubernetes
    if k8s is None or k8s.lease is None or not k8s.lease.label_pod:
        return None
    from ha_ops.remediation.k8s_lease import KubernetesLease, LeaderLabel

    assert isinstance(lease, KubernetesLease)  # (kubernetes.lease makes one: make_lease)
    return LeaderLabel(lease.client, k8s.lease.namespace, config.id)


def make_certificates(config: ControllerConfig, nodes: set[str]) -> CertificateService | None:
    """The issuing side, with the API server's token review when agents enroll, and this controller's own
    certificate issued if it has none; None without `certificates`."""
    if config.certificates is None:
        return None
    assert config.tls is not None  # (the config's validator)
    review = None
    if config.certificates.enrollment is not None and config.kubernetes is not None:
        from ha_ops.remediation.certificates import token_reviewer
        from ha_ops.schedulers.kubernetes import client_from_kubeconfig

        review = token_reviewer(client_from_kubeconfig(config.kubernetes.kubeconfig),
                                config.certificates.enrollment.audience)  # fmt: skip
    try:
        service = CertificateService(config.certificates, config.tls, config.id, nodes, review)
    except ValueError as exc:  # the issuer's files missing or not a certificate and key: named, at start
        raise SpecError("certificates.issuer", [str(exc)]) from None
    try:
        service.keep_own()  # its own certificate, when it serves at names of its own and has none yet
    except (OSError, ValueError) as exc:
        raise SpecError("tls.cert_file", [f"cannot write this controller's own certificate: {exc}"]) from None
    return service


def make_documents(config: ControllerConfig) -> Documents:
    """Where the state, the audit log and the views are kept: ConfigMaps, or files in the shared state folder."""
    if config.kubernetes is not None and config.kubernetes.state is not None:
        from ha_ops.remediation.k8s_documents import ConfigMapDocuments
        from ha_ops.schedulers.kubernetes import client_from_kubeconfig

        where = config.kubernetes.state
        return ConfigMapDocuments(client_from_kubeconfig(config.kubernetes.kubeconfig), where.namespace, where.prefix)
    assert config.state_dir is not None  # (the config's validator)
    return DirectoryDocuments(config.state_dir)
