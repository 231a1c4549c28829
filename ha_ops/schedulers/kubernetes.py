"""Kubernetes as the scheduler, behind the same calls as Slurm (schedulers/base.py), through lightkube.

Over 400 lines because it is one adapter behind one protocol: every call of schedulers/base.py as Kubernetes does it
(the watches and the node conditions are already modules of their own).

Why lightkube (issue 19 compared it with the official `kubernetes` client, `kubernetes-asyncio` and `kr8s`): typed
models generated per Kubernetes minor version, one small dependency tree (httpx, msgspec), a sync and an async
client with the same calls (the 1,500-node benchmark drives the async one), HTTP/2 and kept-alive connections, and
no code generated at import time (the official client imports ~600 modules: ~1.5 s per CLI start).

What each call does to a node:
- `drain`: cordon (spec.unschedulable), the taint `ha-ops.io/gpu-unhealthy=<reason>:NoSchedule` and the full reason
  in the annotation `ha-ops.io/reason`, in one write (with the `node.kubernetes.io/unschedulable` taint that
  kube-controller-manager would otherwise add in a second write). The condition `GpuHealthy=False`
  (node-problem-detector style) is the node's agent's to write; the drain writes it where the agent has not: at
  once, or (the controller, `condition_grace_s`) after a grace, from a ConditionKeeper (k8s_conditions.py) that
  writes after the cordons.
  Work that runs may finish: `requeue` evicts what may move, as on Slurm.
- `mark_down` (a lost node, after the controller's silence): the same taint with NoExecute as well, so Kubernetes
  evicts the node's pods at once instead of waiting for a node that will not confirm it.
- `resume`: only a node ha-ops drained (its annotation): uncordon, both taints gone, `GpuHealthy=True`.
- Jobs are pods (`namespace/name`), those of DaemonSets and finished ones left out. `requeue` goes through the
  Eviction API, so PodDisruptionBudgets are honoured: a 429 (the budget is spent) is retried, honouring Retry-After,
  until `eviction_timeout_s`; then the namespace's drain policy decides (annotation `ha-ops.io/drain-policy`):
  `immediate` (the default) fails the step, so the controller tries again later; `delete-after-timeout` deletes the
  pod; `allow-completion` never evicts (the pod is left to finish, like a Slurm job that cannot be requeued).
  A Job's pod evicted is recreated by the Job controller, with the same spec: the job contract's checkpoint path.
- Pools and spares: a pool is the nodes labelled `ha-ops.io/pool=<name>`; a node outside the pool is refused. A
  spare is taken out of the pool's work by the taint `ha-ops.io/spare=true:NoSchedule`; `set_partition_nodes`
  removes it from the nodes listed (made schedulable) and puts it on the others.

API errors: 409 (a write raced another; taints are written with the resourceVersion read), 429 and 5xx are retried
with backoff, honouring Retry-After; 403 is retried twice (RBAC bindings take a moment to reach every API server),
then reported naming the verb and the object. A node that does not exist is a clean error, never a traceback.

Over 400 lines on purpose: every call of the Scheduler protocol here goes through the same node writes, retries and
caches (`_write_node`, `_call`, the watch caches); the conditions, the watches and the client's opening already
live in modules of their own (k8s_conditions.py, k8s_watch.py, open.py).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

import httpx2
from lightkube import ApiError, Client, KubeConfig
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, Node, Pod
from lightkube.types import PatchType

from ha_ops.errors import HaOpsError
from ha_ops.schedulers.base import REASON_PREFIX, SchedulerJob, SchedulerNode
from ha_ops.schedulers.k8s_conditions import ConditionKeeper
from ha_ops.schedulers.k8s_watch import PodCache, WatchCache

log = logging.getLogger(__name__)

TAINT_KEY = "ha-ops.io/gpu-unhealthy"
SPARE_TAINT_KEY = "ha-ops.io/spare"
# The taint kube-controller-manager's node lifecycle controller puts on every cordoned node (and takes off an
# uncordoned one) in a write of its own. A cordon that carries it already spares the API server that second write,
# a third of a storm's node writes (docs/testing.md, stop 41).
UNSCHEDULABLE_TAINT_KEY = "node.kubernetes.io/unschedulable"
POOL_LABEL = "ha-ops.io/pool"
TIER_LABEL = "ha-ops.io/reliability-tier"  # a node's reliability tier, for node affinity (docs/fleet.md)
SPARE_LABEL = "ha-ops.io/spare"
REASON_ANNOTATION = "ha-ops.io/reason"
DRAIN_POLICY_ANNOTATION = "ha-ops.io/drain-policy"
CONDITION = "GpuHealthy"
DrainPolicy = Literal["immediate", "allow-completion", "delete-after-timeout"]
DRAIN_POLICIES: tuple[str, ...] = ("immediate", "allow-completion", "delete-after-timeout")
RETRIED = {409, 429, 500, 502, 503, 504}
T = TypeVar("T")


class KubernetesError(HaOpsError):
    """An API call that failed for good: says what was asked and what the API server answered."""


class UnknownNode(KubernetesError):
    pass


def client_from_kubeconfig(path: Path | None = None, timeout_s: float = 10.0) -> Client:
    """A client for a kubeconfig file, or (no path) for the pod's service account or $KUBECONFIG."""
    config = KubeConfig.from_file(str(path)) if path is not None else KubeConfig.from_env()
    return Client(config=config, timeout=httpx2.Timeout(timeout_s), field_manager="ha-ops", trust_env=False)


# --- pure parts ---------------------------------------------------------------------------------------------


def taint_value(reason: str) -> str:
    """A reason as a taint value may carry it (a label value: 63 characters of [A-Za-z0-9_.-], alphanumeric at
    both ends); the whole reason is in the node's annotation."""
    text = reason.removeprefix(REASON_PREFIX).strip()
    value = re.sub(r"[^A-Za-z0-9_.-]+", "-", text)[:63].strip("-_.")
    return value or "unhealthy"


def retry_after(headers: dict[str, str] | Any, attempt: int, cap_s: float = 10.0) -> float:
    """Seconds to wait before the next attempt: the server's Retry-After when it gives one, else 0.2 s doubling."""
    value = headers.get("retry-after") if headers is not None else None
    if value:
        try:
            return min(cap_s, max(0.0, float(value)))
        except ValueError:
            pass
    return min(cap_s, 0.2 * 2**attempt)


@dataclass(frozen=True)
class NodeFacts:
    """What ha-ops reads off a Node object."""

    ready: bool
    down: bool  # ha-ops' NoExecute taint: a lost node
    cordoned: bool  # spec.unschedulable, and, when ha-ops cordoned it, its taint and condition in place too
    reason: str  # the reason ha-ops (or its agent) wrote, "" if none

    @staticmethod
    def condition(node: dict[str, Any], kind: str = CONDITION) -> str | None:
        """The status of one of the node's conditions ("True", "False", "Unknown"), None when it has none."""
        conditions = (node.get("status") or {}).get("conditions") or []
        return next((c.get("status") for c in conditions if c.get("type") == kind), None)

    @classmethod
    def of(cls, node: dict[str, Any]) -> NodeFacts:
        spec, meta, status = node.get("spec") or {}, node.get("metadata") or {}, node.get("status") or {}
        conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
        taints = spec.get("taints") or []
        down = any(t.get("key") == TAINT_KEY and t.get("effect") == "NoExecute" for t in taints)
        reason = (meta.get("annotations") or {}).get(REASON_ANNOTATION, "")
        cordoned = bool(spec.get("unschedulable"))
        if cordoned and reason.startswith(REASON_PREFIX):
            # Nothing half-applied: ha-ops' drain is whole only with its taint too; a cordon without it reads as not
            # drained, so the (idempotent) drain runs again and repairs it. (The GpuHealthy condition is not part
            # of it: the node's agent writes it, or the controller's ConditionKeeper after the cordons.)
            cordoned = any(t.get("key") == TAINT_KEY and t.get("effect") == "NoSchedule" for t in taints)
        return cls(conditions.get("Ready") == "True", down, cordoned, reason)

    def sinfo_state(self, pods: int) -> str:
        """As `sinfo -o %T` would say it: idle, allocated, drained, draining, down; `*` when not responding."""
        star = "" if self.ready else "*"
        if self.down:
            return f"down{star}"
        if self.cordoned:
            return ("draining" if pods else "drained") + star
        return ("allocated" if pods else "idle") + star

    def scontrol_state(self, pods: int) -> str:
        """As `scontrol show node` would say it: IDLE, ALLOCATED, DOWN, with `*` and `+DRAIN`."""
        base = "DOWN" if self.down else "ALLOCATED" if pods else "IDLE"
        return base + ("" if self.ready else "*") + ("+DRAIN" if self.cordoned else "")


def pod_job(pod: dict[str, Any]) -> SchedulerJob | None:
    """A workload pod as a job (None: a DaemonSet's pod, or one that has finished)."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    owners = meta.get("ownerReferences") or []
    if any(o.get("kind") == "DaemonSet" for o in owners):
        return None
    phase = status.get("phase", "Unknown")
    if phase in ("Succeeded", "Failed"):
        return None
    state = (
        "COMPLETING"
        if meta.get("deletionTimestamp")
        else {"Running": "RUNNING", "Pending": "PENDING"}.get(phase, phase.upper())
    )
    owner = next((o.get("name", "") for o in owners if o.get("controller")), "")
    node = spec.get("nodeName")
    return SchedulerJob(f"{meta.get('namespace')}/{meta.get('name')}", state, (node,) if node else (), owner)


def _needs_condition(node: dict[str, Any]) -> bool:
    """Drained by ha-ops (NodeFacts: its cordon, taint and reason) and its GpuHealthy not False yet."""
    facts = NodeFacts.of(node)
    return facts.cordoned and facts.reason.startswith(REASON_PREFIX) and NodeFacts.condition(node) != "False"


def jobs_of(pods: Iterable[dict[str, Any]]) -> list[SchedulerJob]:
    """The pods that are jobs (pod_job), bound to a node."""
    return [j for p in pods if (j := pod_job(p)) is not None and j.nodes]


def _refusal(exc: ApiError | httpx2.HTTPStatusError) -> tuple[int, str]:
    """The status code and the server's message of a refused request."""
    if isinstance(exc, ApiError):
        return exc.status.code or 0, str(exc.status.message or exc.status.reason)
    try:
        message = str(exc.response.json().get("message") or exc.response.reason_phrase)
    except ValueError:
        message = exc.response.reason_phrase
    return exc.response.status_code, message


def with_taint(taints: list[dict[str, Any]], key: str, value: str, effect: str) -> list[dict[str, Any]]:
    kept = [t for t in taints if not (t.get("key") == key and t.get("effect") == effect)]
    return [*kept, {"key": key, "value": value, "effect": effect}]


def without_taint(taints: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    return [t for t in taints if t.get("key") != key]


def set_gpu_condition(
    client: Client,
    node: str,
    status: Literal["True", "False", "Unknown"],
    message: str,
    resource_version: str | None = None,
) -> Node:
    """The node's `GpuHealthy` condition (node-problem-detector style), merged by type into its status: the
    controller sets it with a drain and a resume, the agent on the node as its verdict changes. With
    `resource_version`, only on that version of the node (409 otherwise)."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    reason = {"True": "GpuHealthy", "False": "GpuUnhealthy", "Unknown": "GpuUnreadable"}[status]
    condition = {"type": CONDITION, "status": status, "reason": reason, "message": message[:1024] or reason,
                 "lastHeartbeatTime": now, "lastTransitionTime": now}  # fmt: skip
    body: dict[str, Any] = {"status": {"conditions": [condition]}}
    if resource_version:
        body["metadata"] = {"resourceVersion": resource_version}
    return client.patch(Node.Status, node, body, patch_type=PatchType.STRATEGIC)


# --- the adapter --------------------------------------------------------------------------------------------


@dataclass
class KubernetesOptions:
    pool: str | None = None  # nodes labelled ha-ops.io/pool=<pool>; None: every node
    default_drain_policy: DrainPolicy = "immediate"
    eviction_timeout_s: float = 30.0
    retries: int = 5
    # Node states and pod counts from watches (k8s_watch) instead of a list per call: for a long-running reader
    # that polls every node often (the remediation controller).
    watch_nodes: bool = False
    # A drain's GpuHealthy condition: None, written in the drain (a short-lived caller: the CLI, a rollout); a
    # number, left to the node's agent for that many seconds and then written by a ConditionKeeper where it has not
    # (the remediation controller: in a storm the cordons go first).
    condition_grace_s: float | None = None


class KubernetesScheduler:
    def __init__(
        self, client: Client, options: KubernetesOptions | None = None, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        self.client = client
        self.options = options or KubernetesOptions()
        self.sleep = sleep
        self._pool_labels = {POOL_LABEL: self.options.pool} if self.options.pool else None
        self._node_cache = WatchCache(client, Node, self._pool_labels) if self.options.watch_nodes else None
        self._pod_cache = PodCache(client) if self.options.watch_nodes else None
        for cache in self._caches():
            cache.start()  # at once: listing 1,500 nodes takes seconds, and until then every read is a GET
        grace = self.options.condition_grace_s
        self._conditions = (
            ConditionKeeper(self._seen, _needs_condition, self._write_condition, grace) if grace is not None else None
        )

    def _caches(self) -> list[WatchCache]:
        return [c for c in (self._node_cache, self._pod_cache) if c is not None]

    def watches_synced(self) -> dict[str, bool]:
        """Each watch's first list in, by resource (none without `watch_nodes`)."""
        return {c.resource.__name__: c.synced for c in self._caches()}

    # --- calls, retried ---------------------------------------------------------------------------------------
    def _call(self, what: str, fn: Callable[[], T]) -> T:
        forbidden = 0
        for attempt in range(self.options.retries + 1):
            try:
                return fn()
            except (ApiError, httpx2.HTTPStatusError) as exc:
                # lightkube raises ApiError from a get or a write, but the HTTP error itself from a list's pages.
                code, message = _refusal(exc)
                if code == 404 and isinstance(exc, ApiError):
                    raise
                retriable = code in RETRIED or (code == 403 and forbidden < 2)
                forbidden += code == 403
                if not retriable or attempt == self.options.retries:
                    raise KubernetesError(f"{what}: {code} {message}") from None
                wait = retry_after(exc.response.headers if exc.response is not None else None, attempt)
                log.debug("%s: %s; again in %.1f s", what, code, wait)
                self.sleep(wait)
            except httpx2.HTTPError as exc:
                if attempt == self.options.retries:
                    raise KubernetesError(f"{what}: {exc}") from None
                self.sleep(retry_after(None, attempt))
        raise AssertionError("unreachable")

    def _node(self, name: str, fresh: bool = True) -> dict[str, Any]:
        """The Node; with `fresh` False, as the node watch last saw it when it has (a write made on it carries its
        resourceVersion, so a stale copy costs a 409 and a read, never a lost update)."""
        cached = self._node_cache.get(f"/{name}") if self._node_cache is not None and not fresh else None
        if cached is not None:
            node = cached
        else:
            try:
                node = self._call(f"get node {name}", lambda: self.client.get(Node, name)).to_dict()
            except ApiError:
                raise UnknownNode(f"no node {name!r} in Kubernetes") from None
        pool = (node["metadata"].get("labels") or {}).get(POOL_LABEL)
        if self.options.pool is not None and pool != self.options.pool:
            raise UnknownNode(f"node {name!r} is in pool {pool!r}, not {self.options.pool!r}")
        return node

    def _written(self, node: Any) -> None:
        """A write's answer (the node as it now is) into the watch's copy, ahead of the watch event."""
        if self._node_cache is not None and node is not None and getattr(node, "metadata", None) is not None:
            self._node_cache.put(f"/{node.metadata.name}", node.to_dict())

    def _pods_on(self, node: str | None = None) -> list[SchedulerJob]:
        fields = {"spec.nodeName": node} if node else None
        pods = self._call("list pods", lambda: list(self.client.list(Pod, namespace="*", fields=fields)))
        return jobs_of(p.to_dict() for p in pods)

    def _write_node(self, name: str, change: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
        """Read the node, compute the patch, write it with the resourceVersion read (409 on a race: read again).
        Returns the node as the write left it (the API's answer)."""

        fresh = False

        def attempt() -> dict[str, Any]:
            nonlocal fresh
            node = self._node(name, fresh=fresh)  # the watch's copy first; read after a conflict
            fresh = True
            patch = change(node)
            patch.setdefault("metadata", {})["resourceVersion"] = node["metadata"]["resourceVersion"]
            written = self.client.patch(Node, name, patch, patch_type=PatchType.MERGE)
            self._written(written)
            return written.to_dict()

        return self._call(f"patch node {name}", attempt)

    def _seen(self, name: str) -> dict[str, Any] | None:
        try:
            return self._node(name, fresh=False)
        except UnknownNode:
            return None

    def _write_condition(self, name: str, reason: str, resource_version: str) -> None:
        """The ConditionKeeper's write: False, on the version of the node it judged (no retries here: it judges the
        node again and retries itself)."""
        self._written(set_gpu_condition(self.client, name, "False", reason, resource_version))

    def _condition(self, name: str, healthy: bool, reason: str) -> None:
        status: Literal["True", "False"] = "True" if healthy else "False"
        self._written(self._call(f"set condition {CONDITION} on {name}",
                                 lambda: set_gpu_condition(self.client, name, status, reason)))  # fmt: skip

    # --- the Scheduler protocol -------------------------------------------------------------------------------
    batch_limit = 1  # every Node is an object of its own, written on its own (the executor runs several at once)

    def nodes(self, names: list[str]) -> dict[str, SchedulerNode]:
        found = {}
        for name in names:
            with suppress(UnknownNode):  # (one the API does not know, or of another pool: left out, as Slurm's)
                found[name] = self.node(name)
        return found

    def drain_nodes(self, names: list[str], reason: str) -> None:
        for name in names:
            self.drain(name, reason)

    def mark_down_nodes(self, names: list[str], reason: str) -> None:
        for name in names:
            self.mark_down(name, reason)

    def resume_nodes(self, names: list[str]) -> None:
        for name in names:
            self.resume(name)

    def node(self, name: str) -> SchedulerNode:
        facts = NodeFacts.of(self._node(name, fresh=False))
        # (only the description's ALLOCATED or IDLE depends on the count)
        pods = jobs_of(self._pod_cache.on_node(name)) if self._pod_cache is not None else self._pods_on(name)
        return SchedulerNode(name, facts.scontrol_state(len(pods)), facts.reason)

    def node_states_and_reasons(self) -> dict[str, tuple[str, str]]:
        if self._node_cache is not None:
            nodes = self._node_cache.objects()
        else:
            listed = self._call("list nodes", lambda: list(self.client.list(Node, labels=self._pool_labels)))
            nodes = [n.to_dict() for n in listed]
        busy: dict[str, int] = {}
        for job in self.jobs():
            busy[job.nodes[0]] = busy.get(job.nodes[0], 0) + 1
        found = {}
        for node in nodes:
            name = str(node["metadata"]["name"])
            facts = NodeFacts.of(node)
            found[name] = (facts.sinfo_state(busy.get(name, 0)), facts.reason)
        return found

    def drain(self, name: str, reason: str) -> None:
        full = reason if reason.startswith(REASON_PREFIX) else f"{REASON_PREFIX} {reason}"

        def change(node: dict[str, Any]) -> dict[str, Any]:
            taints = with_taint(node["spec"].get("taints") or [], TAINT_KEY, taint_value(full), "NoSchedule")
            if not any(t.get("key") == UNSCHEDULABLE_TAINT_KEY for t in taints):
                taints.append({"key": UNSCHEDULABLE_TAINT_KEY, "effect": "NoSchedule"})
            return {"metadata": {"annotations": {REASON_ANNOTATION: full[:1024]}},
                    "spec": {"unschedulable": True, "taints": taints}}  # fmt: skip

        written = self._write_node(name, change)
        # On a Kubernetes node the agent sets GpuHealthy=False itself, right after its report (health/agent.py):
        # the cordon is the drain's one write, and the condition is written here only where the agent has not (a
        # lost node, a drain after an alert): at once, or by the ConditionKeeper after the storm's cordons.
        if NodeFacts.condition(written) == "False":
            return
        if self._conditions is not None:
            self._conditions.ensure(name, full)
        else:
            self._condition(name, False, full)

    def mark_down(self, name: str, reason: str) -> None:
        self.drain(name, reason)
        if NodeFacts.condition(self._node(name, fresh=False)) != "False":
            self._condition(name, False, reason)  # (its agent is silent: nobody else will)
        self._write_node(
            name,
            lambda node: {
                "spec": {
                    "taints": with_taint(node["spec"].get("taints") or [], TAINT_KEY, taint_value(reason), "NoExecute")
                }
            },
        )

    def resume(self, name: str) -> None:
        if not NodeFacts.of(self._node(name)).reason.startswith(REASON_PREFIX):
            return  # cordoned by someone else: not ours to return

        def change(node: dict[str, Any]) -> dict[str, Any]:
            taints = without_taint(without_taint(node["spec"].get("taints") or [], TAINT_KEY), UNSCHEDULABLE_TAINT_KEY)
            return {"metadata": {"annotations": {REASON_ANNOTATION: None}},
                    "spec": {"unschedulable": None, "taints": taints}}  # fmt: skip

        self._write_node(name, change)
        self._condition(name, True, "")

    def jobs(self) -> list[SchedulerJob]:
        if self._pod_cache is not None:  # (what is evicted is listed afresh: jobs_on)
            return jobs_of(self._pod_cache.objects())
        return self._pods_on()

    def jobs_on(self, node: str) -> list[SchedulerJob]:
        self._node(node, fresh=False)  # an unknown node is an error, not "no jobs" (the pods are read afresh)
        return self._pods_on(node)

    def _pod(self, job_id: str) -> dict[str, Any] | None:
        namespace, _, name = job_id.partition("/")
        try:
            return self._call(f"get pod {job_id}", lambda: self.client.get(Pod, name, namespace=namespace)).to_dict()
        except ApiError:
            return None

    def drain_policy(self, namespace: str) -> DrainPolicy:
        ns = self._call(f"get namespace {namespace}", lambda: self.client.get(Namespace, namespace)).to_dict()
        value = (ns["metadata"].get("annotations") or {}).get(DRAIN_POLICY_ANNOTATION, "")
        if value and value not in DRAIN_POLICIES:
            log.warning("namespace %s: unknown %s %r; using %s", namespace, DRAIN_POLICY_ANNOTATION, value,
                        self.options.default_drain_policy)  # fmt: skip
        return value if value in DRAIN_POLICIES else self.options.default_drain_policy  # type: ignore[return-value]

    def job_requeueable(self, job_id: str) -> bool:
        pod = self._pod(job_id)
        if pod is None:
            return False
        # A bare pod is not recreated anywhere: evicting it would lose the work.
        owned = any(o.get("controller") for o in pod["metadata"].get("ownerReferences") or [])
        return owned and self.drain_policy(pod["metadata"]["namespace"]) != "allow-completion"

    def requeue(self, job_id: str) -> None:
        namespace, _, name = job_id.partition("/")
        eviction = Pod.Eviction(metadata=ObjectMeta(name=name, namespace=namespace))
        deadline = time.monotonic() + self.options.eviction_timeout_s
        attempt = 0
        while True:
            try:
                self.client.create(eviction, name, namespace=namespace)
                return
            except ApiError as exc:
                code = exc.status.code or 0
                if code == 404:
                    return  # gone already
                if code not in RETRIED:
                    raise KubernetesError(f"evict pod {job_id}: {code} {exc.status.message}") from None
                if time.monotonic() >= deadline:
                    if self.drain_policy(namespace) == "delete-after-timeout":
                        log.warning("pod %s: its disruption budget held it for %.0f s; deleting it", job_id,
                                    self.options.eviction_timeout_s)  # fmt: skip
                        self._call(f"delete pod {job_id}", lambda: self.client.delete(Pod, name, namespace=namespace))
                        return
                    raise KubernetesError(
                        f"evict pod {job_id}: still refused after {self.options.eviction_timeout_s:.0f} s "
                        f"({code} {exc.status.message}): its PodDisruptionBudget allows no disruption now"
                    ) from None
                self.sleep(retry_after(exc.response.headers if exc.response is not None else None, attempt))
                attempt += 1

    def release_requeued(self, job_id: str) -> None:
        """Nothing to do: the pod's controller recreates it elsewhere by itself."""

    def job_state(self, job_id: str) -> str:
        pod = self._pod(job_id)
        job = pod_job(pod) if pod is not None else None
        return job.state if job is not None else "GONE"

    def partition_nodes(self, partition: str) -> list[str]:
        nodes = self._call("list nodes", lambda: list(self.client.list(Node, labels={POOL_LABEL: partition})))
        return sorted(
            n.metadata.name  # type: ignore[union-attr,misc]
            for n in nodes
            if not any(t.key == SPARE_TAINT_KEY for t in (n.spec.taints if n.spec and n.spec.taints else []))
        )

    def set_reliability(self, name: str, tier: str) -> None:
        """The label ha-ops.io/reliability-tier=<tier> (node affinity; docs/fleet.md), in one write."""
        if tier not in ("reliable", "standard", "suspect"):
            raise ValueError(f"unknown reliability tier {tier!r}")
        self._write_node(name, lambda node: {"metadata": {"labels": {TIER_LABEL: tier}}})

    def set_reliabilities(self, tiers: dict[str, str]) -> dict[str, Exception]:
        """Each node's label in a write of its own (Nodes are objects of their own); what failed, by node."""
        failed: dict[str, Exception] = {}
        for name, tier in tiers.items():
            try:
                self.set_reliability(name, tier)
            except Exception as exc:  # (an API error, a 404, an unknown tier: that node's alone)
                failed[name] = exc
        return failed

    def set_partition_nodes(self, partition: str, nodes: list[str]) -> None:
        wanted = set(nodes)
        listed = self._call("list nodes", lambda: list(self.client.list(Node, labels={POOL_LABEL: partition})))
        for node in listed:
            name = node.metadata.name  # type: ignore[union-attr]
            assert name is not None
            taints = [t.to_dict() for t in (node.spec.taints if node.spec and node.spec.taints else [])]
            spared = any(t["key"] == SPARE_TAINT_KEY for t in taints)
            if name in wanted and spared:
                self._write_node(name, lambda n: {"spec": {"taints": without_taint(n["spec"].get("taints") or [],
                                                                                  SPARE_TAINT_KEY)}})  # fmt: skip
            elif name not in wanted and not spared:
                self._write_node(name, lambda n: {"spec": {"taints": with_taint(n["spec"].get("taints") or [],
                                                                               SPARE_TAINT_KEY, "true",
                                                                               "NoSchedule")}})  # fmt: skip
