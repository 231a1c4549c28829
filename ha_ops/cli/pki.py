"""`ha-ops pki`: the cluster CA's certificates for ha-ops' parts, issued from the spec (the ha_ops_pki role runs it
on the Ansible controller and copies each host's files there)."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import typer

from ha_ops.cli import output

app = typer.Typer(help="The cluster CA and the certificates of ha-ops' parts.", no_args_is_help=True)


@app.command()
def issue(
    spec_file: Path = typer.Option(..., "--spec", "-s", help="Cluster spec (YAML).", dir_okay=False),
    directory: Path = typer.Option(
        ..., "--dir", "-d", help="The CA's folder: ca.crt, ca.key and every certificate.", file_okay=False
    ),
    lifetime_hours: float = typer.Option(
        24.0,
        "--lifetime-hours",
        min=0.01,
        max=24 * 397,
        help="How long each new certificate is valid (short: renewed, not revoked).",
    ),
    every: bool = typer.Option(False, "--all", help="Issue every certificate again, due or not (a key rotation)."),
    operator: str = typer.Option("operator", "--operator", help="The operator certificate's CN (audited by name)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Say what would be issued; write nothing."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Create the cluster CA in DIR once, then issue each certificate the spec needs that is missing, and renew each
    past two thirds of its lifetime: every controller, GPU node agent, Prometheus, Alertmanager, the audit sink and
    the operator. Run it more often than a third of the lifetime (every 8 h for 24 h certificates)."""
    from ha_ops.security import pki
    from ha_ops.spec import compute_layout, load_spec

    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}", operator):
        raise typer.BadParameter(
            "letters, digits and . _ @ - only, at most 64 (it becomes the CN)", param_hint="--operator"
        )

    spec = load_spec(spec_file)
    wanted = pki.identities(spec, compute_layout(spec), operator=operator)
    now = dt.datetime.now(dt.UTC)
    actions = pki.plan(wanted, directory, now, every=every)
    if not dry_run:
        ca = pki.CertificateAuthority(directory)
        ca.ensure(f"ha-ops {spec.name} CA")
        lifetime = dt.timedelta(hours=lifetime_hours)
        for name, action in actions.items():
            if action != "keep":
                i = wanted[name]
                ca.issue(name, i.common_name, groups=i.roles, server_names=i.server_names, validity=lifetime,
                         renew=True)  # fmt: skip
    rows = []
    for name, action in actions.items():
        cert = directory / f"{name}.crt"
        expires = pki.validity(cert)[1].isoformat() if cert.exists() else None
        rows.append({"name": name, "host": wanted[name].host, "action": action, "expires": expires,
                     "common_name": wanted[name].common_name, "roles": list(wanted[name].roles)})  # fmt: skip
    if json_out:
        output.emit_json({"dir": str(directory), "dry_run": dry_run, "certificates": rows})
        return
    verb = "would be" if dry_run else "were"
    for row in rows:
        output.result(f"{row['action']:6} {row['name']:28} {row['host'] or '(operator)':12} expires {row['expires']}")
    changed = sum(r["action"] != "keep" for r in rows)
    output.info(f"{changed} of {len(rows)} certificates {verb} issued in {directory}")


@app.command()
def issuer(
    directory: Path = typer.Option(
        ...,
        "--dir",
        "-d",
        help="The CA's folder (ca.crt, ca.key): issuer.crt and issuer.key are written there.",
        file_okay=False,
    ),
    lifetime_days: float = typer.Option(90.0, "--lifetime-days", min=1, max=3650, help="How long the issuer is valid."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Say what would be written; write nothing."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Make the controllers' issuing CA: an intermediate of the cluster CA in DIR that may sign leaf certificates
    only. The controllers hold it (`certificates.issuer`; on Kubernetes the Secret ha-ops-issuer) and renew every
    part's certificate themselves, and enroll agent pods (docs/security.md). Each run makes a new key."""
    from ha_ops.security import pki

    ca = pki.CertificateAuthority(directory)
    if not (ca.paths.cert.exists() and ca.paths.key.exists()):
        raise typer.BadParameter(f"{directory}: no cluster CA there (ca.crt and ca.key; `ha-ops pki issue` makes it)",
                                 param_hint="--dir")  # fmt: skip
    target = directory / "issuer.crt"
    if not dry_run:
        ca.issue_issuer(validity=dt.timedelta(days=lifetime_days))
    expires = pki.validity(target)[1].isoformat() if target.exists() else None
    if json_out:
        output.emit_json({"dir": str(directory), "dry_run": dry_run, "issuer": str(target), "expires": expires})
        return
    output.result(f"{'would write' if dry_run else 'wrote'} {target} and {directory / 'issuer.key'}"
                  + (f" (expires {expires})" if expires and not dry_run else ""))  # fmt: skip


@app.command()
def renew(
    url: list[str] = typer.Option(..., "--url", help="A controller's base URL (https://host:8800); repeat for each."),
    cert: Path = typer.Option(..., "--cert", help="The certificate to renew (replaced in place)."),
    key: Path = typer.Option(..., "--key", help="Its key (replaced by a new one)."),
    ca: Path = typer.Option(..., "--ca", help="The cluster CA's certificate."),
    only_if_due: bool = typer.Option(
        False, "--if-due", help="Only past two thirds of its lifetime (for a timer that runs often)."
    ),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Renew a certificate through the controllers: a new key, and the same identity (CN, roles, names) for a new
    lifetime, signed by their issuer. For parts that are not agents (Prometheus, Alertmanager, the audit sink, an
    operator): a timer running this replaces `playbooks/pki.yml` runs. Exit 1 if no controller renewed it."""
    from ha_ops.errors import TransportError
    from ha_ops.remediation.certificate_client import renew as renew_through
    from ha_ops.security.pki import renewal_due, validity
    from ha_ops.security.tls import TlsFiles

    for path, option in ((cert, "--cert"), (key, "--key"), (ca, "--ca")):
        if not path.is_file():
            raise typer.BadParameter(f"{path}: no such file", param_hint=option)
    if only_if_due and not renewal_due(cert, dt.datetime.now(dt.UTC)):
        _renewed(json_out, cert, False, validity(cert)[1])
        return
    try:
        expires = renew_through(TlsFiles(ca_file=ca, cert_file=cert, key_file=key), url)
    except TransportError as exc:
        output.error(str(exc))
        raise typer.Exit(1) from None
    _renewed(json_out, cert, True, expires)


def _renewed(json_out: bool, cert: Path, renewed: bool, expires: dt.datetime) -> None:
    if json_out:
        output.emit_json({"cert": str(cert), "renewed": renewed, "expires": expires.isoformat()})
    else:
        output.result(f"{cert}: {'renewed' if renewed else 'not due'}, expires {expires.isoformat()}")
