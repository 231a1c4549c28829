"""The controller's state on shared storage: read by whoever leads, written only by the lease holder (fenced)."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from ha_ops.errors import HaOpsError
from ha_ops.remediation.lease import LeaderLease
from ha_ops.remediation.model import STATE_VERSION, ControllerState
from ha_ops.util.atomic import write_atomic


class StateError(HaOpsError):
    exit_code = 3


class StateStore:
    def __init__(self, path: Path, lease: LeaderLease) -> None:
        self.path = Path(path)
        self.lease = lease

    def load(self) -> ControllerState:
        if not self.path.exists():
            return ControllerState()
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError) as exc:
            # Writes are atomic renames, so this is damage from outside: refuse rather than forget what was done.
            raise StateError(f"controller state {self.path} is unreadable ({exc}); restore it or move it away") from exc
        if not isinstance(data, dict):
            raise StateError(f"controller state {self.path} is not a JSON object; restore it or move it away")
        if data.get("version") != STATE_VERSION:
            raise StateError(
                f"controller state {self.path} has version {data.get('version')}, expected {STATE_VERSION}"
            )
        try:
            return ControllerState.model_validate(data)
        except ValidationError as exc:
            raise StateError(f"controller state {self.path} is invalid ({exc.error_count()} error(s): {exc})") from exc

    def save(self, state: ControllerState, token: int) -> None:
        """Write atomically, only while this controller holds the lease with `token` (else LeaseLost)."""
        with self.lease.fenced(token):
            write_atomic(self.path, state.model_dump_json())


def read_state(path: Path) -> ControllerState:
    """Read-only access for `controller status` and `audit verify`."""
    return ControllerState.model_validate(json.loads(Path(path).read_text()))
