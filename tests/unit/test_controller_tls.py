"""The controller's API over mutual TLS, with real sockets on 127.0.0.1 and certificates from a CA made here: who
may do what (an agent reports only for its own node, operators repair and reset, Alertmanager only posts alerts), a
caller without a certificate or over plain HTTP is refused at TLS, and a rotated certificate is used from the next
handshake on without a restart."""

from __future__ import annotations

import json
import os
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ha_ops.remediation.server import serve
from ha_ops.security import tls
from ha_ops.security.pki import CertificateAuthority
from ha_ops.security.tls import ReloadingContext, TlsFiles
from tests.unit.test_remediation_server import Clock, make_controller, report_body, webhook


def issue(
    ca: CertificateAuthority, name: str, cn: str, roles: tuple[str, ...] = (), server: tuple[str, ...] = ()
) -> TlsFiles:
    paths = ca.issue(name, cn, groups=roles, server_names=server)
    return TlsFiles(ca_file=ca.paths.cert, cert_file=paths.cert, key_file=paths.key, reload_s=0.05)


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, TlsFiles]:
    ca = CertificateAuthority(tmp_path / "ca")
    ca.ensure("ha-ops test CA")
    other = CertificateAuthority(tmp_path / "other-ca")
    other.ensure("someone else's CA")
    return {
        "controller": issue(ca, "ctl1", "ctl1", ("ha-ops:controllers",), ("127.0.0.1",)),
        "n1": issue(ca, "n1", "n1", (tls.AGENTS,)),
        "operator": issue(ca, "alice", "alice", (tls.OPERATORS,)),
        "alertmanager": issue(ca, "am", "alertmanager", (tls.ALERTMANAGER,)),
        # n1 as someone else's CA names it: the client trusts our controller, but its own certificate is foreign
        "foreign n1": issue(other, "n1", "n1", (tls.AGENTS,)).model_copy(update={"ca_file": ca.paths.cert}),
    }


class Caller:
    def __init__(self, base: str, files: TlsFiles | None) -> None:
        self.base = base
        self.context = ReloadingContext(files, server=False) if files else None

    def call(self, path: str, body: Any = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base + path, data=data, method="POST" if data else "GET",
                                         headers={"Content-Type": "application/json"})  # fmt: skip
        context = self.context.get() if self.context else ssl.create_default_context(cafile=None)
        try:
            with urllib.request.urlopen(request, timeout=5, context=context) as response:
                status, payload, kind = response.status, response.read(), response.headers["Content-Type"]
        except urllib.error.HTTPError as exc:
            status, payload, kind = exc.code, exc.read(), exc.headers["Content-Type"]
        return status, json.loads(payload) if kind == "application/json" else payload.decode()


@pytest.fixture
def api(tmp_path: Path, pki: dict[str, TlsFiles]) -> Iterator[tuple[Any, str]]:
    controller = make_controller(tmp_path / "state", "ctl1", Clock())
    controller.config = controller.config.model_copy(update={"tls": pki["controller"]})
    controller.lease_step()
    server = serve(controller, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield controller, f"https://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_each_identity_may_do_only_its_own_part(api: tuple[Any, str], pki: dict[str, TlsFiles]) -> None:
    controller, base = api
    agent, operator, alertmanager = (Caller(base, pki[k]) for k in ("n1", "operator", "alertmanager"))
    assert agent.call("/v1/reports", report_body(node="n1"))[0] == 200
    status, body = agent.call("/v1/reports", report_body(node="n2", seq=2))
    assert status == 403 and "the certificate of n1 may not report for n2" in body["error"]
    assert agent.call("/v1/breaker/reset", {})[0] == 403
    assert agent.call("/v1/state")[0] == 403
    assert agent.call("/v1/alerts", webhook())[0] == 403
    assert alertmanager.call("/v1/alerts", webhook())[0] == 200
    assert alertmanager.call("/v1/reports", report_body(node="n1", seq=3))[0] == 403
    assert alertmanager.call("/v1/breaker/reset", {})[0] == 403
    assert operator.call("/v1/reports", report_body(node="n1", seq=4))[0] == 403
    status, state = operator.call("/v1/state")
    assert status == 200 and state["leader"]
    assert operator.call("/v1/breaker/reset", {})[0] == 200
    assert agent.call("/healthz")[0] == 200 and "ha_ops_controller_leader" in alertmanager.call("/metrics")[1]
    entries = [json.loads(line) for line in (controller.config.state_dir / "audit.jsonl").read_text().splitlines()]
    reset = [e for e in entries if e["what"] == "breaker_reset"]
    assert reset and reset[-1]["why"] == "reset by operator alice"  # the operator's identity, audited


def test_callers_without_a_certificate_of_this_ca_or_over_plain_http_are_refused_at_tls(
    api: tuple[Any, str], pki: dict[str, TlsFiles]
) -> None:
    controller, base = api
    before = (controller.config.state_dir / "state.json").read_bytes()
    no_cert = ssl.create_default_context(cafile=str(pki["n1"].ca_file))  # trusts the server, presents nothing
    request = urllib.request.Request(base + "/v1/reports", data=json.dumps(report_body()).encode(), method="POST")
    with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
        urllib.request.urlopen(request, timeout=5, context=no_cert).read()
    with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
        Caller(base, pki["foreign n1"]).call("/v1/reports", report_body())
    plain = base.replace("https://", "http://")
    with pytest.raises((urllib.error.URLError, ConnectionError, http_errors())):
        urllib.request.urlopen(urllib.request.Request(plain + "/v1/reports", data=b"{}", method="POST"), timeout=5)
    assert (controller.config.state_dir / "state.json").read_bytes() == before  # nothing decided
    assert Caller(base, pki["n1"]).call("/healthz")[0] == 200  # and the server still serves


def http_errors() -> type[Exception]:
    import http.client

    return http.client.HTTPException


def test_a_rotated_certificate_serves_the_next_handshake_without_a_restart(
    api: tuple[Any, str], pki: dict[str, TlsFiles], tmp_path: Path
) -> None:
    _, base = api
    agent = Caller(base, pki["n1"])
    served = ssl.get_server_certificate(("127.0.0.1", int(base.rsplit(":", 1)[1])))
    # The issuer writes a new key and certificate in place (the CA's `issue` only when missing: remove them first).
    ca = CertificateAuthority(tmp_path / "ca")
    for path in (pki["controller"].cert_file, pki["controller"].key_file, pki["n1"].cert_file, pki["n1"].key_file):
        os.unlink(path)
    ca.issue("ctl1", "ctl1", groups=("ha-ops:controllers",), server_names=("127.0.0.1",))
    ca.issue("n1", "n1", groups=(tls.AGENTS,))
    time.sleep(0.1)  # past reload_s
    assert agent.call("/v1/reports", report_body(node="n1"))[0] == 200  # the agent's new certificate, accepted
    rotated = ssl.get_server_certificate(("127.0.0.1", int(base.rsplit(":", 1)[1])))
    assert rotated != served and rotated.strip() == pki["controller"].cert_file.read_text().strip()


def test_a_half_written_rotation_keeps_the_last_good_certificate(pki: dict[str, TlsFiles]) -> None:
    context = ReloadingContext(pki["n1"], server=False)
    first = context.get()
    pki["n1"].key_file.write_bytes(pki["operator"].key_file.read_bytes())  # the key rotated, its certificate not yet
    time.sleep(0.1)
    assert context.get() is first and context.loads == 1


def test_missing_certificate_files_are_one_error_naming_them(tmp_path: Path) -> None:
    from ha_ops.errors import SpecError

    files = TlsFiles(ca_file=tmp_path / "ca.crt", cert_file=tmp_path / "a.crt", key_file=tmp_path / "a.key")
    with pytest.raises(SpecError, match="tls: cannot load the certificate"):
        ReloadingContext(files, server=True)
