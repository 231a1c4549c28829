"""The Kubernetes lease (remediation/k8s_lease.py): concurrent fencing checks share reads, each sees the
lease as read after it began, and neither a check nor the fenced write holds back a renewal."""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from lightkube import ApiError
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease as LeaseObject

from ha_ops.remediation.k8s_lease import LEADER_LABEL, KubernetesLease, LeaderLabel
from ha_ops.remediation.lease import LeaseLost
from ha_ops.util.wait import wait_for


class SlowApi:
    """A Lease held by `holder` with `token`; each GET takes `delay` seconds and is counted."""

    def __init__(self, holder: str, token: int, delay: float) -> None:
        self.holder, self.token, self.delay = holder, token, delay
        self.gets = 0
        self.version = 1

    def get(self, *_: Any, **__: Any) -> LeaseObject:
        self.gets += 1
        seen = (self.holder, self.token, str(self.version))  # the lease as it is when the read starts
        time.sleep(self.delay)
        spec = LeaseSpec(holderIdentity=seen[0], leaseTransitions=seen[1], leaseDurationSeconds=3)
        return LeaseObject(metadata=ObjectMeta(name="l", namespace="ns", resourceVersion=seen[2]), spec=spec)


def holding(api: SlowApi) -> KubernetesLease:
    lease = KubernetesLease(api, "l", "ns", me="ctl1")  # type: ignore[arg-type]
    lease.token, lease.renewed_until = api.token, time.time() + 60
    return lease


def test_thirty_concurrent_checks_share_a_few_reads() -> None:
    api = SlowApi("ctl1", 4, delay=0.2)
    lease = holding(api)
    errors: list[BaseException] = []
    together = threading.Barrier(30)  # (all checks begin at once, however slowly a loaded machine starts threads)

    def check() -> None:
        try:
            together.wait(10)
            lease.check(4)
        except BaseException as exc:  # (collected: a thread's exception would be lost)
            errors.append(exc)

    threads = [threading.Thread(target=check) for _ in range(30)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert errors == []
    assert api.gets <= 3, api.gets  # one in flight, one for everyone who came meanwhile (and a straggler)


def test_a_check_sees_a_change_made_before_it_began() -> None:
    api = SlowApi("ctl1", 4, delay=0.0)
    lease = holding(api)
    lease.check(4)
    api.holder, api.token, api.version = "ctl2", 5, 2  # another controller took it
    with pytest.raises(LeaseLost, match="held by ctl2 \\(token 5\\)"):
        lease.check(4)
    assert lease.token is None  # and this controller knows it lost it


def test_a_renewal_does_not_wait_for_a_fenced_write() -> None:
    api = SlowApi("ctl1", 4, delay=0.0)
    lease = holding(api)
    inside, leave = threading.Event(), threading.Event()

    def slow_write() -> None:
        with lease.fenced(4):
            inside.set()
            leave.wait(5)

    writer = threading.Thread(target=slow_write)
    writer.start()
    assert inside.wait(5)
    started = time.monotonic()
    with lease._lock:  # what a renewal takes first
        took = time.monotonic() - started
    leave.set()
    writer.join(5)
    assert took < 1.0


class WatchedApi(SlowApi):
    """SlowApi with renewals (replace: the version grows) and a watch that delivers each write, once `delivering`."""

    def __init__(self) -> None:
        super().__init__("", 4, delay=0.0)
        self.events: queue.Queue[tuple[str, LeaseObject]] = queue.Queue()
        self.delivering = threading.Event()
        self.delivering.set()

    def _current(self) -> LeaseObject:
        spec = LeaseSpec(holderIdentity=self.holder, leaseTransitions=self.token, leaseDurationSeconds=3)
        return LeaseObject(metadata=ObjectMeta(name="l", namespace="ns", resourceVersion=str(self.version)), spec=spec)

    def write(self, holder: str, token: int) -> LeaseObject:
        self.holder, self.token, self.version = holder, token, self.version + 1
        self.events.put(("MODIFIED", self._current()))
        return self._current()

    def replace(self, lease: LeaseObject) -> LeaseObject:
        assert lease.spec is not None
        return self.write(str(lease.spec.holderIdentity), int(lease.spec.leaseTransitions or 0))

    def list(self, *_: Any, **__: Any) -> list[LeaseObject]:
        listed = Listed([self._current()])
        listed.resourceVersion = str(self.version)
        return listed

    def watch(self, *_: Any, **__: Any) -> Iterator[tuple[str, LeaseObject]]:
        while True:
            event = self.events.get()
            self.delivering.wait()
            yield event


class Listed(list):
    resourceVersion = "0"


def test_with_a_watch_that_delivered_its_own_renewal_a_check_reads_nothing() -> None:
    api = WatchedApi()
    lease = KubernetesLease(api, "l", "ns", me="ctl1", watch=True)  # type: ignore[arg-type]
    assert lease.acquire_or_renew() and lease.token == 5  # (a free lease: its read, then the claim)
    reads = api.gets
    wait_for("the renewal delivered", lambda: lease._watched() is not None, timeout=5, interval=0.01)
    for _ in range(50):
        lease.check(5)
    assert api.gets == reads  # 50 checks, no request

    # A renewal the watch has not delivered yet: the check reads, as without the watch.
    api.delivering.clear()
    assert lease.acquire_or_renew()
    lease.check(5)
    assert api.gets == reads + 2  # the renewal's own read, and the check's
    api.delivering.set()

    # Another controller writes over it (an operator's edit, a takeover): the watch delivers it, the check reads.
    wait_for("the renewal delivered", lambda: lease._watched() is not None, timeout=5, interval=0.01)
    api.write("ctl2", 6)
    wait_for("the takeover delivered", lambda: lease._watched() is None, timeout=5, interval=0.01)
    with pytest.raises(LeaseLost, match="held by ctl2 \\(token 6\\)"):
        lease.check(5)
    assert lease.token is None


class Pods:
    """A client whose pod patches are kept; the first `refusals` are refused (403)."""

    def __init__(self, refusals: int = 0) -> None:
        self.patches: list[tuple[str, str | None, str | None]] = []
        self.refusals = refusals

    def patch(self, resource: Any, name: str, body: dict[str, Any], namespace: str | None = None, **_: Any) -> None:
        if self.refusals:
            self.refusals -= 1
            response = httpx2.Response(403, json={"code": 403, "message": "forbidden"},
                                       request=httpx2.Request("PATCH", "https://api/"))  # fmt: skip
            raise ApiError(response=response)
        self.patches.append((name, namespace, body["metadata"]["labels"][LEADER_LABEL]))


def test_the_leader_label_is_written_once_per_change_and_again_after_a_refusal() -> None:
    pods = Pods(refusals=1)
    label = LeaderLabel(pods, "ha-ops", "ctl-a")  # type: ignore[arg-type]
    label.mark(True)  # refused: nothing recorded, so the next lease step writes it
    assert pods.patches == [] and label.written is None
    for leading in (True, True, False, False, True):
        label.mark(leading)
    assert pods.patches == [("ctl-a", "ha-ops", "true"), ("ctl-a", "ha-ops", None), ("ctl-a", "ha-ops", "true")]


def test_the_controller_labels_its_pod_only_where_its_config_asks_through_the_leases_client(tmp_path: Any) -> None:
    from ha_ops.remediation.config import ControllerConfig
    from ha_ops.remediation.wiring import make_leader_label, make_lease

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )

    def config(label_pod: bool) -> ControllerConfig:
        return ControllerConfig.model_validate({
            "id": "ha-ops-controller-abc", "scheduler": "kubernetes", "partition": "gpu",
            "pools": {"gpu": {"nodes": ["gpu1"]}},
            "kubernetes": {"kubeconfig": str(kubeconfig), "lease": {"namespace": "ops", "label_pod": label_pod},
                           "state": {"namespace": "ops"}},
        })  # fmt: skip

    labelled = config(True)
    lease = make_lease(labelled, time.time)
    label = make_leader_label(labelled, lease)
    assert label is not None and (label.namespace, label.pod) == ("ops", "ha-ops-controller-abc")
    assert label.client is lease.client  # type: ignore[attr-defined]  # (one client, the lease's short timeout)
    unlabelled = config(False)
    assert make_leader_label(unlabelled, make_lease(unlabelled, time.time)) is None


class LeaseApi(SlowApi):
    """SlowApi that also takes writes: a replace renews (or takes) the lease."""

    def __init__(self, holder: str, token: int) -> None:
        super().__init__(holder, token, delay=0.0)
        self.writes: list[tuple[str, int]] = []

    def replace(self, lease: LeaseObject) -> LeaseObject:
        assert lease.spec is not None
        self.holder, self.token = lease.spec.holderIdentity or "", lease.spec.leaseTransitions or 0
        self.version += 1
        self.writes.append((self.holder, self.token))
        return self.get()


@pytest.mark.parametrize("holder", ["ctl2", ""])  # another controller's lease, or one released (free)
def test_a_renewal_renews_only_the_lease_held_and_never_takes_one(holder: str) -> None:
    api = LeaseApi("ctl1", 4)
    lease = holding(api)
    assert lease.renew(4) is True and api.writes == [("ctl1", 4)]
    assert lease.renew(3) is False  # an older term's renewal
    api.holder, api.token = holder, 5 if holder else 4
    assert lease.renew(4) is False and lease.token is None
    assert api.writes == [("ctl1", 4)]  # nothing written: taking it is the lease step's, as a new term


def test_the_kubernetes_lease_carries_the_audit_head_as_an_annotation() -> None:
    from ha_ops.remediation.k8s_lease import AUDIT_HEAD
    from ha_ops.remediation.lease import RecordedHead

    class Annotated(LeaseApi):
        annotations: dict[str, str] = {}

        def get(self, *_: Any, **__: Any) -> LeaseObject:
            lease = super().get()
            assert lease.metadata is not None
            lease.metadata.annotations = dict(self.annotations)
            return lease

        def replace(self, lease: LeaseObject) -> LeaseObject:
            assert lease.metadata is not None
            self.annotations = dict(lease.metadata.annotations or {})
            return super().replace(lease)

    api = Annotated("ctl1", 4)
    lease = holding(api)
    lease.audit_head = RecordedHead(12, "h12", "m12")
    assert lease.renew(4)
    assert json.loads(api.annotations[AUDIT_HEAD]) == {"seq": 12, "hash": "h12", "mac": "m12"}
    assert lease.read().audit_head == RecordedHead(12, "h12", "m12")  # type: ignore[union-attr]
    other = KubernetesLease(api, "l", "ns", me="ctl2")  # type: ignore[arg-type]
    api.holder = ""  # released: ctl2's new term carries ctl1's record
    assert other.acquire_or_renew() and other.audit_head == RecordedHead(12, "h12", "m12")
    assert json.loads(api.annotations[AUDIT_HEAD])["seq"] == 12
