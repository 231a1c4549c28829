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
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "ConfigMap": ("/api/v1", "configmaps", True),
    "Deployment": ("/apis/apps/v1", "deployments", True),
    "ReplicaSet": ("/apis/apps/v1", "replicasets", True),
    "DaemonSet": ("/apis/apps/v1", "daemonsets", True),
    "Lease": ("/apis/coordination.k8s.io/v1", "leases", True),
    "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "SelfSubjectAccessReview": ("/apis/authorization.k8s.io/v1", "selfsubjectaccessreviews", False),
}


class KubeClient:
    def __init__(self, kubeconfig: Path, timeout: float = 30.0) -> None:
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

    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        conn = http.client.HTTPSConnection(self.host, self.port, context=self.context, timeout=self.timeout)
        try:
            data = json.dumps(body).encode() if body is not None else None
            conn.request(method, path, body=data, headers={"Content-Type": content_type, "Accept": "application/json"})
            response = conn.getresponse()
            text = response.read().decode()
        finally:
            conn.close()
        if response.status >= 400:
            try:
                message = json.loads(text).get("message", text)
            except json.JSONDecodeError:
                message = text
            raise KubeError(response.status, f"{method} {path}: {response.status} {message}")
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
            conn = http.client.HTTPSConnection(self.host, self.port, context=self.context, timeout=5)
            conn.request("GET", "/readyz")
            ok = conn.getresponse().status == 200
            conn.close()
            return ok
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
