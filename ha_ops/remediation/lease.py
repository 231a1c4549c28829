"""Leader election by a lease on shared storage, with a fencing token.

The lease file (JSON: holder, token, expires_at) is read and written only under an exclusive flock on a lock
file beside it. A controller takes the lease when it is free or expired; the token grows by one at every change of
holder. Every action the leader takes is preceded by `check(token)`: the lease must still name this controller with
that token and have at least `margin` seconds left. A frozen leader that wakes up finds another holder (or its own
lease expired) and acts on nothing. The margin bounds the window between the check and the action; actions are
idempotent, so an action repeated by the next leader does no harm.

A torn or corrupt lease file is treated as free, but the token still only grows: every new token is first recorded
in a high-water file beside the lease (`lease.token`), so a token of a deposed term is never issued again.

In a Slurm-only cluster the shared storage is the one holding Slurm's StateSaveLocation; a cluster with
Kubernetes can use a coordination.k8s.io Lease with the same semantics (holderIdentity, leaseTransitions as token).
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from ha_ops.errors import HaOpsError
from ha_ops.util.atomic import write_atomic


class LeaseLost(HaOpsError):
    """This controller is not (or no longer) the leader; the action was not taken."""


@dataclass(frozen=True)
class LeaseRecord:
    holder: str
    token: int
    expires_at: float


class Lease:
    def __init__(
        self,
        directory: Path,
        me: str,
        ttl_s: float = 3.0,
        margin_s: float = 0.5,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = Path(directory) / "lease.json"
        self.lock_path = Path(directory) / "lease.lock"
        self.high_water_path = Path(directory) / "lease.token"  # the highest token ever issued
        self.me = me
        self.ttl_s = ttl_s
        self.margin_s = margin_s
        self.clock = clock
        self.token: int | None = None  # set while this controller believes it leads
        self._highest_seen = 0

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.lock_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def read(self) -> LeaseRecord | None:
        try:
            data = json.loads(self.path.read_text())
            return LeaseRecord(str(data["holder"]), int(data["token"]), float(data["expires_at"]))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError):
            return None  # a torn or corrupt lease is treated as free: the token still only grows

    def _highest_token(self, record: LeaseRecord | None) -> int:
        """The highest token issued so far: from the lease, the high-water file and this process's memory."""
        highest = max(record.token if record else 0, self._highest_seen)
        with suppress(OSError, ValueError):  # missing (before the first election) or damaged: the others count
            highest = max(highest, int(self.high_water_path.read_text().strip()))
        return highest

    def acquire_or_renew(self) -> bool:
        """Take the lease if free/expired, renew it if ours. Returns True while this controller leads."""
        with self._locked():
            now = self.clock()
            record = self.read()
            if record is not None:
                self._highest_seen = max(self._highest_seen, record.token)
            if record is not None and record.holder != self.me and record.expires_at > now:
                self.token = None
                return False
            if (
                record is not None
                and record.holder == self.me
                and record.token == self.token
                and record.expires_at > now
            ):
                token = record.token
            else:
                token = self._highest_token(record) + 1
                write_atomic(self.high_water_path, str(token))  # before the lease names it
            self._highest_seen = max(self._highest_seen, token)
            write_atomic(self.path, json.dumps({"holder": self.me, "token": token, "expires_at": now + self.ttl_s}))
            self.token = token
            return True

    def check(self, token: int) -> None:
        """Raise LeaseLost unless this controller still holds the lease with `token`, with margin to spare."""
        with self.fenced(token):
            pass

    @contextmanager
    def fenced(self, token: int) -> Iterator[None]:
        """Hold the lease lock while verifying `token`, and keep holding it for the caller's write."""
        with self._locked():
            record = self.read()
            now = self.clock()
            if record is None or record.holder != self.me or record.token != token:
                if record is None or record.holder != self.me or record.token != self.token:
                    self.token = None  # (a stale token checked by an old thread does not end the current term)
                holder = f"{record.holder} (token {record.token})" if record else "nobody"
                raise LeaseLost(f"{self.me} with token {token} is not the leader; the lease is held by {holder}")
            if record.expires_at - now < self.margin_s:
                raise LeaseLost(f"{self.me}'s lease has {record.expires_at - now:.2f} s left, under the margin")
            yield

    def release(self) -> None:
        with self._locked():
            record = self.read()
            if record is not None and record.holder == self.me:
                write_atomic(self.path, json.dumps({"holder": "", "token": record.token, "expires_at": 0}))
            self.token = None
