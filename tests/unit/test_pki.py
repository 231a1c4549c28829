"""The cluster's certificates from its spec (ha_ops.security.pki, `ha-ops pki issue`): which identities a cluster
needs, when one is due, and the CLI that creates the CA once, issues the missing, renews the due and keeps the rest."""

from __future__ import annotations

import datetime as dt
import json
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID
from typer.testing import CliRunner

from ha_ops.cli.main import app
from ha_ops.security import pki, tls
from ha_ops.spec import compute_layout, load_spec
from tests.unit.cli_helpers import run_main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
runner = CliRunner()


def test_the_spec_names_every_identity_with_its_host_roles_and_serving_names() -> None:
    spec = load_spec(EXAMPLES / "lab.yaml")
    layout = compute_layout(spec)
    found = pki.identities(spec, layout, operator="alice")
    gpus = [n.name for n in layout.nodes_with_role("gpu")]
    controllers = [n for n in layout.nodes_with_role("controller")]
    assert set(found) == {f"agent-{g}" for g in gpus} | {f"controller-{c.name}" for c in controllers} | {
        "operator", "alertmanager", "prometheus", "audit-sink"}  # fmt: skip
    ctl = controllers[0]
    assert found[f"controller-{ctl.name}"] == pki.IdentitySpec(
        ctl.name, (pki.CONTROLLERS,), (ctl.name, str(ctl.address)), ctl.name
    )
    assert found[f"agent-{gpus[0]}"] == pki.IdentitySpec(gpus[0], (tls.AGENTS,), (), gpus[0])  # a client only
    assert found["operator"] == pki.IdentitySpec("alice", (tls.OPERATORS,), (), "")  # the admin's machine
    mon = layout.node(spec.monitoring.host.name)
    assert found["prometheus"].host == found["alertmanager"].host == mon.name
    assert str(mon.address) in found["prometheus"].server_names


def test_a_certificate_is_due_after_two_thirds_of_its_lifetime(tmp_path: Path) -> None:
    ca = pki.CertificateAuthority(tmp_path)
    ca.ensure("test CA")
    paths = ca.issue("n1", "n1", validity=dt.timedelta(hours=24))
    start, end = pki.validity(paths.cert)
    assert end - start == dt.timedelta(hours=24, minutes=5)  # valid from 5 minutes back (clock skew)
    assert not pki.renewal_due(paths.cert, start + dt.timedelta(hours=15))
    assert pki.renewal_due(paths.cert, start + dt.timedelta(hours=17))
    assert pki.renewal_due(tmp_path / "missing.crt", start)
    (tmp_path / "torn.crt").write_text("-----BEGIN CERTIFICATE-----\nnot base64\n")
    assert pki.renewal_due(tmp_path / "torn.crt", start)


def test_issue_creates_the_ca_once_then_keeps_renews_due_and_renews_all(tmp_path: Path) -> None:
    spec, folder = EXAMPLES / "lab.yaml", tmp_path / "pki"
    dry = runner.invoke(app, ["pki", "issue", "--spec", str(spec), "--dir", str(folder), "--dry-run", "--json"])
    assert dry.exit_code == 0, dry.output
    assert {c["action"] for c in json.loads(dry.output)["certificates"]} == {"issue"}
    assert not folder.exists()  # a dry run writes nothing, not even the CA

    first = runner.invoke(app, ["pki", "issue", "--spec", str(spec), "--dir", str(folder), "--json",
                                "--lifetime-hours", "1"])  # fmt: skip
    assert first.exit_code == 0, first.output
    rows = {c["name"]: c for c in json.loads(first.output)["certificates"]}
    assert {c["action"] for c in rows.values()} == {"issue"}
    assert stat.S_IMODE((folder / "ca.key").stat().st_mode) == 0o600
    root = x509.load_pem_x509_certificate((folder / "ca.crt").read_bytes())
    for name, row in rows.items():
        cert = x509.load_pem_x509_certificate((folder / f"{name}.crt").read_bytes())
        cert.verify_directly_issued_by(root)
        assert [a.value for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)] == [row["common_name"]]
        assert [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == row["roles"]
        assert stat.S_IMODE((folder / f"{name}.key").stat().st_mode) == 0o600
    ca_before = (folder / "ca.crt").read_bytes()
    serial = x509.load_pem_x509_certificate((folder / "agent-gpu1.crt").read_bytes()).serial_number

    again = runner.invoke(app, ["pki", "issue", "--spec", str(spec), "--dir", str(folder), "--json"])
    assert {c["action"] for c in json.loads(again.output)["certificates"]} == {"keep"}  # nothing due yet
    assert x509.load_pem_x509_certificate((folder / "agent-gpu1.crt").read_bytes()).serial_number == serial

    (folder / "agent-gpu1.key").unlink()  # a lost key: that one is issued again, the rest kept
    lost = runner.invoke(app, ["pki", "issue", "--spec", str(spec), "--dir", str(folder), "--json"])
    actions = {c["name"]: c["action"] for c in json.loads(lost.output)["certificates"]}
    assert actions.pop("agent-gpu1") == "issue" and set(actions.values()) == {"keep"}

    every = runner.invoke(app, ["pki", "issue", "--spec", str(spec), "--dir", str(folder), "--all", "--json"])
    assert {c["action"] for c in json.loads(every.output)["certificates"]} == {"renew"}
    assert (folder / "ca.crt").read_bytes() == ca_before  # the same CA: every holder still trusts the others


def test_plan_renews_what_is_due(tmp_path: Path) -> None:
    spec = load_spec(EXAMPLES / "lab.yaml")
    wanted = pki.identities(spec, compute_layout(spec))
    ca = pki.CertificateAuthority(tmp_path)
    ca.ensure("test CA")
    for name, i in wanted.items():
        ca.issue(name, i.common_name, groups=i.roles, server_names=i.server_names, validity=dt.timedelta(hours=24))
    now = dt.datetime.now(dt.UTC)
    assert set(pki.plan(wanted, tmp_path, now).values()) == {"keep"}
    assert set(pki.plan(wanted, tmp_path, now + dt.timedelta(hours=17)).values()) == {"renew"}


@pytest.mark.parametrize(
    "args", [["--lifetime-hours", "0"], ["--spec", "/nonexistent.yaml"], ["--operator", "alice\nCN=admin"]]
)
def test_bad_arguments_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]) -> None:
    base = {"--spec": str(EXAMPLES / "lab.yaml"), "--dir": str(tmp_path / "pki")}
    for i in range(0, len(args), 2):
        base[args[i]] = args[i + 1]
    assert run_main(monkeypatch, "pki", "issue", *[x for kv in base.items() for x in kv]) == 2
    assert not (tmp_path / "pki").exists()
