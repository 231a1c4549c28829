"""Calling the remediation controllers' API (remediation/server.py) as an operator does: one controller, or the
pair, finding the leader (the standby answers 503 naming it). Used by `ha-ops controller` and `ha-ops fleet`, and by
a driver rollout that announces its batches (rollout/coordination.py)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from ha_ops.errors import TransportError
from ha_ops.security.tls import ReloadingContext, TlsFiles
from ha_ops.spec.layout import Layout
from ha_ops.spec.model import ClusterSpec


def urls_from_spec(spec: ClusterSpec, layout: Layout) -> list[str]:
    """The controllers' base URLs as the spec deploys them (its controller hosts, `remediation.port`, https with
    `remediation.tls`); none without a `remediation` section."""
    if spec.remediation is None:
        return []
    scheme = "https" if spec.remediation.tls else "http"
    return [f"{scheme}://{n.address}:{spec.remediation.port}" for n in layout.nodes_with_role("controller")]


class ControllerRefused(TransportError):
    """The controller answered with an HTTP error; `status` is its code (4xx: refused on the request's merits)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def call(
    url: str, method: str = "GET", files: TlsFiles | None = None, body: dict[str, Any] | None = None,
    timeout: float = 10.0,
) -> dict[str, Any]:  # fmt: skip
    """One request; its JSON answer. ControllerRefused naming the URL for an HTTP error (with the answer's text),
    TransportError for an unreachable controller."""
    data = json.dumps(body if body is not None else {}).encode() if method == "POST" else None
    request = urllib.request.Request(url, method=method, data=data, headers={"Content-Type": "application/json"})
    context = ReloadingContext(files, server=False).get() if files is not None else None
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        text = exc.read().decode(errors="replace")
        raise ControllerRefused(f"{url}: HTTP {exc.code}: {text.strip()}", exc.code) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise TransportError(f"{url}: {exc}") from None


class Controllers:
    """The controller pair by their base URLs: requests go to whichever leads."""

    def __init__(self, urls: list[str], files: TlsFiles | None = None, timeout: float = 10.0) -> None:
        if not urls:
            raise ValueError("no controller URL")
        self.urls = [u.rstrip("/") for u in urls]
        self.files = files
        self.timeout = timeout

    def leader_state(self) -> dict[str, Any]:
        """The leader's /v1/state (its state and its `safety` summary)."""
        seen = []
        for url in self.urls:
            try:
                answer = call(f"{url}/v1/state", files=self.files, timeout=self.timeout)
            except TransportError as exc:
                seen.append(str(exc))
                continue
            if answer.get("leader") and answer.get("state") is not None:
                return answer
            seen.append(f"{url}: standby")
        raise TransportError(f"no remediation controller leads ({'; '.join(seen)})")

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST to the leader (a standby's 503 sends it to the next URL)."""
        seen = []
        for url in self.urls:
            try:
                return call(f"{url}{path}", "POST", self.files, body, self.timeout)
            except TransportError as exc:
                seen.append(str(exc))
                if isinstance(exc, ControllerRefused) and 400 <= exc.status < 500:
                    break  # refused on its merits (a bad request, not an operator): no use asking the other
        raise TransportError(f"{path}: {'; '.join(seen)}")
