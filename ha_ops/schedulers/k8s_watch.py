"""Objects kept as a client-go informer keeps them: one list, then a watch from the list's resourceVersion.

The controller reads every node's state every `node_poll_s` (lost nodes), and counts a node's pods each time it
describes the node (before and after every action, for the audit). Listing 1,500 Nodes per poll cost it about
0.2 s of CPU and the API server the serialisation of every Node, and listing a node's pods took 55 ms on the lab's
loaded API server: during a storm of 150 failing nodes that left the API server too busy to cordon them quickly.
With the watches, a poll and a count read memory, and the API server sends only what changed. A watch that breaks
resumes from its last resourceVersion; one too old to resume (410 Gone) lists again.

What must be exact is still read from the API: the node before a write (its resourceVersion), the pods to evict.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from lightkube import ApiError, Client
from lightkube.resources.core_v1 import Pod
from lightkube.types import OnErrorAction, OnErrorResult

from ha_ops.errors import HaOpsError

log = logging.getLogger(__name__)


class CacheNotSynced(HaOpsError):
    """The first list has not come back yet."""


def _resume_or_relist(error: Exception, count: int) -> OnErrorResult:
    if isinstance(error, ApiError) and error.status.code == 410:
        return OnErrorResult(OnErrorAction.STOP)  # too old: the loop below lists again
    return OnErrorResult(OnErrorAction.RETRY, sleep=min(5.0, 0.2 * 2**count))


def _version(obj: dict[str, Any]) -> int:
    """resourceVersion is opaque to clients, but etcd's revision in every API server: compared only to keep the
    newer of two copies, and an unreadable one loses."""
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


class WatchCache:
    def __init__(
        self,
        client: Client,
        resource: type[Any],
        labels: dict[str, str] | None = None,
        namespace: str | None = None,  # a namespaced resource's: one namespace, or "*" for all
        fields: dict[str, str] | None = None,
    ) -> None:
        self.client = client
        self.resource = resource
        self.labels = labels
        self.namespace = namespace
        self.fields = fields
        self._objects: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"watch-{self.resource.__name__}", daemon=True)
            self._thread.start()

    @property
    def synced(self) -> bool:
        """The first list is in (the controller's metrics say so: ha_ops_controller_watch_synced)."""
        return self._synced.is_set()

    def _wait_synced(self, timeout_s: float) -> None:
        self.start()
        if not self._synced.wait(timeout_s):
            raise CacheNotSynced(f"the {self.resource.__name__} watch has not listed them yet")

    def objects(self, timeout_s: float = 10.0) -> list[dict[str, Any]]:
        """Every object as last seen (plain dicts); CacheNotSynced before the first list is in."""
        self._wait_synced(timeout_s)
        with self._lock:
            return list(self._objects.values())

    def get(self, key: str) -> dict[str, Any] | None:
        """One object as last seen ("namespace/name", "/name" for a cluster object); None before the first list."""
        if not self._synced.is_set():
            self.start()
            return None
        with self._lock:
            return self._objects.get(key)

    def put(self, key: str, obj: dict[str, Any]) -> None:
        """An object as a write of this process returned it: newer than the watch may have delivered yet."""
        with self._lock:
            old = self._objects.get(key)
            if old is None or _version(obj) >= _version(old):
                self._stored(key, obj)

    def _key(self, obj: Any) -> str:
        return f"{obj.metadata.namespace or ''}/{obj.metadata.name}"

    def _stored(self, key: str, obj: dict[str, Any] | None) -> None:
        """Under the lock: `key` now holds `obj` (None: deleted). Subclasses keep their indexes here."""
        if obj is None:
            self._objects.pop(key, None)
        else:
            self._objects[key] = obj

    def _run(self) -> None:
        kwargs: dict[str, Any] = {"labels": self.labels, "fields": self.fields}
        if self.namespace is not None:
            kwargs["namespace"] = self.namespace
        while True:
            try:
                listed = self.client.list(self.resource, **kwargs)
                objects = {self._key(o): o.to_dict() for o in listed if o.metadata}
                with self._lock:
                    for key in list(self._objects):
                        self._stored(key, None)
                    for key, obj in objects.items():
                        self._stored(key, obj)
                self._synced.set()
                events = self.client.watch(self.resource, resource_version=listed.resourceVersion,
                                           on_error=_resume_or_relist, **kwargs)  # fmt: skip
                for kind, obj in events:
                    if obj.metadata is None:
                        continue
                    key, data = self._key(obj), obj.to_dict()
                    with self._lock:
                        old = self._objects.get(key)
                        if kind == "DELETED":
                            self._stored(key, None)
                        elif old is None or _version(data) >= _version(old):
                            self._stored(key, data)
            except Exception as exc:  # the API unreachable: keep the last known objects, try again
                log.warning("%s watch: %s; listing again", self.resource.__name__, exc)
                time.sleep(1.0)


class PodCache(WatchCache):
    """Every pod, indexed by the node it is bound to."""

    def __init__(self, client: Client) -> None:
        super().__init__(client, Pod, namespace="*")
        self._by_node: dict[str, set[str]] = {}

    def _stored(self, key: str, obj: dict[str, Any] | None) -> None:
        old = self._objects.get(key)
        if old is not None:
            self._by_node.get((old.get("spec") or {}).get("nodeName") or "", set()).discard(key)
        super()._stored(key, obj)
        if obj is not None:
            self._by_node.setdefault((obj.get("spec") or {}).get("nodeName") or "", set()).add(key)

    def on_node(self, node: str, timeout_s: float = 10.0) -> list[dict[str, Any]]:
        self._wait_synced(timeout_s)  # (not a copy of every pod: this runs for each node described)
        with self._lock:
            return [self._objects[k] for k in self._by_node.get(node, ())]
