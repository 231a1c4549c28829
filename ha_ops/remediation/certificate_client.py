"""Keeping one's own certificate fresh through the controllers (remediation/certificates.py): an agent, or any part
with `ha-ops pki renew`, sends a new key's request and gets a certificate for the identity it already holds.

- **Renewal** over mutual TLS with the current certificate, past two thirds of its life: no token, no CA key, no
  Ansible run.
- **Enrollment** with a Kubernetes service account token, at the controllers' enrollment port, when there is no
  certificate yet or the one there has expired (an agent pod's first start, or one that was away too long).

The new key never leaves the process; the files are replaced whole, the key first (pki.store), and the process's
ReloadingContext uses them from its next handshake on."""

from __future__ import annotations

import datetime as dt
import json
import logging
import ssl
import threading
import urllib.error
import urllib.request
from urllib.parse import urlsplit

from ha_ops.errors import TransportError
from ha_ops.remediation.client import call
from ha_ops.security.issuer import new_request
from ha_ops.security.pki import renewal_due, store, validity
from ha_ops.security.tls import Enrollment, TlsFiles

log = logging.getLogger(__name__)


def base_url(url: str) -> str:
    """https://host:port of a controller URL (an agent's report URL ends in /v1/reports)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _usable(files: TlsFiles, now: dt.datetime) -> bool:
    try:
        start, end = validity(files.cert_file)
    except (OSError, ValueError):
        return False
    return start <= now < end and files.key_file.exists()


def _store(files: TlsFiles, key: bytes, answer: dict, url: str) -> dt.datetime:
    """The answer's certificate and the new key, once the certificate is shown to be for that key (a pair that does
    not match would stop every later handshake); its expiry."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    try:
        leaf = x509.load_pem_x509_certificates(str(answer["certificate"]).encode())[0]
        ours = serialization.load_pem_private_key(key, password=None).public_key()
        matches = leaf.public_key() == ours
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise TransportError(f"{url}: the answer holds no certificate ({exc})") from None
    if not matches:
        raise TransportError(f"{url}: the certificate answered is not for the key that was sent")
    store(files.cert_file, files.key_file, key, str(answer["certificate"]))
    return leaf.not_valid_after_utc


def renew(files: TlsFiles, urls: list[str], timeout: float = 10.0) -> dt.datetime:
    """A new certificate for the identity in `files`, from the first controller that issues it; its expiry."""
    key, csr = new_request("renewal")
    seen = []
    for url in urls:
        try:
            answer = call(f"{base_url(url)}/v1/certificates", "POST", files, {"csr": csr}, timeout)
            return _store(files, key, answer, url)
        except TransportError as exc:
            seen.append(str(exc))
    raise TransportError(f"no controller renewed {files.cert_file}: {'; '.join(seen)}")


def enroll(files: TlsFiles, enrollment: Enrollment, timeout: float = 10.0) -> dt.datetime:
    """A first certificate, for the node the token's pod runs on; its expiry. The server is verified with the CA."""
    token = enrollment.token_file.read_text().strip()
    key, csr = new_request("enrollment")
    context = ssl.create_default_context(cafile=str(files.ca_file))
    seen = []
    for url in enrollment.urls:
        request = urllib.request.Request(
            f"{base_url(url)}/v1/certificates", method="POST", data=json.dumps({"csr": csr}).encode(),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
        )  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
                answer = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            with exc:
                seen.append(f"{url}: HTTP {exc.code}: {exc.read().decode(errors='replace').strip()}")
            continue
        except (urllib.error.URLError, OSError, ValueError) as exc:
            seen.append(f"{url}: {exc}")
            continue
        try:
            return _store(files, key, answer, url)
        except TransportError as exc:
            seen.append(str(exc))
    raise TransportError(f"no controller enrolled {files.cert_file}: {'; '.join(seen)}")


class Renewer:
    """Keeps `files` holding a valid certificate: renews it past two thirds of its life, and enrolls (with
    `enrollment`) when there is none or it expired. `ensure` before the first handshake; `run` in a thread."""

    def __init__(self, files: TlsFiles, urls: list[str], enrollment: Enrollment | None = None) -> None:
        self.files, self.urls, self.enrollment = files, urls, enrollment

    def step(self, now: dt.datetime | None = None) -> bool:
        """Renew or enroll when due; whether a new certificate was stored."""
        now = now or dt.datetime.now(dt.UTC)
        if _usable(self.files, now):
            if not renewal_due(self.files.cert_file, now):
                return False
            renew(self.files, self.urls)
        elif self.enrollment is not None:
            enroll(self.files, self.enrollment)
        else:
            raise TransportError(f"{self.files.cert_file}: no valid certificate to renew with, and no enrollment")
        return True

    def ensure(self, stop: threading.Event, retry_s: float = 2.0) -> None:
        """Until a valid certificate is there (the controllers may still be starting): the agent's start."""
        while not stop.is_set():
            try:
                self.step()
                return
            except (TransportError, OSError, ValueError, KeyError) as exc:
                log.warning("no certificate yet (%s); trying again in %.0f s", exc, retry_s)
            stop.wait(retry_s)

    def run(self, stop: threading.Event) -> None:
        while True:
            try:
                start, end = validity(self.files.cert_file)
                every = max(1.0, min(60.0, (end - start).total_seconds() / 20))
            except (OSError, ValueError):
                every = 2.0
            if stop.wait(every):
                return
            try:
                if self.step():
                    log.info("renewed %s", self.files.cert_file)
            except (TransportError, OSError, ValueError, KeyError) as exc:
                log.warning("certificate renewal failed (tried again shortly): %s", exc)
