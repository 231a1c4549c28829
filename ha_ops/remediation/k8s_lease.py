"""The leader lease as a Kubernetes Lease (coordination.k8s.io/v1), with the file lease's semantics (lease.py): one
holder at a time, a fencing token that only grows, `check(token)` before every action, a margin before expiry.

- The holder is `spec.holderIdentity` (the pod's name); the token is `spec.leaseTransitions`, which grows by one at
  every change of holder.
- Every write carries the resourceVersion read, so of two controllers taking an expired lease one wins and the
  other gets 409 Conflict: the API server's optimistic concurrency is the atomic claim that link(2) is on shared
  storage.
- Expiry is judged on each controller's own clock, as client-go's leader election does: a standby counts the lease
  expired once its resourceVersion has not changed for the lease duration since it first saw it, so clock skew
  between hosts never hands the lease over early. The holder's own checks use the time its last renewal was sent.
- The fencing check reads the lease (a GET: a quorum read of etcd), unless a watch of the Lease (`watch`) last
  delivered this controller's own latest renewal: then nothing has been written over it since, as far as a read
  could tell either, and the check costs no request. A storm's hundreds of checks a second then cost the API server
  nothing; a takeover, a deletion or a watch that stalled sends them back to reading (docs/architecture.md).
- The audit log's head as the leader last saved it rides on every write, as the annotation `ha-ops.io/audit-head`
  (lease.py's `audit_head`).
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

import httpx2
from lightkube import ApiError, Client
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease as LeaseObject
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from ha_ops.remediation.lease import LeaseLost, LeaseRecord, LeaseTerm, RecordedHead
from ha_ops.schedulers.k8s_watch import WatchCache

log = logging.getLogger(__name__)
LEADER_LABEL = "ha-ops.io/leader"
AUDIT_HEAD = "ha-ops.io/audit-head"  # the Lease's annotation: the audit log's head as the leader saved it (lease.py)


def _recorded_head(lease: LeaseObject) -> RecordedHead | None:
    text = ((lease.metadata.annotations if lease.metadata else None) or {}).get(AUDIT_HEAD)
    try:
        return RecordedHead.from_json(json.loads(text)) if text else None
    except ValueError:
        return None


def _annotate(lease: LeaseObject, head: RecordedHead | None) -> None:
    if head is None:
        return
    lease.metadata = lease.metadata or ObjectMeta()
    lease.metadata.annotations = {**(lease.metadata.annotations or {}), AUDIT_HEAD: json.dumps(head.as_json())}


class KubernetesLease(LeaseTerm):
    def __init__(
        self,
        client: Client,
        name: str,
        namespace: str,
        me: str,
        ttl_s: float = 3.0,
        margin_s: float = 0.5,
        clock: Callable[[], float] = time.time,
        watch: bool = False,
    ) -> None:
        self.client = client
        self.name = name
        self.namespace = namespace
        self.me = me
        self.ttl_s = ttl_s
        self.duration_s = max(1, math.ceil(ttl_s))  # the API keeps whole seconds
        self.margin_s = margin_s
        self.clock = clock
        self.token: int | None = None
        self.renewed_until = 0.0
        self.audit_head: RecordedHead | None = None
        self._renewed_version: str | None = None  # the resourceVersion this controller's latest renewal wrote
        self._watch = (
            WatchCache(client, LeaseObject, namespace=namespace, fields={"metadata.name": name}) if watch else None
        )
        self._seen: tuple[str, float] = ("", 0.0)  # (resourceVersion, when this controller first saw it)
        self._lock = threading.RLock()  # the token and renewal bookkeeping
        # Fencing reads shared by concurrent checks (_read_shared): reads started, finished, one in flight, its record.
        self._reads = threading.Condition()
        self._started = self._finished = 0
        self._in_flight = False
        self._record: LeaseRecord | None = None

    def _get(self) -> LeaseObject | None:
        try:
            return self.client.get(LeaseObject, self.name, namespace=self.namespace)
        except ApiError as exc:
            if exc.status.code == 404:
                return None
            raise

    def _expires_at(self, lease: LeaseObject) -> float:
        """When the lease runs out on this controller's clock: the lease duration after its current version was
        first seen here."""
        version = lease.metadata.resourceVersion if lease.metadata else ""
        if self._seen[0] != version:
            self._seen = (version or "", self.clock())
        spec = lease.spec or LeaseSpec()
        if not spec.holderIdentity:
            return 0.0
        return self._seen[1] + (spec.leaseDurationSeconds or self.duration_s)

    def read(self) -> LeaseRecord | None:
        try:
            lease = self._get()
        except (ApiError, httpx2.HTTPError):
            return None
        if lease is None:
            return None
        spec = lease.spec or LeaseSpec()
        with self._lock:
            expires_at = self._expires_at(lease)
        return LeaseRecord(spec.holderIdentity or "", spec.leaseTransitions or 0, expires_at, _recorded_head(lease))

    def _read_shared(self) -> LeaseRecord | None:
        """The lease as a read that started after this call did returns it. Concurrent callers share one read: while
        one is in flight the others wait for the next, which serves them all (under a storm every action and state
        write is fenced: one GET each, in series, held the renewals back until the lease was lost)."""
        with self._reads:
            wanted = self._started + 1
            while self._finished < wanted:
                if self._in_flight:
                    self._reads.wait()
                    continue
                self._in_flight, self._started = True, self._started + 1
                number = self._started
                self._reads.release()
                try:
                    record = self.read()
                finally:
                    self._reads.acquire()
                    self._in_flight, self._finished, self._record = False, number, record
                    self._reads.notify_all()
            return self._record

    def _watched(self) -> LeaseRecord | None:
        """The lease as the watch last delivered it, when that is this controller's latest renewal (None otherwise:
        the check reads it)."""
        seen = self._watch.get(f"{self.namespace}/{self.name}") if self._watch is not None else None
        with self._lock:
            if seen is None or self._renewed_version is None:
                return None
            if (seen.get("metadata") or {}).get("resourceVersion") != self._renewed_version:
                return None
            spec = seen.get("spec") or {}
            return LeaseRecord(spec.get("holderIdentity") or "", spec.get("leaseTransitions") or 0, self.renewed_until)

    def acquire_or_renew(self) -> bool:
        """Take the lease if free or expired, renew it if ours. Returns True while this controller leads. API
        errors other than a lost race propagate as OSError, as the file lease's storage errors do."""
        return self._take_or_renew(None)

    def renew(self, token: int) -> bool:
        """Renew the lease held with `token`, never take one: False (and no term held) once the lease no longer
        names this controller with that token."""
        return self._take_or_renew(token)

    def _take_or_renew(self, only: int | None) -> bool:
        with self._lock:
            if only is not None and self.token != only:
                return False
            sent_at = self.clock()
            now_api = datetime.now(UTC)
            try:
                lease = self._get()
                if lease is None and only is not None:
                    self.token = self._renewed_version = None
                    return False
                if lease is None:
                    token, head = 1, self.audit_head
                    body = LeaseObject(
                        metadata=ObjectMeta(name=self.name, namespace=self.namespace),
                        spec=LeaseSpec(holderIdentity=self.me, leaseDurationSeconds=self.duration_s,
                                       acquireTime=now_api, renewTime=now_api, leaseTransitions=token),
                    )  # fmt: skip
                    _annotate(body, head)
                    written = self.client.create(body)
                else:
                    spec = lease.spec or LeaseSpec()
                    transitions = spec.leaseTransitions or 0
                    ours = spec.holderIdentity == self.me and transitions == self.token
                    taken = bool(spec.holderIdentity) and self._expires_at(lease) > sent_at
                    if not ours and (only is not None or taken):
                        self.token = self._renewed_version = None
                        return False
                    token = transitions if ours else transitions + 1
                    # (a new term carries the last holder's record of the audit head, never this process's older one)
                    head = (self.audit_head or _recorded_head(lease)) if ours else _recorded_head(lease)
                    _annotate(lease, head)
                    spec.holderIdentity = self.me
                    spec.leaseDurationSeconds = self.duration_s
                    spec.renewTime = now_api
                    if not ours:
                        spec.acquireTime, spec.leaseTransitions = now_api, token
                    lease.spec = spec
                    written = self.client.replace(lease)  # carries the resourceVersion read: 409 if another wrote
            except ApiError as exc:
                if exc.status.code == 409:  # another controller took (or renewed) it first
                    self.token = self._renewed_version = None
                    return False
                raise OSError(f"lease {self.namespace}/{self.name}: {exc.status.code} {exc.status.message}") from None
            except httpx2.HTTPError as exc:
                raise OSError(f"lease {self.namespace}/{self.name}: {exc}") from None
            self.token, self.audit_head = token, head
            self.renewed_until = sent_at + self.duration_s
            self._renewed_version = written.metadata.resourceVersion if written.metadata else None
            if self._watch is not None:
                self._watch.start()
            return True

    @contextmanager
    def fenced(self, token: int) -> Iterator[None]:
        """Go on only while the lease names this controller with `token`, with the margin to spare: the lease read
        now, or as the watch delivered this controller's own latest renewal (_watched). The body runs without the
        renewal's lock: another process is not held back by it anyway, and a renewal must never wait behind a
        write."""
        record = self._watched() or self._read_shared()
        with self._lock:
            if record is None or record.holder != self.me or record.token != token:
                if token == self.token:
                    self.token = None
                holder = f"{record.holder} (token {record.token})" if record and record.holder else "nobody"
                raise LeaseLost(f"{self.me} with token {token} is not the leader; the lease is held by {holder}")
            left = self.renewed_until - self.clock()
            if left < self.margin_s:
                raise LeaseLost(f"{self.me}'s lease has {left:.2f} s left, under the margin")
        yield

    def release(self) -> None:
        with self._lock:
            try:
                lease = self._get()
                if lease is not None and lease.spec is not None and lease.spec.holderIdentity == self.me:
                    lease.spec.holderIdentity = None
                    _annotate(lease, self.audit_head)
                    self.client.replace(lease)
            except (ApiError, httpx2.HTTPError):
                pass  # it runs out by itself
            self.token = self._renewed_version = None


class LeaderLabel:
    """The label `ha-ops.io/leader=true` on this controller's own pod while it leads, and off when it does not: the
    Kubernetes layer's Service selects it, so the agents' reports (one URL, the Service) reach the leader instead of
    a standby's 503 half the time. Marked at every lease step: a write that failed is tried again at the next. A
    ValidatingAdmissionPolicy of the layer lets the controller change this one label of its own pods, nothing else."""

    def __init__(self, client: Client, namespace: str, pod: str) -> None:
        self.client = client
        self.namespace = namespace
        self.pod = pod
        self.written: bool | None = None  # what the pod's label says, as this controller last wrote it
        self._failed = ""  # the last failure, logged once

    def mark(self, leading: bool) -> None:
        if leading == self.written:
            return
        patch = {"metadata": {"labels": {LEADER_LABEL: "true" if leading else None}}}
        try:
            self.client.patch(Pod, self.pod, patch, namespace=self.namespace, patch_type=PatchType.MERGE)
        except (ApiError, httpx2.HTTPError) as exc:
            why = f"{exc.status.code} {exc.status.message}" if isinstance(exc, ApiError) else str(exc)
            if why != self._failed:
                log.warning("cannot label pod %s/%s %s=%s: %s", self.namespace, self.pod, LEADER_LABEL,
                            leading, why)  # fmt: skip
            self._failed = why
            return
        self.written, self._failed = leading, ""
