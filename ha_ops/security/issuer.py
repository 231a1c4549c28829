"""Certificates the controllers issue themselves, so that no part needs the host holding the cluster CA's key to
renew its certificate.

The controller pair holds an *issuing CA*: an intermediate the cluster CA signed once (`ha-ops pki issuer`), allowed
to sign leaf certificates only (path length 0). With it a controller:
- **renews** a certificate for whoever presents a valid one over mutual TLS, copying the presented certificate's
  identity (subject, names it serves at, usages) and nothing from the request but its public key: a new key and a
  new lifetime for the same identity, as EST's re-enrollment (RFC 7030, 4.2.2) does;
- **enrolls** an agent pod on Kubernetes that has no certificate yet, for the node its service account token names
  (ha_ops.remediation.certificates), never a name the request chose;
- issues its own serving certificate, and renews it, without a restart (the files are reloaded, tls.ReloadingContext).

Every leaf is short-lived (24 hours by default) and chains to the cluster CA through the issuer: the files it writes
hold the leaf and then the issuer's certificate, and peers trust the cluster CA alone."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID
from pydantic import Field

from ha_ops.security.pki import key_pem, leaf_certificate, store, subject_name
from ha_ops.util.models import ConfigModel

DEFAULT_LIFETIME_S = 86_400.0
MAX_CSR_BYTES = 8 << 10  # a P-384 or RSA-4096 request is under 2 KiB
# Back-dated by this much, for clocks a little behind the issuer's.
BACKDATE = dt.timedelta(minutes=1)


class IssuerFiles(ConfigModel):
    """The issuing CA a controller signs with (an intermediate of the cluster CA; its key on the controller's own
    disk or in a Kubernetes Secret)."""

    cert_file: Path = Field(description="The issuing CA's certificate (signed by the cluster CA).")
    key_file: Path = Field(description="Its private key.")
    lifetime_s: float = Field(
        DEFAULT_LIFETIME_S, ge=10, le=7 * 86_400, description="How long each certificate issued is valid."
    )


class RequestRefused(ValueError):
    """A certificate request that is not one (not a CSR, a forged signature, a weak key): a 400 naming why."""


@dataclass(frozen=True)
class Template:
    """What a certificate says about its holder; the key comes from the request."""

    subject: x509.Name
    server_names: tuple[str, ...] = ()  # DNS names and addresses it serves at
    client: bool = True

    @property
    def common_name(self) -> str:
        names = self.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)
        return str(names[0].value) if names else ""


def template_for(common_name: str, roles: tuple[str, ...], server_names: tuple[str, ...] = ()) -> Template:
    return Template(subject_name(common_name, roles), server_names, client=True)


def template_of(presented_der: bytes) -> Template:
    """The identity of a certificate presented (DER, as `SSLSocket.getpeercert(binary_form=True)` gives it): what a
    renewal copies."""
    cert = x509.load_der_x509_certificate(presented_der)
    names: list[str] = []
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = [*san.get_values_for_type(x509.DNSName), *(str(a) for a in san.get_values_for_type(x509.IPAddress))]
    except x509.ExtensionNotFound:
        pass
    try:
        usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        client = ExtendedKeyUsageOID.CLIENT_AUTH in usages
    except x509.ExtensionNotFound:
        client = True
    return Template(cert.subject, tuple(names), client)


def request_key(csr_pem: str) -> ec.EllipticCurvePublicKey | rsa.RSAPublicKey:
    """The public key of a certificate request (PEM), once its signature shows the requester holds the private
    key; RequestRefused otherwise, or for a key weaker than P-256 or RSA-2048."""
    raw = csr_pem.encode()
    if len(raw) > MAX_CSR_BYTES:
        raise RequestRefused(f"csr: {len(raw)} bytes, at most {MAX_CSR_BYTES}")
    try:
        csr = x509.load_pem_x509_csr(raw)
        valid = csr.is_signature_valid
        key = csr.public_key()
    except (ValueError, TypeError) as exc:
        raise RequestRefused(f"csr: not a PEM certificate request ({str(exc)[:120]})") from None
    if not valid:
        raise RequestRefused("csr: its signature does not match its key")
    if isinstance(key, ec.EllipticCurvePublicKey) and key.curve.key_size >= 256:
        return key
    if isinstance(key, rsa.RSAPublicKey) and key.key_size >= 2048:
        return key
    raise RequestRefused(f"csr: a {type(key).__name__} key is not accepted (EC P-256 or larger, or RSA 2048+)")


def new_request(common_name: str) -> tuple[bytes, str]:
    """A new private key (PEM) and a request for it (PEM): what a part sends to be renewed or enrolled. The CN is
    for people reading logs only: the issuer takes the identity from elsewhere."""
    key = ec.generate_private_key(ec.SECP256R1())
    csr = x509.CertificateSigningRequestBuilder().subject_name(subject_name(common_name)).sign(key, hashes.SHA256())
    return key_pem(key), csr.public_bytes(serialization.Encoding.PEM).decode()


class Issuer:
    """Signs leaf certificates with the issuing CA. The files are read at each issue, so a renewed issuer (the
    operator's `ha-ops pki issuer` and a Secret updated) is used at once."""

    def __init__(self, files: IssuerFiles) -> None:
        self.files = files
        self.lifetime = dt.timedelta(seconds=files.lifetime_s)
        self._load()  # a missing or broken issuer is an error at start, not at the first request

    def _load(self) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey]:
        try:
            cert = x509.load_pem_x509_certificate(self.files.cert_file.read_bytes())
            key = serialization.load_pem_private_key(self.files.key_file.read_bytes(), password=None)
        except (OSError, ValueError) as exc:
            raise ValueError(f"issuer: cannot load {self.files.cert_file} and {self.files.key_file}: {exc}") from None
        if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
            raise ValueError(f"issuer: {self.files.key_file} is not an EC or RSA key")
        return cert, key

    def issue(self, csr_pem: str, template: Template, now: dt.datetime | None = None) -> str:
        """The certificate for the request's key with `template`'s identity, then the issuer's certificate (PEM)."""
        public = request_key(csr_pem)
        ca_cert, ca_key = self._load()
        now = now or dt.datetime.now(dt.UTC)
        # Never valid past the issuer itself: a chain with an expired link is refused by every peer.
        not_after = min(now + self.lifetime, ca_cert.not_valid_after_utc)
        leaf = leaf_certificate(template.subject, public, ca_cert, ca_key, template.server_names, template.client,
                                now - BACKDATE, not_after)  # fmt: skip
        pem = serialization.Encoding.PEM
        return (leaf.public_bytes(pem) + ca_cert.public_bytes(pem)).decode()

    def issue_files(self, template: Template, cert_file: Path, key_file: Path) -> None:
        """A new key and certificate for `template` into the files (the controller's own serving certificate)."""
        key, csr = new_request(template.common_name)
        store(cert_file, key_file, key, self.issue(csr, template))
