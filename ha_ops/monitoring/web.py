"""TLS and basic auth for Prometheus and Alertmanager, and the clients that call them.

Both serve their web APIs through the Prometheus exporter toolkit's `--web.config.file`: a server certificate, a
client certificate the cluster CA signed (RequireAndVerifyClientCert), and a bcrypt-hashed password on top. The
password is not redundant: the toolkit cannot tell one CA-signed client from another, and every GPU node holds an
agent certificate from the same CA; without the password any node could silence or forge alerts on Alertmanager
or read the whole cluster's metrics. So a caller needs both a certificate and the monitoring password.

`MonitoringClient` is one caller's side (the controller's watch, the operator's CLI, Prometheus scraping itself and
posting to Alertmanager); `web_config` renders the servers' side."""

from __future__ import annotations

import base64
import http.client
from pathlib import Path

import bcrypt
from pydantic import Field, model_validator

from ha_ops.security.tls import ReloadingContext, TlsFiles
from ha_ops.transport.http import Connect, request
from ha_ops.util.models import ConfigModel

# What a caller sees when the service does not answer: refused, reset, timed out, a TLS failure (ssl.SSLError is an
# OSError), a broken HTTP answer.
UNANSWERED = (OSError, http.client.HTTPException)


class MonitoringClient(ConfigModel):
    """How a caller reaches Prometheus and Alertmanager: its certificate (for servers that ask for one) and the
    monitoring user and password file (for servers with basic auth). Both empty: plain HTTP."""

    tls: TlsFiles | None = Field(None, description="This caller's certificate and key, and the servers' CA.")
    username: str | None = Field(None, min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._-]+$")
    password_file: Path | None = Field(None, description="The password's file (whitespace at its ends ignored).")

    @model_validator(mode="after")
    def _user_and_password_together(self) -> MonitoringClient:
        if (self.username is None) != (self.password_file is None):
            raise ValueError("username and password_file go together")
        return self

    def password(self) -> str | None:
        """Read each time it is needed: a rotated password file is used from the next request on."""
        return self.password_file.read_text().strip() if self.password_file else None

    def headers(self) -> dict[str, str]:
        if self.username is None:
            return {}
        token = base64.b64encode(f"{self.username}:{self.password()}".encode()).decode()
        return {"Authorization": f"Basic {token}"}

    def prometheus_block(self) -> dict:
        """The same credentials in Prometheus' and Alertmanager's own client configuration (a scrape job, an
        alerting target, a webhook's http_config)."""
        block: dict = {}
        if self.tls is not None:
            block["scheme"] = "https"
            block["tls_config"] = {k: str(getattr(self.tls, k)) for k in ("ca_file", "cert_file", "key_file")}
        if self.username is not None:
            block["basic_auth"] = {"username": self.username, "password_file": str(self.password_file)}
        return block


class MonitoringSession:
    """One caller's connections to Prometheus and Alertmanager: its certificate loaded once and reloaded as the
    files rotate, the password read per request."""

    def __init__(self, client: MonitoringClient | None) -> None:
        self.client = client or MonitoringClient()
        self._context = ReloadingContext(self.client.tls, server=False) if self.client.tls else None

    def request(
        self, connect: Connect, method: str, url: str, body: bytes | None = None, timeout: float = 5.0
    ) -> tuple[int, bytes]:
        headers = self.client.headers()
        if body is not None:
            headers["Content-Type"] = "application/json"
        context = self._context.get() if self._context else None
        return request(connect, method, url, body, headers, timeout, context)


def hash_password(password: str, rounds: int = 10) -> str:
    """A bcrypt hash as the exporter toolkit's basic_auth_users takes it (it caches a verified password, so the
    cost is paid once per password, not per request)."""
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds)).decode()


def web_config(server: TlsFiles, users: dict[str, str]) -> dict:
    """A `--web.config.file` for Prometheus or Alertmanager: `server`'s certificate, a client certificate signed by
    its CA required, TLS 1.2 at least, and `users` (name -> bcrypt hash)."""
    return {
        "tls_server_config": {
            "cert_file": str(server.cert_file),
            "key_file": str(server.key_file),
            "client_auth_type": "RequireAndVerifyClientCert",
            "client_ca_file": str(server.ca_file),
            "min_version": "TLS12",
        },
        "basic_auth_users": dict(users),
    }
