"""A certificate authority kept in a folder, and the certificates ha-ops' parts hold.

One CA per cluster (or lab): `CertificateAuthority` creates it once and issues serving and client certificates
from it, keys written 0600 and replaced whole. A certificate's CN names its holder and its O entries its roles, as
Kubernetes reads client certificates and the controllers' API authorises them (ha_ops.security.tls).
`identities` says, from the cluster spec alone, which certificates a cluster needs: the same list for the lab's
CA (ha_ops.lab.tls) and for a cluster's (`ha-ops pki issue`, the ha_ops_pki role)."""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ha_ops.spec.layout import Layout
from ha_ops.spec.model import ClusterSpec

VALIDITY = dt.timedelta(days=365)


@dataclass(frozen=True)
class CertPaths:
    cert: Path
    key: Path


def write_private(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    pkcs8 = serialization.PrivateFormat.PKCS8
    return key.private_bytes(serialization.Encoding.PEM, pkcs8, serialization.NoEncryption())


def subject_name(common_name: str, groups: tuple[str, ...] = ()) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
    return x509.Name([*parts, x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


class CertificateAuthority:
    """A CA in `directory` (ca.crt, ca.key), created on first use and reused after, so a cluster or lab brought up
    again keeps the certificates it handed out valid."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.paths = CertPaths(directory / "ca.crt", directory / "ca.key")

    def ensure(self, common_name: str) -> None:
        if self.paths.cert.exists() and self.paths.key.exists():
            return
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(subject_name(common_name))
            .issuer_name(subject_name(common_name))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
            .sign(key, hashes.SHA256())
        )
        write_private(self.paths.key, key_pem(key))
        self.paths.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))

    def issue(
        self,
        name: str,
        common_name: str,
        *,
        groups: tuple[str, ...] = (),
        server_names: tuple[str, ...] = (),
        client: bool = True,
        validity: dt.timedelta = VALIDITY,
        renew: bool = False,
    ) -> CertPaths:
        """`name`.crt and `name`.key, signed by the CA; `server_names` (DNS names or IPs) make it a serving cert too.
        Issued when missing, or with `renew` (a rotation: a new key, the key written before its certificate)."""
        out = CertPaths(self.directory / f"{name}.crt", self.directory / f"{name}.key")
        if out.cert.exists() and out.key.exists() and not renew:
            return out
        ca_key = serialization.load_pem_private_key(self.paths.key.read_bytes(), password=None)
        ca_cert = x509.load_pem_x509_certificate(self.paths.cert.read_bytes())
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        cert = leaf_certificate(subject_name(common_name, groups), key.public_key(), ca_cert, ca_key,  # type: ignore[arg-type]
                                server_names, client, now - dt.timedelta(minutes=5), now + validity)  # fmt: skip
        store(out.cert, out.key, key_pem(key), cert.public_bytes(serialization.Encoding.PEM).decode())
        return out

    def issue_issuer(self, name: str = "issuer", common_name: str = "ha-ops issuer",
                     validity: dt.timedelta = VALIDITY) -> CertPaths:  # fmt: skip
        """An issuing CA for the controllers (ha_ops.security.issuer), signed by this CA: it may sign leaf
        certificates only (path length 0), so a controller's key can never make another CA. Always a new key."""
        out = CertPaths(self.directory / f"{name}.crt", self.directory / f"{name}.key")
        ca_key = serialization.load_pem_private_key(self.paths.key.read_bytes(), password=None)
        ca_cert = x509.load_pem_x509_certificate(self.paths.cert.read_bytes())
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(subject_name(common_name))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(min(now + validity, ca_cert.not_valid_after_utc))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
        )
        store(out.cert, out.key, key_pem(key), cert.public_bytes(serialization.Encoding.PEM).decode())
        return out


def leaf_certificate(
    subject: x509.Name,
    public_key: ec.EllipticCurvePublicKey | rsa.RSAPublicKey,
    issuer_cert: x509.Certificate,
    issuer_key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey,
    server_names: tuple[str, ...],
    client: bool,
    not_before: dt.datetime,
    not_after: dt.datetime,
) -> x509.Certificate:
    """A leaf certificate (no CA) for `public_key`: a client one, and a serving one at `server_names` (DNS names or
    IPs) when there are any. The cluster CA's (`CertificateAuthority.issue`) and the controllers' issuer's alike."""
    usages = ([ExtendedKeyUsageOID.CLIENT_AUTH] if client else []) + (
        [ExtendedKeyUsageOID.SERVER_AUTH] if server_names else []
    )
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_cert.subject)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    )
    try:  # names the issuer's key where the issuer names its own (the controllers' issuer does; the root does not)
        ski = issuer_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        aki = x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski)
        builder = builder.add_extension(aki, critical=False)
    except x509.ExtensionNotFound:
        pass
    if server_names:
        builder = builder.add_extension(x509.SubjectAlternativeName(general_names(server_names)), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def general_names(entries: tuple[str, ...]) -> list[x509.GeneralName]:
    """DNS names and IP addresses, as a certificate's subject alternative names."""
    names: list[x509.GeneralName] = []
    for entry in entries:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(entry)))
        except ValueError:
            names.append(x509.DNSName(entry))
    return names


def store(cert_file: Path, key_file: Path, key: bytes, cert: str) -> None:
    """A new key and its certificate, each file replaced whole (a reader never sees half of one), the key first:
    between the two a reader may find the new key beside the old certificate, which
    ha_ops.security.tls.ReloadingContext waits out."""
    new_key = key_file.with_name(key_file.name + ".new")
    write_private(new_key, key)
    os.replace(new_key, key_file)
    new_cert = cert_file.with_name(cert_file.name + ".new")
    new_cert.write_text(cert)
    os.replace(new_cert, cert_file)


@dataclass(frozen=True)
class IdentitySpec:
    """What one certificate says, and whose it is."""

    common_name: str  # the holder: a node's name for its controller or agent
    roles: tuple[str, ...]  # O entries (ha_ops.security.tls)
    server_names: tuple[str, ...]  # DNS names and addresses it serves at (none: a client certificate only)
    host: str  # the host whose files these are; "" for the operator's (the admin's machine)


CONTROLLERS = "ha-ops:controllers"
AUDIT_SINK = "ha-ops:audit-sink"


def identities(spec: ClusterSpec, layout: Layout, operator: str = "operator") -> dict[str, IdentitySpec]:
    """File name -> identity, for every certificate the spec's cluster needs: each controller (serving its API at its
    name and address), each GPU node's agent, the operator, Alertmanager and Prometheus (serving on the monitoring
    host, and calling the controllers), and the audit sink there."""
    from ha_ops.security import tls

    found: dict[str, IdentitySpec] = {}
    for n in layout.nodes_with_role("controller"):
        found[f"controller-{n.name}"] = IdentitySpec(n.name, (CONTROLLERS,), (n.name, str(n.address)), n.name)
    for n in layout.nodes_with_role("gpu"):
        found[f"agent-{n.name}"] = IdentitySpec(n.name, (tls.AGENTS,), (), n.name)
    found["operator"] = IdentitySpec(operator, (tls.OPERATORS,), (), "")
    mon = layout.node(spec.monitoring.host.name)
    serving = (mon.name, str(mon.address))
    found["alertmanager"] = IdentitySpec("alertmanager", (tls.ALERTMANAGER,), serving, mon.name)
    found["prometheus"] = IdentitySpec("prometheus", (tls.MONITORING,), serving, mon.name)
    found["audit-sink"] = IdentitySpec(mon.name, (AUDIT_SINK,), serving, mon.name)
    return found


def validity(cert_file: Path) -> tuple[dt.datetime, dt.datetime]:
    """When a certificate (PEM) starts and stops being valid (UTC)."""
    cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
    return cert.not_valid_before_utc, cert.not_valid_after_utc


def renewal_due(cert_file: Path, now: dt.datetime, after_fraction: float = 2 / 3) -> bool:
    """Whether a certificate should be issued again: missing or unreadable, or past `after_fraction` of its
    lifetime (two thirds: a 24-hour certificate is renewed after 16 hours, leaving two more tries at an 8-hour
    renewal interval before it expires)."""
    try:
        start, end = validity(cert_file)
    except (OSError, ValueError):
        return True
    return now >= start + (end - start) * after_fraction


def plan(wanted: dict[str, IdentitySpec], directory: Path, now: dt.datetime, every: bool = False) -> dict[str, str]:
    """File name -> `issue` (no certificate yet), `renew` (due, or `every`) or `keep`."""
    actions = {}
    for name in wanted:
        cert = directory / f"{name}.crt"
        if not cert.exists() or not (directory / f"{name}.key").exists():
            actions[name] = "issue"
        elif every or renewal_due(cert, now):
            actions[name] = "renew"
        else:
            actions[name] = "keep"
    return actions
