"""A small Kubernetes API client over TLS with a client certificate: the few calls the lab makes (register nodes,
create workloads, read and delete objects). It reads the same kubeconfig files the lab writes for kubectl users."""

from __future__ import annotations

import base64
import http.client
import json
import ssl
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import yaml

from ha_ops.errors import HaOpsError


class KubeError(HaOpsError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


# Where each kind lives: (API prefix, plural, namespaced).
KINDS: dict[str, tuple[str, str, bool]] = {
    "Namespace": ("/api/v1", "namespaces", False),
    "Node": ("/api/v1", "nodes", False),
    "Pod": ("/api/v1", "pods", True),
    "Deployment": ("/apis/apps/v1", "deployments", True),
}


class KubeClient:
    def __init__(self, kubeconfig: Path, timeout: float = 30.0) -> None:
        self._conn: http.client.HTTPSConnection | None = None  # first: __del__ reads it, even after a failed init
        config = yaml.safe_load(Path(kubeconfig).read_text())
        cluster = config["clusters"][0]["cluster"]
        user = config["users"][0]["user"]
        url = urlsplit(cluster["server"])
        self.host, self.port = url.hostname or "127.0.0.1", url.port or 443
        self.timeout = timeout
        ca = base64.b64decode(cluster["certificate-authority-data"]).decode()
        self.context = ssl.create_default_context(cadata=ca)
        # ssl loads a client certificate from files only: write the kubeconfig's to a private temporary folder.
        with tempfile.TemporaryDirectory() as tmp:
            cert, key = Path(tmp) / "c.crt", Path(tmp) / "c.key"
            cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
            key.write_bytes(base64.b64decode(user["client-key-data"]))
            self.context.load_cert_chain(cert, key)

    def _connection(self) -> http.client.HTTPSConnection:
        # One kept-alive connection: registering 1,500 nodes is 1,500 requests, not 1,500 TLS handshakes.
        if self._conn is None:
            self._conn = http.client.HTTPSConnection(self.host, self.port, context=self.context, timeout=self.timeout)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __del__(self) -> None:
        # Clients are short-lived handles (a probe, a test): the kept-alive socket closes with them.
        self.close()

    def _send(self, method: str, path: str, data: bytes | None, headers: dict[str, str]) -> tuple[int, str]:
        def exchange() -> tuple[int, str]:
            conn = self._connection()
            conn.request(method, path, body=data, headers=headers)
            response = conn.getresponse()
            return response.status, response.read().decode()

        try:
            return exchange()
        except (http.client.RemoteDisconnected, http.client.CannotSendRequest, ConnectionError):
            # The server closed the idle connection: one fresh connection, once.
            self.close()
            return exchange()

    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        data = json.dumps(body).encode() if body is not None else None
        status, text = self._send(method, path, data, {"Content-Type": content_type, "Accept": "application/json"})
        if status >= 400:
            try:
                message = json.loads(text).get("message", text)
            except json.JSONDecodeError:
                message = text
            raise KubeError(status, f"{method} {path}: {status} {message}")
        return json.loads(text) if text else None

    @staticmethod
    def path(kind: str, namespace: str | None = None, name: str | None = None) -> str:
        prefix, plural, namespaced = KINDS[kind]
        base = f"{prefix}/namespaces/{namespace or 'default'}/{plural}" if namespaced else f"{prefix}/{plural}"
        return f"{base}/{name}" if name else base

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self.request("POST", self.path(obj["kind"], obj["metadata"].get("namespace")), obj)

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or replace (server-side apply as field manager ha-ops)."""
        meta = obj["metadata"]
        path = self.path(obj["kind"], meta.get("namespace"), meta["name"]) + "?fieldManager=ha-ops&force=true"
        return self.request("PATCH", path, obj, content_type="application/apply-patch+yaml")

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        try:
            return self.request("GET", self.path(kind, namespace, name))
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    def list(self, kind: str, namespace: str | None = None, **selectors: str) -> list[dict[str, Any]]:
        query = f"?{urlencode(selectors)}" if selectors else ""
        return self.request("GET", self.path(kind, namespace) + query)["items"]

    def delete(self, kind: str, name: str, namespace: str | None = None) -> bool:
        try:
            self.request("DELETE", self.path(kind, namespace, name))
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def healthy(self) -> bool:
        try:
            return self._send("GET", "/readyz", None, {})[0] == 200
        except OSError:
            return False


def kubeconfig(server: str, ca: Path, cert: Path, key: Path, user: str) -> dict[str, Any]:
    """A kubeconfig with the certificates inlined (kubectl, client libraries and the components all read it)."""

    def b64(path: Path) -> str:
        return base64.b64encode(path.read_bytes()).decode()

    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "lab", "cluster": {"server": server, "certificate-authority-data": b64(ca)}}],
        "users": [{"name": user, "user": {"client-certificate-data": b64(cert), "client-key-data": b64(key)}}],
        "contexts": [{"name": user, "context": {"cluster": "lab", "user": user}}],
        "current-context": user,
    }
