"""The Kubernetes adapter's pure parts: Node objects read as the policy's node states, pods read as jobs, taint
values, Retry-After. The calls themselves are shown against a real API server (tests/integration/test_kubernetes.py)."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest
from lightkube import ApiError
from lightkube.resources.core_v1 import Node

from ha_ops.schedulers.kubernetes import (
    REASON_ANNOTATION,
    SPARE_TAINT_KEY,
    TAINT_KEY,
    KubernetesError,
    KubernetesScheduler,
    NodeFacts,
    pod_job,
    retry_after,
    taint_value,
    with_taint,
    without_taint,
)


def node(ready: str = "True", cordoned: bool = False, taints: list[dict[str, str]] | None = None,
         reason: str = "") -> dict[str, Any]:  # fmt: skip
    return {
        "metadata": {"name": "n1", "annotations": {REASON_ANNOTATION: reason} if reason else {}},
        "spec": {"unschedulable": cordoned, "taints": taints or []},
        "status": {"conditions": [{"type": "Ready", "status": ready}]},
    }


@pytest.mark.parametrize(
    ("facts", "pods", "sinfo", "scontrol"),
    [
        (node(), 0, "idle", "IDLE"),
        (node(), 2, "allocated", "ALLOCATED"),
        (node(ready="Unknown"), 0, "idle*", "IDLE*"),  # the node controller lost the kubelet: not responding
        (node(ready="False"), 1, "allocated*", "ALLOCATED*"),
        (node(cordoned=True), 0, "drained", "IDLE+DRAIN"),
        (node(cordoned=True), 1, "draining", "ALLOCATED+DRAIN"),
        (
            node(cordoned=True, ready="Unknown", taints=[{"key": TAINT_KEY, "value": "lost", "effect": "NoExecute"}]),
            0,
            "down*",
            "DOWN*+DRAIN",
        ),
    ],
)
def test_a_node_reads_as_the_policy_state_sinfo_or_scontrol_would_give(
    facts: dict[str, Any], pods: int, sinfo: str, scontrol: str
) -> None:
    read = NodeFacts.of(facts)
    assert read.sinfo_state(pods) == sinfo
    assert read.scontrol_state(pods) == scontrol


def test_a_drain_of_ours_missing_its_taint_reads_as_not_drained_so_it_is_done_again() -> None:
    ours = "ha-ops: GPU1 xid: XID 79"
    whole = node(cordoned=True, reason=ours, taints=[{"key": TAINT_KEY, "value": "x", "effect": "NoSchedule"}])
    whole["status"]["conditions"].append({"type": "GpuHealthy", "status": "False"})
    assert NodeFacts.of(whole).scontrol_state(0) == "IDLE+DRAIN"
    no_taint = node(cordoned=True, reason=ours)
    no_taint["status"]["conditions"].append({"type": "GpuHealthy", "status": "False"})
    assert NodeFacts.of(no_taint).scontrol_state(0) == "IDLE"
    # The condition is the agent's (or the ConditionKeeper's, later): without it the node is drained all the same.
    no_condition = node(cordoned=True, reason=ours, taints=[{"key": TAINT_KEY, "value": "x", "effect": "NoSchedule"}])
    assert NodeFacts.of(no_condition).sinfo_state(0) == "drained"
    assert NodeFacts.of(node(cordoned=True)).scontrol_state(0) == "IDLE+DRAIN"  # someone else's cordon: as it is


def test_the_reason_is_read_from_the_annotation_only() -> None:
    assert NodeFacts.of(node(cordoned=True, reason="ha-ops: GPU1 xid: XID 79")).reason == "ha-ops: GPU1 xid: XID 79"
    assert NodeFacts.of(node(cordoned=True)).reason == ""  # cordoned by a person: no reason of ours


def test_a_nodes_without_status_is_not_responding() -> None:
    assert NodeFacts.of({"metadata": {"name": "n1"}}).sinfo_state(0) == "idle*"


def pod(phase: str = "Running", owner: str | None = "Job", node_name: str | None = "n1",
        deleting: bool = False) -> dict[str, Any]:  # fmt: skip
    owners = [{"kind": owner, "name": "train", "controller": True}] if owner else []
    meta: dict[str, Any] = {"name": "train-x", "namespace": "ml", "ownerReferences": owners}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-02T10:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": node_name}, "status": {"phase": phase}}


def test_pods_read_as_jobs_and_daemonsets_and_finished_pods_are_not_jobs() -> None:
    job = pod_job(pod())
    assert job is not None and (job.id, job.state, job.nodes, job.name) == ("ml/train-x", "RUNNING", ("n1",), "train")
    assert pod_job(pod(phase="Pending", node_name=None)).nodes == ()  # type: ignore[union-attr]
    assert pod_job(pod(deleting=True)).state == "COMPLETING"  # type: ignore[union-attr]
    assert pod_job(pod(owner="DaemonSet")) is None  # the agent's own pod is not work to move
    assert pod_job(pod(phase="Succeeded")) is None and pod_job(pod(phase="Failed")) is None


@pytest.mark.parametrize(
    ("reason", "value"),
    [
        ("ha-ops: GPU1 xid: XID 79: GPU has fallen off the bus", "GPU1-xid-XID-79-GPU-has-fallen-off-the-bus"),
        ("ha-ops: lost: Slurm reports it down*", "lost-Slurm-reports-it-down"),
        ("ha-ops: ---", "unhealthy"),
        ("x" * 100, "x" * 63),
    ],
)
def test_taint_values_are_valid_label_values(reason: str, value: str) -> None:
    assert taint_value(reason) == value


def test_taints_are_set_once_per_key_and_effect_and_removed_by_key() -> None:
    taints = [{"key": "other", "value": "x", "effect": "NoSchedule"}]
    once = with_taint(with_taint(taints, TAINT_KEY, "a", "NoSchedule"), TAINT_KEY, "b", "NoSchedule")
    assert once == [taints[0], {"key": TAINT_KEY, "value": "b", "effect": "NoSchedule"}]
    both = with_taint(once, TAINT_KEY, "lost", "NoExecute")
    assert len(both) == 3
    assert without_taint(with_taint(both, SPARE_TAINT_KEY, "true", "NoSchedule"), TAINT_KEY) == [
        taints[0], {"key": SPARE_TAINT_KEY, "value": "true", "effect": "NoSchedule"}]  # fmt: skip


def test_retry_after_is_honoured_and_capped_and_otherwise_backs_off() -> None:
    assert retry_after({"retry-after": "3"}, attempt=0) == 3.0
    assert retry_after({"retry-after": "3600"}, attempt=0) == 10.0
    assert retry_after({"retry-after": "soon"}, attempt=1) == 0.4
    assert [retry_after({}, attempt=a) for a in range(3)] == [0.2, 0.4, 0.8]
    assert retry_after(None, attempt=10) == 10.0


def api_error(code: int, retry_after_s: str | None = None) -> ApiError:
    headers = {"Retry-After": retry_after_s} if retry_after_s else {}
    request = httpx2.Request("PATCH", "https://api/api/v1/nodes/n1")
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "message": f"said {code}"}
    return ApiError(request=request, response=httpx2.Response(code, headers=headers, json=body, request=request))


def scheduler_that_sleeps(waits: list[float]) -> KubernetesScheduler:
    return KubernetesScheduler(client=None, sleep=waits.append)  # type: ignore[arg-type]  # (only _call is used)


def test_429_and_409_are_retried_honouring_retry_after_then_succeed() -> None:
    waits: list[float] = []
    answers = iter([api_error(429, "2"), api_error(409), "done"])

    def call() -> str:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert scheduler_that_sleeps(waits)._call("patch node n1", call) == "done"
    assert waits == [2.0, 0.4]  # the server's Retry-After, then the backoff of the second attempt


def test_403_is_retried_twice_then_named_and_a_400_at_once() -> None:
    waits: list[float] = []
    sched = scheduler_that_sleeps(waits)

    def forbidden() -> None:
        raise api_error(403)

    with pytest.raises(KubernetesError, match="patch node n1: 403 said 403"):
        sched._call("patch node n1", forbidden)
    assert len(waits) == 2

    def bad() -> None:
        raise api_error(400)

    waits.clear()
    with pytest.raises(KubernetesError, match="400"):
        sched._call("patch node n1", bad)
    assert waits == []


def test_a_refused_list_page_is_retried_as_a_refused_get_is() -> None:
    """lightkube raises the HTTP error itself, not ApiError, from a list's pages: its Retry-After counts too."""
    waits: list[float] = []
    request = httpx2.Request("GET", "https://api.example/api/v1/pods")
    body = {"kind": "Status", "code": 429, "message": "too many requests, please try again later"}
    throttled = httpx2.Response(429, headers={"Retry-After": "1"}, json=body, request=request)
    answers = iter([httpx2.HTTPStatusError("429", request=request, response=throttled), "pods"])

    def call() -> str:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert scheduler_that_sleeps(waits)._call("list pods", call) == "pods"
    assert waits == [1.0]
    always = httpx2.Response(403, json={"message": "pods is forbidden"}, request=request)

    def forbidden() -> None:
        raise httpx2.HTTPStatusError("403", request=request, response=always)

    with pytest.raises(KubernetesError, match="list pods: 403 pods is forbidden"):
        scheduler_that_sleeps([])._call("list pods", forbidden)


class OneNode:
    """A client holding one Node: gets and patches it (a merge of spec and metadata, conditions merged by type),
    answering with the node as written, as the API server does; records each call."""

    def __init__(self, obj: dict[str, Any]) -> None:
        self.obj = {"apiVersion": "v1", "kind": "Node", **obj}
        self.obj["metadata"]["resourceVersion"] = "1"
        self.calls: list[str] = []

    def get(self, kind: type, name: str) -> Any:
        self.calls.append("get")
        return Node.from_dict(self.obj)

    def patch(self, kind: type, name: str, body: dict[str, Any], patch_type: Any = None) -> Any:
        if kind is Node.Status:
            self.calls.append("patch status")
            kept = [c for c in self.obj["status"]["conditions"] if c["type"] != body["status"]["conditions"][0]["type"]]
            self.obj["status"]["conditions"] = [*kept, *body["status"]["conditions"]]
        else:
            self.calls.append("patch node")
            self.obj["spec"].update(body.get("spec") or {})
            annotations = (body.get("metadata") or {}).get("annotations") or {}
            self.obj["metadata"].setdefault("annotations", {}).update(annotations)
        return Node.from_dict(self.obj)


@pytest.mark.parametrize(("agent_said", "calls"), [
    ("False", ["get", "patch node"]),
    ("True", ["get", "patch node", "patch status"]),
    (None, ["get", "patch node", "patch status"]),
])  # fmt: skip
def test_a_drain_writes_the_condition_only_where_the_agent_has_not(agent_said: str | None, calls: list[str]) -> None:
    """In a storm the agents have set GpuHealthy=False before they report, so each drain is one write (the cordon,
    its taint and its reason); a node whose agent has not (a lost one) gets the condition from the drain."""
    obj = node()
    if agent_said is not None:
        obj["status"]["conditions"].append({"type": "GpuHealthy", "status": agent_said})
    client = OneNode(obj)
    KubernetesScheduler(client).drain("n1", "GPU1 xid: XID 79")  # type: ignore[arg-type]
    assert client.calls == calls
    facts = NodeFacts.of(client.obj)
    assert facts.cordoned and facts.reason.endswith("GPU1 xid: XID 79")


class NodesNamed(OneNode):
    """OneNode as the API answers for any name: n1 is there, any other is a 404; no pods anywhere."""

    def get(self, kind: type, name: str) -> Any:
        if name != self.obj["metadata"]["name"]:
            self.calls.append(f"get {name}: 404")
            raise api_error(404)
        return super().get(kind, name)

    def list(self, kind: type, **_: Any) -> list[Any]:
        return []


def test_nodes_leaves_out_a_node_the_api_does_not_know_as_slurms_does() -> None:
    """`nodes` answers the nodes it can describe (the Scheduler protocol; Slurm's leaves out what sinfo does not
    list): a node deleted from Kubernetes meanwhile no longer fails the whole read (it raised UnknownNode)."""
    client = NodesNamed(node())
    found = KubernetesScheduler(client).nodes(["n1", "gone"])  # type: ignore[arg-type]
    assert list(found) == ["n1"] and found["n1"].state == "IDLE"
    assert "get gone: 404" in client.calls
