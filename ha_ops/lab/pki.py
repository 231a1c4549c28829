"""The lab's certificate authority (ha_ops.security.pki, one per lab) and the service-account key pair its
Kubernetes control plane needs. Keys never leave the lab's folder (0600)."""

from __future__ import annotations

from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from ha_ops.security.pki import CertPaths, key_pem, write_private


def service_account_keys(directory: Path) -> CertPaths:
    """The RSA key pair the API server verifies service-account tokens with and the controller manager signs them
    with (sa.pub, sa.key)."""
    out = CertPaths(directory / "sa.pub", directory / "sa.key")
    if out.cert.exists() and out.key.exists():
        return out
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    write_private(out.key, key_pem(key))
    out.cert.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return out
