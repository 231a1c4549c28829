"""The lab's certificate authority: one CA per lab, and the serving and client certificates its Kubernetes control
plane needs. Keys never leave the lab's folder (0600). Kubernetes maps a client certificate's CN to the user and
its O entries to groups, which is what RBAC then authorises."""

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

VALIDITY = dt.timedelta(days=365)


@dataclass(frozen=True)
class CertPaths:
    cert: Path
    key: Path


def _write_private(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    pkcs8 = serialization.PrivateFormat.PKCS8
    return key.private_bytes(serialization.Encoding.PEM, pkcs8, serialization.NoEncryption())


def _name(common_name: str, groups: tuple[str, ...] = ()) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
    return x509.Name([*parts, x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


class LabCA:
    """A CA in `directory` (ca.crt, ca.key), created on first use and reused after, so a lab brought up again keeps
    the kubeconfigs it handed out valid."""

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
            .subject_name(_name(common_name))
            .issuer_name(_name(common_name))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
            .sign(key, hashes.SHA256())
        )
        _write_private(self.paths.key, _key_pem(key))
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
        usages = ([ExtendedKeyUsageOID.CLIENT_AUTH] if client else []) + (
            [ExtendedKeyUsageOID.SERVER_AUTH] if server_names else []
        )
        now = dt.datetime.now(dt.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, groups))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + validity)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        )
        if server_names:
            sans: list[x509.GeneralName] = []
            for entry in server_names:
                try:
                    sans.append(x509.IPAddress(ipaddress.ip_address(entry)))
                except ValueError:
                    sans.append(x509.DNSName(entry))
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
        # Each file replaced whole (a reader never sees half of one); between the two a reader may find the new key
        # beside the old certificate, which ha_ops.security.tls.ReloadingContext waits out.
        _write_private(out.key.with_suffix(".key.new"), _key_pem(key))
        os.replace(out.key.with_suffix(".key.new"), out.key)
        out.cert.with_suffix(".crt.new").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        os.replace(out.cert.with_suffix(".crt.new"), out.cert)
        return out


def service_account_keys(directory: Path) -> CertPaths:
    """The RSA key pair the API server verifies service-account tokens with and the controller manager signs them
    with (sa.pub, sa.key)."""
    out = CertPaths(directory / "sa.pub", directory / "sa.key")
    if out.cert.exists() and out.key.exists():
        return out
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write_private(out.key, _key_pem(key))
    out.cert.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return out
