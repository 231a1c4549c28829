"""The ConditionKeeper (schedulers/k8s_conditions.py): a drained node's GpuHealthy is written after the grace, only
where its agent has not written it and the node is still drained by ha-ops, on the version judged; and the
controller's drain through it is one write, the cordon."""

from __future__ import annotations

from typing import Any

from ha_ops.schedulers.k8s_conditions import RETRIES, ConditionKeeper
from ha_ops.schedulers.kubernetes import TAINT_KEY, KubernetesOptions, KubernetesScheduler, NodeFacts
from tests.unit.test_scheduler_kubernetes import OneNode, node


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def drained(name: str, condition: str | None = None, version: str = "7") -> dict[str, Any]:
    obj = node(cordoned=True, reason="ha-ops: GPU1 xid: XID 79", taints=[{"key": TAINT_KEY, "effect": "NoSchedule"}])
    obj["metadata"].update(name=name, resourceVersion=version)
    if condition is not None:
        obj["status"]["conditions"].append({"type": "GpuHealthy", "status": condition})
    return obj


class Nodes:
    """The nodes as last seen, and the writes asked for; `refuse` makes the next writes fail (a 409)."""

    def __init__(self, **nodes: dict[str, Any]) -> None:
        self.nodes = nodes
        self.writes: list[tuple[str, str, str]] = []
        self.refuse = 0

    def read(self, name: str) -> dict[str, Any] | None:
        return self.nodes.get(name)

    def write(self, name: str, reason: str, version: str) -> None:
        if self.refuse:
            self.refuse -= 1
            raise RuntimeError("409: the object has been modified")
        self.writes.append((name, reason, version))


def keeper(nodes: Nodes, clock: Clock) -> ConditionKeeper:
    from ha_ops.schedulers.kubernetes import _needs_condition

    return ConditionKeeper(nodes.read, _needs_condition, nodes.write, grace_s=2.0, clock=clock, background=False)


def test_the_condition_is_written_after_the_grace_only_where_still_needed() -> None:
    clock = Clock()
    nodes = Nodes(agent_wrote=drained("agent_wrote"), dead_agent=drained("dead_agent"), resumed=drained("resumed"))
    k = keeper(nodes, clock)
    for name in ("agent_wrote", "dead_agent", "resumed", "gone"):
        k.ensure(name, f"ha-ops: {name}")
    assert k.run_due() == 0 and nodes.writes == []  # within the grace: nothing yet
    nodes.nodes["agent_wrote"] = drained("agent_wrote", condition="False")  # its agent wrote it meanwhile
    nodes.nodes["resumed"]["spec"]["unschedulable"] = False  # returned to service meanwhile
    clock.now += 2.0
    assert k.run_due() == 1
    assert nodes.writes == [("dead_agent", "ha-ops: dead_agent", "7")]  # on the version judged
    assert k.pending() == 0


def test_a_refused_write_is_judged_again_later_and_given_up_after_its_retries() -> None:
    clock = Clock()
    nodes = Nodes(n1=drained("n1"), n2=drained("n2"))
    k = keeper(nodes, clock)
    k.ensure("n1", "ha-ops: x")
    nodes.refuse = 1
    clock.now += 2.0
    assert k.run_due() == 0 and k.pending() == 1  # refused (the node changed): again after a backoff
    clock.now += 0.5
    assert k.run_due() == 1 and nodes.writes == [("n1", "ha-ops: x", "7")]
    k.ensure("n2", "ha-ops: y")
    nodes.refuse = RETRIES
    for _ in range(RETRIES):
        clock.now += 20.0
        k.run_due()
    assert k.pending() == 0 and [w[0] for w in nodes.writes] == ["n1"]


def test_the_controllers_drain_is_one_write_and_the_keeper_writes_the_condition_after() -> None:
    client = OneNode(node())
    scheduler = KubernetesScheduler(client, KubernetesOptions(condition_grace_s=5.0))  # type: ignore[arg-type]
    assert scheduler._conditions is not None
    scheduler._conditions.clock = lambda: 0.0  # (its thread waits: run_due here, by hand)
    scheduler.drain("n1", "GPU1 xid: XID 79")
    assert client.calls == ["get", "patch node"]
    assert NodeFacts.of(client.obj).cordoned  # drained: the condition is no part of it
    scheduler._conditions.clock = lambda: 10.0
    scheduler._conditions.run_due()
    assert client.calls[-1] == "patch status"
    assert [c["status"] for c in client.obj["status"]["conditions"] if c["type"] == "GpuHealthy"] == ["False"]
