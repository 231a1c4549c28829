"""Leader election by a lease on shared storage, with a fencing token.

The lease file (JSON: holder, token, expires_at) names the leader. A controller takes the lease when it is free or
expired; the token grows by one at every change of holder. Every action the leader takes is preceded by
`check(token)`: the lease must still name this controller with that token, no later term may have been claimed, and
at least `margin` seconds must be left. A frozen leader that wakes up finds another holder (or its own lease expired)
and acts on nothing. The margin bounds the window between the check and the action; actions are idempotent, so an
action repeated by the next leader does no harm.

Each term is claimed once, across hosts, by creating its claim file `terms/<token>` with link(2): the storage's
metadata server makes that atomic (MooseFS' master, an NFS server), and it fails for every controller but one. No
lock is held on the shared storage: a controller cut off from the network while holding one would keep it (MooseFS
keeps a vanished client's flocks for its session's lifetime) and hold the other controller off for good. Within one
process the lease is read and written under a lock, so that its threads see one term at a time.

A torn or corrupt lease file is treated as free, but the token still only grows: every new token is first claimed,
and recorded in a high-water file beside the lease (`lease.token`), so a token of a deposed term is never issued
again.

The lease also carries the audit log's head (`audit_head`: seq, hash, and the audit key's HMAC over them), as the
leader last saved it, carried over from holder to holder: a record of where the log ends outside the log and the
state, so that deleting both is named at the next takeover and by `audit verify --config` (and a live leader writes
it back at its next renewal).

In a Slurm-only cluster the shared storage is the one holding Slurm's StateSaveLocation; a cluster with
Kubernetes can use a coordination.k8s.io Lease with the same semantics (holderIdentity, leaseTransitions as token).
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ha_ops.errors import HaOpsError
from ha_ops.util.atomic import write_atomic

KEEP_CLAIMS = 16  # term claims older than this many terms are removed when a term is won

_process_locks: dict[Path, threading.RLock] = {}
_process_locks_guard = threading.Lock()


def _process_lock(directory: Path) -> threading.RLock:
    """One lock per lease folder in this process: every Lease object on it (and each thread) takes turns."""
    key = directory.resolve()
    with _process_locks_guard:
        return _process_locks.setdefault(key, threading.RLock())


class LeaseLost(HaOpsError):
    """This controller is not (or no longer) the leader; the action was not taken."""


@dataclass(frozen=True)
class RecordedHead:
    """The audit log's head as a leader saved it (audit.AuditHead with the key's HMAC; "" without a key)."""

    seq: int
    hash: str
    mac: str = ""

    def as_json(self) -> dict[str, object]:
        return {"seq": self.seq, "hash": self.hash, "mac": self.mac}

    @classmethod
    def from_json(cls, data: object) -> RecordedHead | None:
        """None for a lease written before it carried the head (or a damaged one: a torn lease is free anyway)."""
        if not isinstance(data, dict):
            return None
        seq, digest, mac = data.get("seq"), data.get("hash"), data.get("mac", "")
        if type(seq) is not int or seq < 0 or not isinstance(digest, str) or not isinstance(mac, str):
            return None
        return cls(seq, digest, mac)


@dataclass(frozen=True)
class LeaseRecord:
    holder: str
    token: int
    expires_at: float
    audit_head: RecordedHead | None = None


class LeaderLease(Protocol):
    """What the controller and its state store ask of a lease: this file lease, or a Kubernetes Lease
    (k8s_lease.py)."""

    me: str
    token: int | None
    renewed_until: float
    audit_head: RecordedHead | None  # written with every renewal; carried over from the last holder when taken

    def read(self) -> LeaseRecord | None: ...

    def acquire_or_renew(self) -> bool: ...

    def renew(self, token: int) -> bool: ...

    def current(self) -> bool: ...

    def check(self, token: int) -> None: ...

    def fenced(self, token: int) -> AbstractContextManager[None]: ...

    def release(self) -> None: ...


class LeaseTerm:
    """What every lease does the same way, over its own `fenced` and the time its last renewal holds until."""

    token: int | None
    renewed_until: float
    clock: Callable[[], float]

    def current(self) -> bool:
        """Whether this controller's term is still within its last renewal: a cheap check, no read of the lease."""
        return self.token is not None and self.clock() < self.renewed_until

    def check(self, token: int) -> None:
        """Raise LeaseLost unless this controller still holds the lease with `token`, with margin to spare."""
        with self.fenced(token):
            pass

    def fenced(self, token: int) -> AbstractContextManager[None]:
        raise NotImplementedError


class Lease(LeaseTerm):
    def __init__(
        self,
        directory: Path,
        me: str,
        ttl_s: float = 3.0,
        margin_s: float = 0.5,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.directory = Path(directory)
        self.path = self.directory / "lease.json"
        self.claims = self.directory / "terms"  # terms/<token>: who claimed each term, created once by link(2)
        self.high_water_path = self.directory / "lease.token"  # the highest token ever issued
        self.me = me
        self.ttl_s = ttl_s
        self.margin_s = margin_s
        self.clock = clock
        self.token: int | None = None  # set while this controller believes it leads
        # Until when the last renewal holds, on this controller's own clock: past it, a leader whose renewals hang
        # (storage cut off with it) knows it no longer leads without reading anything.
        self.renewed_until = 0.0
        self.audit_head: RecordedHead | None = None
        self._highest_seen = 0
        self._lock = _process_lock(self.directory)  # found once: resolving the path is I/O on shared storage

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.directory.mkdir(parents=True, exist_ok=True)
        with self._lock:
            yield

    def read(self) -> LeaseRecord | None:
        try:
            data = json.loads(self.path.read_text())
            return LeaseRecord(str(data["holder"]), int(data["token"]), float(data["expires_at"]),
                               RecordedHead.from_json(data.get("audit_head")))  # fmt: skip
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError):
            return None  # a torn or corrupt lease is treated as free: the token still only grows

    def _claimed(self, token: int) -> bool:
        # A lookup, not a directory listing: a client's cached listing (MooseFS keeps one for a second) may be stale.
        return (self.claims / str(token)).exists()

    def _highest_token(self, record: LeaseRecord | None) -> int:
        """The highest token issued or claimed so far: from the lease, the high-water file, this process's memory
        and the claims above them."""
        highest = max(record.token if record else 0, self._highest_seen)
        with suppress(OSError, ValueError):  # missing (before the first election) or damaged: the others count
            highest = max(highest, int(self.high_water_path.read_text().strip()))
        while self._claimed(highest + 1):
            highest += 1
        return highest

    def _claim(self, token: int) -> bool:
        """Claim term `token` for this controller: True for exactly one claimant, on any host."""
        self.claims.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".claim-{token}.", dir=self.claims)
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write(json.dumps({"holder": self.me, "at": self.clock()}))
                handle.flush()
                os.fsync(handle.fileno())
            os.link(tmp, self.claims / str(token))
            return True
        except FileExistsError:
            return False
        finally:
            Path(tmp).unlink(missing_ok=True)

    def _forget_old_claims(self, token: int) -> None:
        for old in range(max(1, token - KEEP_CLAIMS - 8), token - KEEP_CLAIMS):
            (self.claims / str(old)).unlink(missing_ok=True)

    def acquire_or_renew(self) -> bool:
        """Take the lease if free/expired, renew it if ours. Returns True while this controller leads."""
        return self._take_or_renew(None)

    def renew(self, token: int) -> bool:
        """Renew the lease held with `token`, never take one: False (and no term held) once the lease no longer
        names this controller with that token, runs out, or a later term was claimed."""
        return self._take_or_renew(token)

    def _take_or_renew(self, only: int | None) -> bool:
        with self._locked():
            if only is not None and self.token != only:
                return False
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
                and not self._claimed(record.token + 1)
            ):
                token, head = record.token, self.audit_head or record.audit_head
            elif only is not None:
                self.token = None
                return False
            else:
                # A new term carries the last holder's record of the audit head (never this process's older one)
                token, head = self._highest_token(record) + 1, record.audit_head if record is not None else None
                self._highest_seen = max(self._highest_seen, token)
                if not self._claim(token):  # another controller claimed this term first
                    self.token = None
                    return False
                write_atomic(self.high_water_path, str(token))  # before the lease names it
                self._forget_old_claims(token)
            write_atomic(self.path, json.dumps({"holder": self.me, "token": token, "expires_at": now + self.ttl_s,
                                                **_head_field(head)}))  # fmt: skip
            self.token, self.audit_head = token, head
            self.renewed_until = now + self.ttl_s
            return True

    @contextmanager
    def fenced(self, token: int) -> Iterator[None]:
        """Verify `token` and hold this process's lease lock for the caller's write: no renewal or takeover by this
        process meanwhile, and no other controller's before the lease expires (the margin)."""
        with self._locked():
            record = self.read()
            now = self.clock()
            named = record is not None and record.holder == self.me and record.token == token
            if not named or self._claimed(token + 1):
                # (a stale token checked by an old thread does not end the current term; a later claim ends it)
                if named or record is None or record.holder != self.me or record.token != self.token:
                    self.token = None
                holder = f"a controller that claimed term {token + 1}" if named else (
                    f"{record.holder} (token {record.token})" if record else "nobody")  # fmt: skip
                raise LeaseLost(f"{self.me} with token {token} is not the leader; the lease is held by {holder}")
            if record.expires_at - now < self.margin_s:
                raise LeaseLost(f"{self.me}'s lease has {record.expires_at - now:.2f} s left, under the margin")
            yield

    def release(self) -> None:
        with self._locked():
            record = self.read()
            if record is not None and record.holder == self.me:
                head = self.audit_head or record.audit_head
                write_atomic(self.path, json.dumps({"holder": "", "token": record.token, "expires_at": 0,
                                                    **_head_field(head)}))  # fmt: skip
            self.token = None
            self.renewed_until = 0.0


def _head_field(head: RecordedHead | None) -> dict[str, object]:
    return {"audit_head": head.as_json()} if head is not None else {}
