"""Mutual TLS for ha-ops' own HTTP: the controller's API, the agents and the CLI that call it.

Identities come from certificates the cluster CA issued: the subject's CN names the caller (an agent's CN is its
node's name) and its O entries its roles, as Kubernetes reads client certificates. Certificates are short-lived and
rotated on disk by whoever issues them (the lab's rotator, the `ha_ops_pki` role, the controllers' own issuer:
ha_ops.security.issuer); a ReloadingContext notices new files and uses them from the next handshake on, so neither
the controller nor an agent restarts and no connection already open is dropped."""

from __future__ import annotations

import logging
import os
import ssl
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field

from ha_ops.errors import SpecError
from ha_ops.util.models import ConfigModel

log = logging.getLogger(__name__)

# Roles, as the O entries of a client certificate's subject.
AGENTS = "ha-ops:agents"  # may report, each for the node its CN names
OPERATORS = "ha-ops:operators"  # repaired, breaker-reset, /v1/state
ALERTMANAGER = "ha-ops:alertmanager"  # may post alerts, nothing else
MONITORING = "ha-ops:monitoring"  # Prometheus: /metrics

# Why a config without tls is refused, and how to mean it (the controller's and the agent's).
INSECURE_WITHOUT_TLS = (
    "required: the controllers' API is served over mutual TLS (cert_file, key_file, ca_file; docs/security.md). "
    "Plain HTTP lets anyone who reaches the port report, mark nodes repaired or drain them: set insecure: true to "
    "mean it (a lab or a trial, never production)"
)


class TlsFiles(ConfigModel):
    """Where this process finds its certificate, its key and the CA it trusts (PEM files, rotated in place)."""

    ca_file: Path = Field(description="The cluster CA's certificate: peers must present a certificate it signed.")
    cert_file: Path = Field(description="This process's certificate (its chain, leaf first).")
    key_file: Path = Field(description="Its private key.")
    reload_s: float = Field(1.0, gt=0, description="How often the files are checked for a rotation.")


class Enrollment(ConfigModel):
    """Where and with what an agent pod gets its first certificate."""

    urls: list[str] = Field(
        min_length=1, description="The controllers' enrollment port(s), e.g. https://ha-ops-controller.ha-ops.svc:8801"
    )
    token_file: Path = Field(description="The pod's projected service account token (the controllers' audience).")


@dataclass(frozen=True)
class Identity:
    """Who is at the other end of a verified connection."""

    name: str  # the certificate's CN
    roles: frozenset[str]  # its O entries

    def has(self, role: str) -> bool:
        return role in self.roles

    def __str__(self) -> str:
        return f"{self.name} ({', '.join(sorted(self.roles)) or 'no role'})"


def identity_of(peer: dict[str, Any] | None) -> Identity | None:
    """The identity in a verified peer certificate (`SSLSocket.getpeercert()`), or None without one."""
    if not peer:
        return None
    name, roles = "", set()
    for rdn in peer.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                name = value
            elif key == "organizationName":
                roles.add(value)
    return Identity(name, frozenset(roles))


class ReloadingContext:
    """An SSLContext for one side (server or client), built again when the certificate, key or CA file changes.
    A rotation that is half written (a key that does not match its certificate) keeps the last good context until
    the next check: a handshake never sees a broken pair."""

    def __init__(self, files: TlsFiles, server: bool, verify_client: bool = True) -> None:
        # verify_client=False: a server that asks for no client certificate (the controller's enrollment port, where
        # callers prove who they are otherwise); a client always verifies the server.
        self.files, self.server, self.verify_client = files, server, verify_client
        self._lock = threading.Lock()
        self._signature: tuple = ()
        self._checked = 0.0
        try:
            self._context = self._build()  # the first one must load: a bad config is an error at start
        except (OSError, ssl.SSLError, ValueError) as exc:
            files = f"{files.cert_file}, {files.key_file}, CA {files.ca_file}"
            raise SpecError("tls", [f"cannot load the certificate, key and CA ({files}): {exc}"]) from None
        self._signature = self._stat()
        self.loads = 1

    def _stat(self) -> tuple:
        out = []
        for path in (self.files.ca_file, self.files.cert_file, self.files.key_file):
            try:
                st = os.stat(path)
                out.append((st.st_mtime_ns, st.st_size, st.st_ino))
            except OSError:
                out.append(None)
        return tuple(out)

    def _build(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if self.server else ssl.PROTOCOL_TLS_CLIENT)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        # mutual: a server asks for the client's certificate too
        context.verify_mode = ssl.CERT_REQUIRED if self.verify_client or not self.server else ssl.CERT_NONE
        context.load_verify_locations(cafile=str(self.files.ca_file))
        context.load_cert_chain(str(self.files.cert_file), str(self.files.key_file))
        return context

    def get(self) -> ssl.SSLContext:
        now = time.monotonic()
        with self._lock:
            if now - self._checked < self.files.reload_s:
                return self._context
            self._checked = now
            signature = self._stat()
            if signature != self._signature:
                try:
                    self._context = self._build()
                    self._signature = signature
                    self.loads += 1
                    log.info("TLS: loaded the rotated certificate %s", self.files.cert_file)
                except (OSError, ssl.SSLError, ValueError) as exc:
                    log.warning("TLS: keeping the last certificate; the new files do not load yet: %s", exc)
            return self._context


class CertificateContext:
    """A client's ReloadingContext once its certificate exists: before that (an agent still enrolling) `get` raises
    OSError, which a caller handles as a controller it cannot reach yet."""

    def __init__(self, files: TlsFiles) -> None:
        self.files = files
        self._context: ReloadingContext | None = None

    def get(self) -> ssl.SSLContext:
        if self._context is None:
            try:
                self._context = ReloadingContext(self.files, server=False)
            except SpecError as exc:
                raise OSError(f"no certificate yet: {exc}") from None
        return self._context.get()
