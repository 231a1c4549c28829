"""The Kubernetes lease's fencing reads (remediation/k8s_lease.py): concurrent checks share reads, each sees the
lease as read after it began, and neither a check nor the fenced write holds back a renewal."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease as LeaseObject

from ha_ops.remediation.k8s_lease import KubernetesLease
from ha_ops.remediation.lease import LeaseLost


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
