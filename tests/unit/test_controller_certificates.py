"""The controllers as their cluster's issuer, over real sockets on 127.0.0.1: a renewal keeps the caller's own
identity whatever its request says, an agent pod is enrolled for the node its token review names and nothing else,
the enrollment port answers no other request, and a controller serves with a certificate it issued itself. Peers
trust the cluster CA only: every certificate here verifies through the issuer's chain. (The API server's token
review is a function here; test_kubernetes runs the real one.)"""

from __future__ import annotations

import datetime as dt
import json
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from typer.testing import CliRunner

from ha_ops.cli.main import app
from ha_ops.errors import TransportError
from ha_ops.health.config import ControllerReporting
from ha_ops.remediation.certificate_client import Renewer, enroll, renew
from ha_ops.remediation.certificates import CertificatesConfig, CertificateService, EnrollmentConfig, enrolled_node
from ha_ops.remediation.config import ControllerConfig
from ha_ops.remediation.server import serve, serve_public
from ha_ops.security import tls
from ha_ops.security.issuer import Issuer, IssuerFiles, RequestRefused, new_request, template_for
from ha_ops.security.pki import CertificateAuthority, subject_name
from ha_ops.security.tls import CertificateContext, Enrollment, ReloadingContext, TlsFiles
from tests.unit.test_controller_tls import Caller, issue
from tests.unit.test_remediation_server import Clock, make_controller, report_body

ACCOUNT = "system:serviceaccount:ha-ops:ha-ops-agent"
AUDIENCE = "ha-ops-controller"


def review_of(node: str | None, account: str = ACCOUNT, audience: str = AUDIENCE, ok: bool = True) -> dict[str, Any]:
    extra = {"authentication.kubernetes.io/node-name": [node]} if node else {}
    return {"authenticated": ok, "audiences": [audience], "user": {"username": account, "extra": extra}}


# What the fake API server says of each token.
REVIEWS = {
    "token-of-n2": review_of("n2"),
    "token-of-a-stranger-node": review_of("gpu99"),
    "token-of-another-account": review_of("n2", account="system:serviceaccount:default:default"),
    "token-for-another-audience": review_of("n2", audience="https://kubernetes.default.svc"),
    "token-not-bound-to-a-pod": review_of(None),
    "expired-token": review_of("n2", ok=False),
    # Issue 44, finding 12: an answer that is not a TokenReview status is the API server's failure, named as such.
    "token-with-a-malformed-review": {"authenticated": True, "audiences": AUDIENCE, "user": ["n2"]},
}


@pytest.fixture
def ca(tmp_path: Path) -> CertificateAuthority:
    authority = CertificateAuthority(tmp_path / "ca")
    authority.ensure("ha-ops test CA")
    authority.issue_issuer()
    return authority


@pytest.fixture
def served(tmp_path: Path, ca: CertificateAuthority) -> Iterator[dict[str, Any]]:
    """A controller that issues, serving the mutual-TLS API and the enrollment port with a certificate it issued
    itself at 127.0.0.1; the agent n1 holds a certificate the cluster CA issued (as the ha_ops_pki role does)."""
    own = TlsFiles(ca_file=ca.paths.cert, cert_file=tmp_path / "own" / "tls.crt", key_file=tmp_path / "own" / "tls.key",
                   reload_s=0.05)  # fmt: skip
    config = CertificatesConfig(
        issuer=IssuerFiles(cert_file=ca.directory / "issuer.crt", key_file=ca.directory / "issuer.key", lifetime_s=60),
        serve_names=["127.0.0.1"], enrollment=EnrollmentConfig(),
    )  # fmt: skip
    controller = make_controller(tmp_path / "state", "ctl1", Clock())
    controller.config = controller.config.model_copy(update={"tls": own, "certificates": config})
    controller.certificates = CertificateService(config, own, "ctl1", {"n1", "n2"}, REVIEWS.__getitem__)
    assert controller.certificates.keep_own() and not controller.certificates.keep_own()
    controller.lease_step()
    servers = [serve(controller, "127.0.0.1", 0), serve_public(controller, "127.0.0.1", 0)]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield {
            "controller": controller,
            "api": f"https://127.0.0.1:{servers[0].server_address[1]}",
            "enroll": f"https://127.0.0.1:{servers[1].server_address[1]}",
            "n1": issue(ca, "n1", "n1", (tls.AGENTS,)),
            "operator": issue(ca, "alice", "alice", (tls.OPERATORS,)),
        }
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


def leaf(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificates(path.read_bytes())[0]


def subject(cert: x509.Certificate) -> tuple[str, set[str]]:
    cn = cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value
    return str(cn), {str(a.value) for a in cert.subject.get_attributes_for_oid(x509.NameOID.ORGANIZATION_NAME)}


def test_a_renewal_keeps_the_callers_identity_with_a_new_key_and_chains_to_the_cluster_ca(
    served: dict[str, Any], ca: CertificateAuthority
) -> None:
    n1: TlsFiles = served["n1"]
    old_key = n1.key_file.read_bytes()
    expires = renew(n1, [served["api"]])
    cert = leaf(n1.cert_file)
    assert subject(cert) == ("n1", {tls.AGENTS})  # its identity, though the request's CN was "renewal"
    assert cert.issuer == subject_name("ha-ops issuer")
    assert n1.key_file.read_bytes() != old_key
    assert dt.timedelta(seconds=55) < expires - dt.datetime.now(dt.UTC) <= dt.timedelta(seconds=61)
    # The renewed certificate (leaf + issuer) is accepted by a server trusting the cluster CA alone, as n1's.
    agent = Caller(served["api"], n1)
    assert agent.call("/v1/reports", report_body(node="n1"))[0] == 200
    assert agent.call("/v1/reports", report_body(node="n2", seq=2))[0] == 403
    # An operator renews as an operator, and may still act as one.
    renew(served["operator"], [served["api"]])
    assert subject(leaf(served["operator"].cert_file)) == ("alice", {tls.OPERATORS})
    assert Caller(served["api"], served["operator"]).call("/v1/state")[0] == 200
    assert served["controller"].certificates.issued["renewal"] == 2


def test_an_agent_pod_is_enrolled_for_the_node_its_token_names_and_no_other(
    served: dict[str, Any], tmp_path: Path, ca: CertificateAuthority
) -> None:
    files = TlsFiles(
        ca_file=ca.paths.cert, cert_file=tmp_path / "pod" / "tls.crt", key_file=tmp_path / "pod" / "tls.key"
    )
    token = tmp_path / "token"
    enrollment = Enrollment(urls=[served["enroll"]], token_file=token)
    token.write_text("token-of-n2\n")
    enroll(files, enrollment)
    assert subject(leaf(files.cert_file)) == ("n2", {tls.AGENTS})
    assert Caller(served["api"], files).call("/v1/reports", report_body(node="n2"))[0] == 200
    refusals = {
        "token-of-a-stranger-node": "gpu99 is in none of this controller's pools",
        "token-of-another-account": "is not the agents' service account",
        "token-for-another-audience": "not for the audience ha-ops-controller",
        "token-not-bound-to-a-pod": "not bound to a pod on a node",
        "expired-token": "the token is not valid",
    }
    for name, why in refusals.items():
        token.write_text(name)
        with pytest.raises(TransportError) as refused:
            enroll(files, enrollment)
        assert "HTTP 403" in str(refused.value) and why in str(refused.value), name
    assert served["controller"].certificates.issued["enrollment"] == 1


def test_the_enrollment_port_wants_a_token_a_real_request_and_answers_nothing_else(served: dict[str, Any]) -> None:
    public = ssl.create_default_context(cafile=str(served["n1"].ca_file))  # verifies the controller, presents nothing

    def post(path: str, body: Any, token: str | None = "token-of-n2") -> tuple[int, dict[str, Any]]:
        headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
        request = urllib.request.Request(served["enroll"] + path, json.dumps(body).encode(), headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=5, context=public) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            with exc:
                return exc.code, json.loads(exc.read())

    _, csr = new_request("n2")
    status, body = post("/v1/certificates", {"csr": csr}, token=None)
    assert status == 403 and "Authorization: Bearer" in body["error"]
    status, body = post("/v1/certificates", {"csr": "not a request"})
    assert status == 400 and "csr: not a PEM certificate request" in body["error"]
    status, body = post("/v1/certificates", {"csr": forged_request()})
    assert status == 400 and "signature does not match" in body["error"]
    assert post("/v1/reports", report_body(node="n2"))[0] == 400  # a report needs the mutual-TLS port
    assert post("/v1/breaker/reset", {})[0] == 400
    with urllib.request.urlopen(served["enroll"] + "/healthz", timeout=5, context=public) as response:
        assert json.loads(response.read())["id"] == "ctl1"
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(served["enroll"] + "/v1/state", timeout=5, context=public)
    missing.value.close()
    assert missing.value.code == 404
    # The mutual-TLS port still refuses a caller without a certificate at the handshake.
    with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
        urllib.request.urlopen(served["api"] + "/healthz", timeout=5, context=public).read()


def test_the_scheme_is_case_insensitive_a_malformed_review_is_named_and_issuing_is_rate_limited(
    served: dict[str, Any], tmp_path: Path, ca: CertificateAuthority
) -> None:
    public = ssl.create_default_context(cafile=str(served["n1"].ca_file))

    def post(path: str, body: Any, authorization: str) -> tuple[int, dict[str, Any], str | None]:
        headers = {"Content-Type": "application/json", "Authorization": authorization}
        request = urllib.request.Request(served["enroll"] + path, json.dumps(body).encode(), headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=5, context=public) as response:
                return response.status, json.loads(response.read()), None
        except urllib.error.HTTPError as exc:
            with exc:
                return exc.code, json.loads(exc.read()), exc.headers.get("Retry-After")

    _, csr = new_request("n2")
    for scheme in ("bearer", "BEARER", "Bearer"):  # (RFC 7235: the scheme is case-insensitive)
        assert post("/v1/certificates", {"csr": csr}, f"{scheme} token-of-n2")[0] == 200, scheme
    status, body, _ = post("/v1/certificates", {"csr": csr}, "Bearer token-with-a-malformed-review")
    assert status == 503 and "not a TokenReview status" in body["error"], body
    assert "audiences" in body["error"] and "user" in body["error"] and "Error" not in body["error"]
    status, body, _ = post("/v1/certificates", {"csr": csr}, "Bearer a-token-the-fake-api-server-chokes-on")
    assert status == 503 and body["error"] == (
        "the token review failed: the API server's answer is not a TokenReview (unreadable)"
    )  # (the fake's KeyError, never its text)
    # Three enrollments of n2 above; three more, then refused until the window moves on (renewals count alike).
    for _ in range(3):
        assert post("/v1/certificates", {"csr": csr}, "Bearer token-of-n2")[0] == 200
    status, body, retry = post("/v1/certificates", {"csr": csr}, "Bearer token-of-n2")
    # (the window: the certificates' lifetime of 60 s here, under issue_window_s's 600 s)
    assert status == 429 and "n2 was issued 6 certificates in the last 60 s" in body["error"], body
    assert retry is not None and 45 <= int(retry) <= 60
    for _ in range(6):
        renew(served["n1"], [served["api"]])
    with pytest.raises(TransportError, match="HTTP 429"):
        renew(served["n1"], [served["api"]])
    assert served["controller"].certificates.issued == {"own": 1, "enrollment": 6, "renewal": 6}


def forged_request() -> str:
    """A request whose public key is not the one that signed it: a CSR built for one key, its key swapped."""
    from cryptography.hazmat.primitives import serialization

    signer, other = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    good = x509.CertificateSigningRequestBuilder().subject_name(subject_name("n2")).sign(signer, hashes.SHA256())
    der = good.public_bytes(serialization.Encoding.DER)
    old = signer.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    new = other.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    swapped = x509.load_der_x509_csr(der.replace(old, new))
    return swapped.public_bytes(serialization.Encoding.PEM).decode()


def test_the_controllers_own_certificate_serves_its_names_and_is_renewed_when_due(
    served: dict[str, Any], ca: CertificateAuthority
) -> None:
    controller = served["controller"]
    cert = leaf(controller.config.tls.cert_file)
    assert subject(cert) == ("ctl1", {"ha-ops:controllers"})
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(a) for a in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    later = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=41)  # past two thirds of 60 s
    assert controller.certificates.keep_own(later)
    assert leaf(controller.config.tls.cert_file).serial_number != cert.serial_number
    # The next handshake is served with the renewed one (the files are reloaded), verified against the CA alone.
    import socket
    import time

    time.sleep(0.1)
    renewed = leaf(controller.config.tls.cert_file).serial_number
    context = ReloadingContext(served["operator"], server=False).get()
    port = int(served["api"].rsplit(":", 1)[1])
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as conn,
    ):
        served_der = conn.getpeercert(binary_form=True)
    assert served_der is not None and x509.load_der_x509_certificate(served_der).serial_number == renewed
    assert Caller(served["api"], served["operator"]).call("/v1/state")[0] == 200


def test_the_renewer_renews_past_two_thirds_enrolls_without_a_certificate_and_says_when_it_cannot(
    served: dict[str, Any], tmp_path: Path, ca: CertificateAuthority
) -> None:
    files = TlsFiles(ca_file=ca.paths.cert, cert_file=tmp_path / "a" / "tls.crt", key_file=tmp_path / "a" / "tls.key")
    (tmp_path / "token").write_text("token-of-n2")
    renewer = Renewer(files, [f"{served['api']}/v1/reports"], Enrollment(urls=[served["enroll"]],
                                                                         token_file=tmp_path / "token"))  # fmt: skip
    waiting = CertificateContext(files)
    with pytest.raises(OSError, match="no certificate yet"):  # the agent's reports wait; its GPUs are still watched
        waiting.get()
    renewer.ensure(threading.Event())  # nothing there: enrolled
    assert isinstance(waiting.get(), ssl.SSLContext)
    first = leaf(files.cert_file)
    assert not renewer.step()  # fresh: nothing to do
    assert renewer.step(dt.datetime.now(dt.UTC) + dt.timedelta(seconds=45))  # due: renewed over mutual TLS
    assert leaf(files.cert_file).serial_number != first.serial_number
    assert served["controller"].certificates.issued == {"own": 1, "enrollment": 1, "renewal": 1}
    files.cert_file.unlink()
    with pytest.raises(TransportError, match="no valid certificate to renew with, and no enrollment"):
        Renewer(files, [served["api"]]).step()


def test_the_issuer_refuses_weak_keys_and_never_outlives_itself(tmp_path: Path, ca: CertificateAuthority) -> None:
    from cryptography.hazmat.primitives.asymmetric import rsa

    issuer = Issuer(IssuerFiles(cert_file=ca.directory / "issuer.crt", key_file=ca.directory / "issuer.key",
                                lifetime_s=7 * 86400))  # fmt: skip
    weak = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    csr = x509.CertificateSigningRequestBuilder().subject_name(subject_name("x")).sign(weak, hashes.SHA256())
    from cryptography.hazmat.primitives import serialization

    with pytest.raises(RequestRefused, match="RSA 2048"):
        issuer.issue(csr.public_bytes(serialization.Encoding.PEM).decode(), template_for("n1", (tls.AGENTS,)))
    _, good = new_request("n1")
    end = ca.issue_issuer(validity=dt.timedelta(days=2))  # an issuer with two days left
    chain = issuer.issue(good, template_for("n1", (tls.AGENTS,)))
    first = x509.load_pem_x509_certificates(chain.encode())
    assert first[0].not_valid_after_utc == leaf(end.cert).not_valid_after_utc
    assert first[1].extensions.get_extension_for_class(x509.BasicConstraints).value.path_length == 0
    with pytest.raises(ValueError, match="cannot load"):
        Issuer(IssuerFiles(cert_file=tmp_path / "none.crt", key_file=tmp_path / "none.key"))


def test_the_configs_refuse_renewal_without_tls_and_enrollment_without_kubernetes(tmp_path: Path) -> None:
    files = {"ca_file": "ca.crt", "cert_file": "a.crt", "key_file": "a.key"}
    with pytest.raises(ValueError, match="renew and enroll: need tls"):
        ControllerReporting.model_validate({"urls": ["https://c:8800/v1/reports"], "renew": True})
    with pytest.raises(ValueError, match="enroll: needs renew"):
        ControllerReporting.model_validate({"urls": ["https://c"], "tls": files,
                                            "enroll": {"urls": ["https://c:8801"], "token_file": "t"}})  # fmt: skip
    base = {"id": "c", "state_dir": str(tmp_path), "pools": {"p": {"nodes": ["n1"]}},
            "certificates": {"issuer": {"cert_file": "i.crt", "key_file": "i.key"}}}  # fmt: skip
    with pytest.raises(ValueError, match="certificates: needs tls"):
        ControllerConfig.model_validate(base)
    with pytest.raises(ValueError, match=r"certificates\.enrollment: needs kubernetes"):
        ControllerConfig.model_validate(base | {"tls": files, "certificates": {**base["certificates"],
                                                                               "enrollment": {}}})  # fmt: skip


def test_enrolled_node_reads_what_the_api_server_vouches_for() -> None:
    assert enrolled_node(review_of("gpu7"), AUDIENCE, ACCOUNT) == "gpu7"
    from ha_ops.remediation.certificates import EnrollmentRefused

    with pytest.raises(EnrollmentRefused, match="bound to a pod"):
        enrolled_node({**review_of("x"), "user": {"username": ACCOUNT, "extra": {
            "authentication.kubernetes.io/node-name": ["a", "b"]}}}, AUDIENCE, ACCOUNT)  # fmt: skip


def test_pki_issuer_and_pki_renew_from_the_command_line(served: dict[str, Any], tmp_path: Path) -> None:
    runner = CliRunner()
    empty = tmp_path / "empty"
    empty.mkdir()
    result = runner.invoke(app, ["pki", "issuer", "--dir", str(empty)])
    flat = " ".join(result.output.replace("│", " ").split())
    assert result.exit_code == 2 and "no cluster CA there" in flat and "Traceback" not in flat
    n1: TlsFiles = served["n1"]
    args = ["pki", "renew", "--url", served["api"], "--cert", str(n1.cert_file), "--key", str(n1.key_file),
            "--ca", str(n1.ca_file), "--json"]  # fmt: skip
    result = runner.invoke(app, [*args, "--if-due"])
    assert result.exit_code == 0 and json.loads(result.output)["renewed"] is False, result.output
    result = runner.invoke(app, args)
    assert result.exit_code == 0 and json.loads(result.output)["renewed"] is True, result.output
    assert leaf(n1.cert_file).issuer == subject_name("ha-ops issuer")
    result = runner.invoke(app, [*args[:2], "--url", "https://127.0.0.1:1", *args[4:]])
    assert result.exit_code == 1 and "no controller renewed" in result.output


def test_a_controller_issues_its_own_certificate_before_anything_loads_it(
    tmp_path: Path, ca: CertificateAuthority
) -> None:
    """At construction: its API's server and its audit shipper load the files as they start (a controller pod's
    first start has none: its volume is empty)."""
    from ha_ops.remediation.app import open_controller
    from tests.unit.test_remediation_server import StubExecutor

    own = {"ca_file": str(ca.paths.cert), "cert_file": str(tmp_path / "tls" / "tls.crt"),
           "key_file": str(tmp_path / "tls" / "tls.key")}  # fmt: skip
    config = ControllerConfig.model_validate({
        "id": "pod-a", "state_dir": str(tmp_path / "state"), "pools": {"p": {"nodes": ["n1"]}}, "tls": own,
        "certificates": {"issuer": {"cert_file": str(ca.directory / "issuer.crt"),
                                    "key_file": str(ca.directory / "issuer.key")},
                         "serve_names": ["ha-ops-controller.ha-ops.svc", "10.0.0.7"]},
    })  # fmt: skip
    open_controller(config, StubExecutor())  # type: ignore[arg-type]
    cert = leaf(tmp_path / "tls" / "tls.crt")
    assert subject(cert) == ("pod-a", {"ha-ops:controllers"})
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["ha-ops-controller.ha-ops.svc"]


def test_a_controller_whose_issuer_does_not_load_stops_at_start_naming_it(tmp_path: Path) -> None:
    from ha_ops.errors import SpecError
    from ha_ops.remediation.wiring import make_certificates

    config = ControllerConfig.model_validate({
        "id": "c", "state_dir": str(tmp_path), "pools": {"p": {"nodes": ["n1"]}},
        "tls": {"ca_file": "ca.crt", "cert_file": "a.crt", "key_file": "a.key"},
        "certificates": {"issuer": {"cert_file": str(tmp_path / "missing.crt"), "key_file": str(tmp_path / "k")}},
    })  # fmt: skip
    with pytest.raises(SpecError) as refused:
        make_certificates(config, {"n1"})
    assert "certificates.issuer" in str(refused.value) and "missing.crt" in str(refused.value)


def test_an_answer_that_is_not_a_certificate_for_the_key_sent_is_not_stored(
    tmp_path: Path, ca: CertificateAuthority
) -> None:
    """A pair that does not match would stop every later handshake: the files keep what they held."""
    from ha_ops.remediation.certificate_client import _store

    files = issue(ca, "n1", "n1", (tls.AGENTS,))
    before = (files.cert_file.read_bytes(), files.key_file.read_bytes())
    key, _ = new_request("n1")
    someone_elses = files.cert_file.read_text()  # a valid certificate, for another key
    with pytest.raises(TransportError, match="not for the key that was sent"):
        _store(files, key, {"certificate": someone_elses}, "https://c")
    with pytest.raises(TransportError, match="holds no certificate"):
        _store(files, key, {"error": "standby"}, "https://c")
    assert (files.cert_file.read_bytes(), files.key_file.read_bytes()) == before
