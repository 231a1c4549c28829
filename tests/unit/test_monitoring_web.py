"""TLS and basic auth for Prometheus and Alertmanager: the web config they are given, and the controller's watch
calling a real TLS server on 127.0.0.1 that asks for a client certificate and the password, as they do."""

from __future__ import annotations

import base64
import json
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import bcrypt
import pytest
from pydantic import ValidationError

from ha_ops.monitoring.web import MonitoringClient, hash_password, web_config
from ha_ops.remediation.config import MonitoringWatch
from ha_ops.remediation.monitoring_watch import ALERT_NAME, direct, prometheus_healthy, raise_alert, session
from ha_ops.security.pki import CertificateAuthority
from ha_ops.security.tls import ReloadingContext, TlsFiles

PASSWORD = "s3cret-monitoring"


def files(ca: CertificateAuthority, name: str, server: tuple[str, ...] = ()) -> TlsFiles:
    paths = ca.issue(name, name, groups=("ha-ops:monitoring",), server_names=server)
    return TlsFiles(ca_file=ca.paths.cert, cert_file=paths.cert, key_file=paths.key)


@pytest.fixture
def ca(tmp_path: Path) -> CertificateAuthority:
    ca = CertificateAuthority(tmp_path / "ca")
    ca.ensure("ha-ops test CA")
    return ca


def client(tmp_path: Path, ca: CertificateAuthority, password: str = PASSWORD) -> MonitoringClient:
    secret = tmp_path / f"password-{len(password)}"
    secret.write_text(f"  {password}\n")
    return MonitoringClient(tls=files(ca, "ctl1"), username="ha-ops", password_file=secret)


def test_the_web_config_asks_for_a_certificate_from_the_ca_and_a_hashed_password(ca: CertificateAuthority) -> None:
    server = files(ca, "prometheus", ("127.0.0.1",))
    config = web_config(server, {"ha-ops": hash_password(PASSWORD, rounds=4)})
    assert config["tls_server_config"] == {
        "cert_file": str(server.cert_file),
        "key_file": str(server.key_file),
        "client_auth_type": "RequireAndVerifyClientCert",
        "client_ca_file": str(server.ca_file),
        "min_version": "TLS12",
    }
    [(user, hashed)] = config["basic_auth_users"].items()
    assert user == "ha-ops" and hashed.startswith("$2")
    assert bcrypt.checkpw(PASSWORD.encode(), hashed.encode())
    assert not bcrypt.checkpw(b"guess", hashed.encode())


def test_a_client_sends_basic_auth_read_from_its_file_each_time(tmp_path: Path, ca: CertificateAuthority) -> None:
    caller = client(tmp_path, ca)
    assert caller.headers() == {"Authorization": "Basic " + base64.b64encode(f"ha-ops:{PASSWORD}".encode()).decode()}
    assert caller.password_file is not None
    caller.password_file.write_text("rotated\n")
    assert base64.b64decode(caller.headers()["Authorization"].split()[1]) == b"ha-ops:rotated"
    assert MonitoringClient().headers() == {}


def test_the_same_credentials_in_prometheus_own_client_config(tmp_path: Path, ca: CertificateAuthority) -> None:
    caller = client(tmp_path, ca)
    assert caller.tls is not None
    assert caller.prometheus_block() == {
        "scheme": "https",
        "tls_config": {
            "ca_file": str(caller.tls.ca_file),
            "cert_file": str(caller.tls.cert_file),
            "key_file": str(caller.tls.key_file),
        },
        "basic_auth": {"username": "ha-ops", "password_file": str(caller.password_file)},
    }
    assert MonitoringClient().prometheus_block() == {}


@pytest.mark.parametrize(
    "fields", [{"username": "ha-ops"}, {"password_file": "/p"}, {"username": "a b", "password_file": "/p"}]
)
def test_a_user_without_a_password_file_or_a_bad_name_is_refused(fields: dict) -> None:
    with pytest.raises(ValidationError):
        MonitoringClient.model_validate(fields)


class Guarded(BaseHTTPRequestHandler):
    """Prometheus' and Alertmanager's gate: 401 without the right password (TLS has already asked for the cert)."""

    expected = ""
    posted: list = []

    def _allowed(self) -> bool:
        if self.headers.get("Authorization") == self.expected:
            return True
        self.send_response(401)
        self.end_headers()
        return False

    def do_GET(self) -> None:
        if self._allowed():
            self.send_response(200 if self.path == "/-/healthy" else 404)
            self.end_headers()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self._allowed():
            Guarded.posted.append((self.path, json.loads(body)))
            self.send_response(200)
            self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def guarded(ca: CertificateAuthority) -> Iterator[str]:
    Guarded.expected = "Basic " + base64.b64encode(f"ha-ops:{PASSWORD}".encode()).decode()
    Guarded.posted = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Guarded)
    context = ReloadingContext(files(ca, "prometheus", ("127.0.0.1",)), server=True).get()
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"https://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_the_watch_reaches_a_guarded_prometheus_and_alertmanager_with_certificate_and_password(
    tmp_path: Path, ca: CertificateAuthority, guarded: str
) -> None:
    watch = MonitoringWatch(prometheus_url=guarded, alertmanager_url=guarded, client=client(tmp_path, ca))
    assert prometheus_healthy(watch)
    assert raise_alert(watch, "ctl1", since=0.0, via=session(watch))
    [(path, [alert])] = Guarded.posted
    assert path == "/api/v2/alerts" and alert["labels"]["alertname"] == ALERT_NAME


def test_a_wrong_password_or_no_certificate_counts_as_not_answering(
    tmp_path: Path, ca: CertificateAuthority, guarded: str
) -> None:
    wrong = MonitoringWatch(prometheus_url=guarded, alertmanager_url=guarded, client=client(tmp_path, ca, "guess"))
    assert not prometheus_healthy(wrong)
    assert not raise_alert(wrong, "ctl1", since=0.0)
    assert Guarded.posted == []
    # A certificate from another CA: the handshake itself fails, before any password is read.
    other = CertificateAuthority(tmp_path / "other-ca")
    other.ensure("someone else's CA")
    foreign = client(tmp_path, ca)
    assert foreign.tls is not None
    foreign_tls = files(other, "ctl1").model_copy(update={"ca_file": foreign.tls.ca_file})
    stranger = MonitoringWatch(prometheus_url=guarded, client=foreign.model_copy(update={"tls": foreign_tls}))
    assert not prometheus_healthy(stranger)
    with pytest.raises(ssl.SSLError):
        session(stranger).request(direct, "GET", guarded + "/-/healthy")


def test_an_https_url_without_a_certificate_is_a_config_error() -> None:
    with pytest.raises(ValidationError, match=r"client\.tls"):
        MonitoringWatch(prometheus_url="https://10.0.0.5:9090")
    with pytest.raises(ValidationError, match=r"client\.tls"):
        MonitoringWatch(prometheus_url="http://10.0.0.5:9090", alertmanager_url="https://10.0.0.5:9093")
