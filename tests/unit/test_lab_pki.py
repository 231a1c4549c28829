"""The lab CA and the Kubernetes identities it issues (chains verify; names and groups are what RBAC reads), and the
Node objects KWOK manages for the spec's GPU nodes."""

from __future__ import annotations

import ipaddress
import stat
from collections import Counter
from pathlib import Path

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ha_ops.lab import kwok
from ha_ops.lab.context import LabContext
from ha_ops.lab.kubernetes import (
    GPU_RESOURCE,
    KWOK_LABEL,
    RACK_LABEL,
    ZONE_LABEL,
    gpu_nodes,
    node_count,
    services,
)
from ha_ops.lab.paths import LabPaths
from ha_ops.lab.pki import service_account_keys
from ha_ops.schedulers.kubernetes import POOL_LABEL, SPARE_LABEL, SPARE_TAINT_KEY
from ha_ops.security.pki import CertificateAuthority
from ha_ops.spec import compute_layout, load_spec
from ha_ops.spec.model import Kubernetes

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_certificates_chain_to_the_lab_ca_with_their_names_groups_and_private_keys(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path)
    ca.ensure("test CA")
    server = ca.issue("apiserver", "kube-apiserver", server_names=("127.0.0.1", "kubernetes.default"), client=False)
    admin = ca.issue("client-admin", "kubernetes-admin", groups=("system:masters",))
    root = x509.load_pem_x509_certificate(ca.paths.cert.read_bytes())
    for paths in (server, admin):
        cert = x509.load_pem_x509_certificate(paths.cert.read_bytes())
        cert.verify_directly_issued_by(root)
        assert stat.S_IMODE(paths.key.stat().st_mode) == 0o600
    served = x509.load_pem_x509_certificate(server.cert.read_bytes())
    sans = served.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert sans.get_values_for_type(x509.DNSName) == ["kubernetes.default"]
    assert list(served.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.SERVER_AUTH
    ]
    user = x509.load_pem_x509_certificate(admin.cert.read_bytes()).subject
    assert user.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "kubernetes-admin"
    assert [a.value for a in user.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == ["system:masters"]
    # Kept once made: a lab brought up again keeps the identities its kubeconfigs carry.
    before = admin.cert.read_bytes()
    assert ca.issue("client-admin", "kubernetes-admin").cert.read_bytes() == before
    keys = service_account_keys(tmp_path)
    assert b"PUBLIC KEY" in keys.cert.read_bytes() and stat.S_IMODE(keys.key.stat().st_mode) == 0o600


def test_gpu_nodes_carry_their_gpus_and_failure_domains_and_extra_nodes_spread_over_the_domains(
    tmp_path: Path,
) -> None:
    spec = load_spec(EXAMPLES / "lab.yaml")
    spec = spec.model_copy(update={"kubernetes": Kubernetes(extra_kwok_nodes=10)})
    ctx = LabContext(spec, compute_layout(spec), LabPaths.for_lab(spec.name, base=tmp_path))
    nodes = gpu_nodes(ctx)
    real = ctx.layout.nodes_with_role("gpu")
    assert [n["metadata"]["name"] for n in nodes[: len(real)]] == [n.name for n in real]
    assert len(nodes) == len(real) + 10
    domains = {d.name: d for d in spec.failure_domains}
    for node, layout in zip(nodes, real, strict=False):
        labels = node["metadata"]["labels"]
        assert labels[ZONE_LABEL] == domains[layout.domain].zone and labels[RACK_LABEL] == domains[layout.domain].rack
        assert node["status"]["allocatable"][GPU_RESOURCE] == str(layout.gpus)
        assert node["metadata"]["labels"][KWOK_LABEL] == "fake"
        assert labels[POOL_LABEL] == "gpu"
        # A spare takes no work until it stands in for a node: the spare taint, and a label naming it a spare.
        spare = [t for t in node["spec"]["taints"] if t["key"] == SPARE_TAINT_KEY]
        assert (bool(spare), labels.get(SPARE_LABEL) == "true") == (layout.spare, layout.spare)
    racks = Counter(n["metadata"]["labels"][RACK_LABEL] for n in nodes[len(real) :])
    assert len(racks) == len(spec.failure_domains) and max(racks.values()) - min(racks.values()) <= 1


def test_a_lab_of_thousands_of_kwok_nodes_renews_their_leases_less_often_and_waits_longer_for_them(
    tmp_path: Path,
) -> None:
    """25,000 KWOK nodes renewing every 10 s would be 2,500 lease writes a second: the renewals are capped at
    MAX_RENEWALS_PER_S in all, kube-controller-manager's grace is two missed renewals, and KWOK gets a worker per 500
    nodes; a small lab keeps a kubelet's timing (40 s leases, 20 s grace) and KWOK's 4 workers."""
    spec = load_spec(EXAMPLES / "lab.yaml")
    for extra, lease, grace, workers in ((0, 40, 20, 4), (1_496, 40, 20, 4), (9_996, 200, 100, 20),
                                         (24_996, 500, 250, 50)):  # fmt: skip
        scaled = spec.model_copy(update={"kubernetes": Kubernetes(extra_kwok_nodes=extra)})
        ctx = LabContext(scaled, compute_layout(scaled), LabPaths.for_lab(spec.name, base=tmp_path))
        nodes = len(gpu_nodes(ctx))
        assert node_count(ctx) == nodes
        assert (kwok.lease_s(nodes), kwok.node_monitor_grace_s(nodes)) == (lease, grace), extra
        assert nodes / (kwok.lease_s(nodes) / 4) <= kwok.MAX_RENEWALS_PER_S
        argv = {s.service: s.argv for s in services(ctx)}
        assert f"--node-lease-duration-seconds={lease}" in argv["kwok"]
        assert f"--node-monitor-grace-period={grace}s" in argv["kube-controller-manager"]
        options = kwok.configuration(nodes)["options"]
        assert options["nodeLeaseParallelism"] == options["nodePlayStageParallelism"] == workers
