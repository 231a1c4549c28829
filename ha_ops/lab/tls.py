"""The lab's certificates for ha-ops' own parts, issued by the lab's CA (spec `remediation.tls`): each controller
(serving its API at its address), each GPU node's agent, the host's operator (the CLI, the tests, the game days'
probes), Alertmanager (posting alerts), Prometheus (scraping) and the audit sink (serving syslog over TLS).
`rotate` issues them all again with new keys: the lab's rotation, which production leaves to the ha_ops_pki role
or cert-manager."""

from __future__ import annotations

import datetime as dt
import ssl
from pathlib import Path

from ha_ops.lab.context import LabContext
from ha_ops.security import pki
from ha_ops.security.issuer import IssuerFiles
from ha_ops.security.pki import CertificateAuthority
from ha_ops.security.tls import ReloadingContext, TlsFiles

OPERATOR = "lab-operator"
LIFETIME = dt.timedelta(hours=24)  # the production default; rotate() may make them shorter


def enabled(ctx: LabContext) -> bool:
    return ctx.spec.remediation is not None and ctx.spec.remediation.tls


def folder(ctx: LabContext) -> Path:
    return ctx.paths.root / "pki"


def _ca(ctx: LabContext) -> CertificateAuthority:
    ca = CertificateAuthority(folder(ctx))
    ca.ensure(f"ha-ops lab {ctx.spec.name} CA")
    return ca


def identities(ctx: LabContext) -> dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]]:
    """File name -> (CN, roles, server names) for every certificate the lab issues: those the spec's cluster needs
    (ha_ops.security.pki.identities), the operator's named for the lab."""
    return {
        name: (i.common_name, i.roles, i.server_names)
        for name, i in pki.identities(ctx.spec, ctx.layout, operator=OPERATOR).items()
    }


def prepare(ctx: LabContext) -> None:
    """Every certificate, issued when missing (a lab brought up again keeps them)."""
    if enabled(ctx):
        ca = _ca(ctx)
        for name, (cn, roles, servers) in identities(ctx).items():
            ca.issue(name, cn, groups=roles, server_names=servers, validity=LIFETIME)
        if not issuer_files(ctx).cert_file.exists():
            ca.issue_issuer()


def issuer_files(ctx: LabContext) -> IssuerFiles:
    """The controllers' issuing CA (ha_ops.security.issuer), signed by the lab's CA: they renew certificates."""
    return IssuerFiles(cert_file=folder(ctx) / "issuer.crt", key_file=folder(ctx) / "issuer.key")


def rotate(ctx: LabContext, lifetime: dt.timedelta = LIFETIME) -> list[str]:
    """Every certificate issued again with a new key; the names rotated."""
    ca = _ca(ctx)
    for name, (cn, roles, servers) in identities(ctx).items():
        ca.issue(name, cn, groups=roles, server_names=servers, validity=lifetime, renew=True)
    return list(identities(ctx))


def files(ctx: LabContext, name: str) -> TlsFiles:
    """The files of one identity (`controller-ctl1`, `agent-gpu1`, `operator`, ...), as the lab's processes see them:
    they live in the lab's folder, which every node's namespace sees at the same path."""
    return TlsFiles(ca_file=folder(ctx) / "ca.crt", cert_file=folder(ctx) / f"{name}.crt",
                    key_file=folder(ctx) / f"{name}.key")  # fmt: skip


_CLIENTS: dict[Path, ReloadingContext] = {}  # one per certificate: each reloads itself when its files rotate


def client_context(ctx: LabContext, name: str = "operator") -> ssl.SSLContext:
    """A client context with the certificate of `name` (`operator`, `agent-gpu1`, ...), loaded once and reloaded
    when its files rotate (not read from disk again for every request)."""
    identity = files(ctx, name)
    if identity.cert_file not in _CLIENTS:
        _CLIENTS[identity.cert_file] = ReloadingContext(identity, server=False)
    return _CLIENTS[identity.cert_file].get()


def operator_context(ctx: LabContext) -> ssl.SSLContext:
    return client_context(ctx, "operator")


def config_block(ctx: LabContext, name: str) -> dict[str, str]:
    """The `tls` section of a ha-ops config for an identity."""
    f = files(ctx, name)
    return {"ca_file": str(f.ca_file), "cert_file": str(f.cert_file), "key_file": str(f.key_file)}
