"""The watch caches of the Kubernetes adapter (ha_ops/schedulers/k8s_watch.py), over a fake client: one list, then
the watch's events; a write's answer kept over an older event; pods indexed by node."""

from __future__ import annotations

import threading
from typing import Any

import httpx2
from lightkube import ApiError
from lightkube.models.core_v1 import NodeSpec, PodSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node, Pod

from ha_ops.schedulers.k8s_watch import PodCache, WatchCache
from ha_ops.schedulers.kubernetes import KubernetesOptions, KubernetesScheduler
from ha_ops.util.wait import wait_for


class Listed(list):
    resourceVersion = "10"


class FakeClient:
    """list() answers the objects; watch() yields the queued events, then blocks (as a quiet watch does)."""

    def __init__(self, objects: list[Any], events: list[tuple[str, Any]]) -> None:
        self.objects, self.events = objects, events
        self.watched_from: list[str | None] = []
        self.quiet = threading.Event()

    def list(self, resource: Any, **_: Any) -> Listed:
        return Listed(self.objects)

    def watch(self, resource: Any, resource_version: str | None = None, **_: Any):
        self.watched_from.append(resource_version)
        yield from self.events
        self.quiet.set()
        threading.Event().wait(3600)


def node(name: str, rv: str, unschedulable: bool = False) -> Node:
    return Node(metadata=ObjectMeta(name=name, resourceVersion=rv), spec=NodeSpec(unschedulable=unschedulable))


def pod(name: str, on: str, rv: str) -> Pod:
    return Pod(
        metadata=ObjectMeta(name=name, namespace="ml", resourceVersion=rv), spec=PodSpec(containers=[], nodeName=on)
    )


def test_a_list_then_the_watch_from_its_version_keeps_every_node_current() -> None:
    client = FakeClient(
        [node("a", "5"), node("b", "6")],
        [("MODIFIED", node("a", "11", unschedulable=True)), ("DELETED", node("b", "12"))],
    )
    cache = WatchCache(client, Node)  # type: ignore[arg-type]
    assert {n["metadata"]["name"] for n in cache.objects()} >= {"a"}
    wait_for("the events applied", client.quiet.is_set, timeout=5, interval=0.01)
    assert client.watched_from == ["10"]  # from the list's resourceVersion: nothing missed in between
    assert [(n["metadata"]["name"], n["spec"]["unschedulable"]) for n in cache.objects()] == [("a", True)]


def test_a_writes_answer_is_kept_over_an_older_event() -> None:
    client = FakeClient([node("a", "5")], [])
    cache = WatchCache(client, Node)  # type: ignore[arg-type]
    cache.objects()
    cache.put("/a", node("a", "20", unschedulable=True).to_dict())
    cache.put("/a", node("a", "15").to_dict())  # (an event that was under way)
    assert cache.get("/a")["spec"]["unschedulable"] is True  # type: ignore[index]


def test_pods_are_found_by_their_node_and_move_with_it() -> None:
    client = FakeClient([pod("p1", "n1", "3"), pod("p2", "n1", "4")], [("MODIFIED", pod("p2", "n2", "11"))])
    cache = PodCache(client)  # type: ignore[arg-type]
    cache.objects()  # started, listed
    wait_for("the events applied", client.quiet.is_set, timeout=5, interval=0.01)
    assert [p["metadata"]["name"] for p in cache.on_node("n1")] == ["p1"]
    assert [p["metadata"]["name"] for p in cache.on_node("n2")] == ["p2"]
    assert cache.on_node("n3") == []


class Conflicting:
    """A client whose node is at resourceVersion 30: a patch carrying another version gets 409, as the API
    server answers it; a read returns the current node."""

    def __init__(self) -> None:
        self.current = node("a", "30")
        self.current.metadata.labels = {"ha-ops.io/pool": "gpu"}  # type: ignore[union-attr]
        self.gets = 0
        self.patched: list[str] = []

    def get(self, resource: Any, name: str) -> Node:
        self.gets += 1
        return self.current

    def patch(self, resource: Any, name: str, body: dict[str, Any], **_: Any) -> Node:
        version = body["metadata"]["resourceVersion"]
        self.patched.append(version)
        if version != self.current.metadata.resourceVersion:  # type: ignore[union-attr]
            response = httpx2.Response(409, json={"code": 409, "message": "the object has been modified"},
                                       request=httpx2.Request("PATCH", "https://api/"))  # fmt: skip
            raise ApiError(response=response)
        self.current = node("a", "31", unschedulable=True)
        self.current.metadata.labels = {"ha-ops.io/pool": "gpu"}  # type: ignore[union-attr]
        return self.current


class StaleCopy:
    """The watch's copy, one version behind."""

    def __init__(self) -> None:
        stale = node("a", "29").to_dict()
        stale["metadata"]["labels"] = {"ha-ops.io/pool": "gpu"}
        self.stored = {"/a": stale}

    def get(self, key: str) -> dict[str, Any] | None:
        return self.stored.get(key)

    def put(self, key: str, obj: dict[str, Any]) -> None:
        self.stored[key] = obj


def test_a_write_from_a_stale_copy_gets_409_then_reads_the_node_and_lands() -> None:
    client = Conflicting()
    scheduler = KubernetesScheduler(client, KubernetesOptions(pool="gpu"), sleep=lambda _: None)  # type: ignore[arg-type]
    copy = StaleCopy()
    scheduler._node_cache = copy  # type: ignore[assignment]
    scheduler._write_node("a", lambda n: {"spec": {"unschedulable": True}})
    assert client.patched == ["29", "30"] and client.gets == 1  # the copy first; a read only after the conflict
    assert copy.stored["/a"]["metadata"]["resourceVersion"] == "31"  # the answer kept, ahead of the watch


def test_the_controllers_scheduler_lists_at_once_and_says_when_its_watches_are_in() -> None:
    # (a controller that waited for its first read to start them answered a storm's first seconds with a GET each)
    client = FakeClient([node("a", "5")], [])
    scheduler = KubernetesScheduler(client, KubernetesOptions(watch_nodes=True))  # type: ignore[arg-type]
    wait_for("both watches listed", lambda: all(scheduler.watches_synced().values()), timeout=5, interval=0.01)
    assert scheduler.watches_synced() == {"Node": True, "Pod": True}  # and no read asked for them
    assert KubernetesScheduler(client).watches_synced() == {}  # type: ignore[arg-type]
