"""The controller's state in the shared documents (documents.py): read by whoever leads, written only by the lease
holder (fenced)."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from ha_ops.errors import HaOpsError
from ha_ops.remediation.documents import Documents
from ha_ops.remediation.lease import LeaderLease
from ha_ops.remediation.model import STATE_VERSION, ControllerState
from ha_ops.util.parsing import parse_json, read_text


class StateError(HaOpsError):
    exit_code = 3


class StateStore:
    def __init__(self, documents: Documents, lease: LeaderLease, name: str = "state.json") -> None:
        self.documents = documents
        self.name = name
        self.lease = lease

    def load(self) -> ControllerState:
        return load_state(self.documents, self.name)

    def exists(self) -> bool:
        """Whether a state was ever written (a leader writes one as it takes over, before any audit entry)."""
        return self.documents.read(self.name) is not None

    def save(self, state: ControllerState, token: int) -> None:
        """Write atomically, only while this controller holds the lease with `token` (else LeaseLost)."""
        self.save_text(state_text(state), token)

    def save_text(self, text: str, token: int) -> None:
        """`save` of a state already serialized (a snapshot taken under the controller's lock)."""
        with self.lease.fenced(token):
            self.documents.write(self.name, text)


def state_text(state: ControllerState) -> str:
    """The state as stored: fields at their defaults left out (read back, they are the defaults again), the version
    always in. A healthy node's record is mostly defaults: at 1,500 nodes the text is a third of the full dump, and
    it is written at every commit."""
    body = state.model_dump_json(exclude_defaults=True, exclude={"version"})
    return f'{{"version":{state.version}' + ("}" if body == "{}" else "," + body[1:])


def load_state(documents: Documents, name: str = "state.json") -> ControllerState:
    """The state as stored (a fresh one when there is none yet); damage is refused, naming where it is."""
    where = f"controller state {documents.describe(name)}"
    try:
        text = documents.read(name)
        if text is None:
            return ControllerState()
        data = json.loads(text)
    except (OSError, ValueError, RecursionError) as exc:
        # Writes replace the whole, so this is damage from outside: refuse rather than forget what was done.
        raise StateError(f"{where} is unreadable ({exc}); restore it or move it away") from exc
    return parse_state(data, where)


def parse_state(data: object, where: str) -> ControllerState:
    if not isinstance(data, dict):
        raise StateError(f"{where} is not a JSON object; restore it or move it away")
    if data.get("version") != STATE_VERSION:
        raise StateError(f"{where} has version {data.get('version')}, expected {STATE_VERSION}")
    try:
        return ControllerState.model_validate(data)
    except ValidationError as exc:
        raise StateError(f"{where} is invalid ({exc.error_count()} error(s): {exc})") from exc
    except RecursionError:
        raise StateError(f"{where} is nested too deeply; restore it or move it away") from None


def read_state(path: Path) -> ControllerState:
    """Read-only access for `controller status` and `audit verify`."""
    where = f"controller state {path}"
    return parse_state(parse_json(read_text(path, where), where), where)
