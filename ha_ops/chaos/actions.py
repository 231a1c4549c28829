"""Chaos Toolkit actions: the faults ha-ops injects, into the cluster the experiment's configuration names
(ha_ops.chaos.target: `ha_ops_target: lab:NAME`, or `ha_ops_inventory: FILE` for a real cluster over SSH). Use them
as `{"type": "action", "provider": {"type": "python", "module": "ha_ops.chaos.actions", "func": NAME,
"arguments": {...}}}`.

Each fault is a list of operations (ha_ops.cluster.ops), journaled with the operations that undo it before it is
injected (ha_ops.chaos.faults), so `ha-ops chaos cleanup` can undo it even after the runner was killed. A target
that is not the cluster's, or cannot take the fault, is refused before anything is journaled.
"""

from __future__ import annotations

from typing import Any

from ha_ops.chaos import faults, hold, rollbacks, target
from ha_ops.chaos.faults import FaultRefused
from ha_ops.cluster.base import Cluster
from ha_ops.cluster.gpu import CapabilityMissing
from ha_ops.cluster.ops import FilterOp, FilterRule, GpuOp, LinkOp, Op, PowerOp, QdiscOp, ServiceAction, ServiceOp
from ha_ops.cluster.rollouts import driver_rollouts
from ha_ops.gpu.fake import FAULTS as GPU_FAULTS

Configuration = dict[str, Any] | None

__all__ = [
    "bandwidth_limit",
    "chunkserver_loss",
    "clear_gpu_fault",
    "driver_rollout",
    "end_driver_rollout",
    "freeze_service",
    "gpu_fault",
    "heal",
    "hold_fault",
    "kill_remediation_leader",
    "kill_service",
    "link_down",
    "link_up",
    "monitoring_outage",
    "node_loss",
    "packet_loss",
    "partition",
    "restart_service",
    "silent_link_drop",
    "slurm_primary_failover",
    "start_service",
    "stop_service",
    "storage_master_loss",
    "thaw_service",
]


def _cluster(configuration: Configuration) -> Cluster:
    return target.cluster(configuration)


def _target(cluster: Cluster, node: str, interface: str | None = None, service: str | None = None) -> None:
    """The node (and interface) a fault aims at, refused unless the cluster has it: nothing outside the cluster is
    ever touched, and nothing is journaled for a bad target."""
    hosts = cluster.hosts()
    if node not in hosts:
        raise FaultRefused(f"refusing target {node!r}: not a host of cluster {cluster.name!r} (it has "
                           f"{', '.join(hosts)})")  # fmt: skip
    if interface is not None:
        interfaces = cluster.node(node).interfaces()
        if interface not in interfaces:
            raise FaultRefused(f"refusing target {node}/{interface}: {node} has {', '.join(interfaces)}")
    if service is not None and not cluster.node(node).has_service(service):
        raise FaultRefused(f"refusing target {node}/{service}: {node} runs no such service")


def hold_fault(seconds: float) -> str:
    """Keep the fault in for `seconds` before the method goes on. A game day ends the hold early once the recovery it
    watches for is seen, and a runbook verification once every claim was checked; `chaos run` holds it all."""
    held, early = hold.wait(float(seconds))
    return f"held the fault {held:.1f} s of {float(seconds):g} s" + (" (ended early: seen)" if early else "")


def gpu_fault(
    node: str,
    gpu: int = 0,
    fault: str = "xid",
    xid: int = 79,
    celsius: float = 92.0,
    permanent: bool = False,
    configuration: Configuration = None,
) -> str:
    """Inject a GPU fault: any XID, a double-bit ECC error, a row-remap failure, overheating or a GPU fallen off the
    bus (the fake backend's files, or DCGM's error injection on a real node). `permanent`: no reset or reboot repairs
    it (broken hardware; the fake backend only)."""
    if fault not in GPU_FAULTS:
        raise FaultRefused(f"fault {fault!r} is not one of: {', '.join(GPU_FAULTS)}")
    cluster = _cluster(configuration)
    _target(cluster, node)
    if "gpu_faults" not in cluster.node(node).capabilities:
        raise CapabilityMissing(f"{node} lacks gpu_faults: it takes no GPU fault (no GPUs, or no injection)")
    gpus = next((n.gpus for n in cluster.layout.nodes if n.name == node), 0)
    if not 0 <= gpu < gpus:
        raise FaultRefused(f"refusing target {node} GPU{gpu}: {node} has {gpus} GPUs")
    op = GpuOp(host=node, fault=fault, gpu=gpu, xid=xid, celsius=celsius, permanent=permanent)  # type: ignore[arg-type]
    faults.inject(cluster, f"gpu:{node}:{gpu}", [op], [GpuOp(host=node, fault="clear", gpu=gpu)])
    return f"{fault} on {node} GPU{gpu}" + (" (permanent)" if permanent else "")


def clear_gpu_fault(node: str, gpu: int | None = None, configuration: Configuration = None) -> str:
    """Undo GPU faults on a node (one GPU, or all): a GPU reset."""
    cluster = _cluster(configuration)
    cluster.node(node).apply(GpuOp(host=node, fault="clear", gpu=gpu))
    faults.forget(cluster, f"gpu:{node}:{'*' if gpu is None else gpu}")
    return f"cleared {node} GPU{'s' if gpu is None else gpu}"


def _service_fault(node: str, service: str, configuration: Configuration, how: ServiceAction,
                   group: str | None = None) -> str:  # fmt: skip
    cluster = _cluster(configuration)
    _target(cluster, node, service=service)
    faults.inject(
        cluster,
        f"service:{node}:{service}",
        [ServiceOp(host=node, unit=service, action=how)],
        _service_back(node, service),
        group=group,
        after="slurm_controllers_back" if service == "slurmctld" else None,
    )
    return f"{how} {node}/{service}"


def _service_back(node: str, service: str) -> list[Op]:
    return [ServiceOp(host=node, unit=service, action="thaw"), ServiceOp(host=node, unit=service, action="start")]


def kill_service(node: str, service: str, configuration: Configuration = None) -> str:
    """SIGKILL a service (slurmctld, slurmd, agent, controller, prometheus, ...): a crash."""
    return _service_fault(node, service, configuration, "kill")


def stop_service(node: str, service: str, configuration: Configuration = None) -> str:
    """Stop a service gracefully."""
    return _service_fault(node, service, configuration, "stop")


def freeze_service(node: str, service: str, configuration: Configuration = None) -> str:
    """SIGSTOP a service: alive but unresponsive."""
    return _service_fault(node, service, configuration, "freeze")


def thaw_service(node: str, service: str, configuration: Configuration = None) -> str:
    """SIGCONT a frozen service."""
    cluster = _cluster(configuration)
    cluster.node(node).apply(ServiceOp(host=node, unit=service, action="thaw"))
    faults.forget(cluster, f"service:{node}:{service}")
    return f"thawed {node}/{service}"


def start_service(node: str, service: str, configuration: Configuration = None) -> str:
    """Start a service again (thawing it first if frozen)."""
    cluster = _cluster(configuration)
    for op in _service_back(node, service):
        cluster.node(node).apply(op)
    if service == "slurmctld":
        rollbacks.slurm_controllers_back(cluster)  # as the journal's undo would: every slurmctld answers again
    faults.forget(cluster, f"service:{node}:{service}")
    return f"started {node}/{service}"


def restart_service(node: str, service: str, configuration: Configuration = None) -> str:
    """Restart a service."""
    _cluster(configuration).node(node).apply(ServiceOp(host=node, unit=service, action="restart"))
    return f"restarted {node}/{service}"


def link_down(node: str, interface: str = "eth0", configuration: Configuration = None) -> str:
    """Take a link down (a host's uplink, or a switch port such as `to-spine1` on a leaf)."""
    cluster = _cluster(configuration)
    _target(cluster, node, interface)
    faults.inject(cluster, f"link:{node}:{interface}", [LinkOp(host=node, interface=interface, up=False)],
                  [LinkOp(host=node, interface=interface, up=True)])  # fmt: skip
    return f"{node} {interface} down"


def isolate_node(node: str, configuration: Configuration = None) -> str:
    """Cut a host off from the network while it stays alive (its uplink down: a cable, a NIC, a switch port). Its
    undo, on a host with a BMC, first powers it on again should a fence have powered it off (and waits for ssh: the
    next step runs on it), then mends the network (a Slurm controller's undo also waits until every slurmctld
    answers)."""
    cluster = _cluster(configuration)
    _target(cluster, node, "eth0")
    controllers = {n.name for n in cluster.layout.nodes_with_role("controller")}
    undo: list[Op] = [LinkOp(host=node, interface="eth0", up=True)]
    if "power" in cluster.node(node).capabilities:
        undo.insert(0, PowerOp(host=node, action="on"))  # "on" of a host that is on changes nothing
    faults.inject(cluster, f"isolated:{node}", [LinkOp(host=node, interface="eth0", up=False)], undo,
                  after="slurm_controllers_back" if node in controllers else None)  # fmt: skip
    return f"{node} cut off from the network"


def remediation_leader_on(node: str, timeout_s: float = 30.0, configuration: Configuration = None) -> str:
    """Not a fault, the scene for one: make `node`'s remediation controller the leader, by a planned handover (the
    leader restarts, releasing its lease, and stands by)."""
    from ha_ops.chaos.probes import remediation_leader
    from ha_ops.util.wait import wait_for

    cluster = _cluster(configuration)
    _target(cluster, node, service="controller")
    if hasattr(cluster, "plan_note"):  # a dry run: say what would happen, wait for nothing
        cluster.plan_note(node, "restart the leading remediation controller until this node's leads (a handover)")
        return f"{node} would lead"
    first = leader = wait_for("a leader", lambda: (found := remediation_leader(configuration)) != "none" and found,
                              timeout=timeout_s, interval=0.2)  # fmt: skip
    for handover in range(4):  # the restarted one may win the lease back: then again
        if leader == node:
            return f"{node} leads" + (f" (handed over from {first})" if first != node else " already")
        if handover == 3:
            break
        cluster.node(leader).apply(ServiceOp(host=leader, unit="controller", action="restart"))
        leader = wait_for("a leader", lambda: (found := remediation_leader(configuration)) != "none" and found,
                          timeout=timeout_s, interval=0.2)  # fmt: skip
    raise FaultRefused(f"{node} did not take the lead from {leader} in 3 handovers")


def link_up(node: str, interface: str = "eth0", configuration: Configuration = None) -> str:
    """Bring a link up again."""
    cluster = _cluster(configuration)
    cluster.node(node).apply(LinkOp(host=node, interface=interface, up=True))
    faults.forget(cluster, f"link:{node}:{interface}")
    return f"{node} {interface} up"


def _filter(cluster: Cluster, node: str, chain: str, rules: list[FilterRule], group: str | None = None) -> None:
    faults.inject(cluster, f"filter:{node}:{chain}", [FilterOp(host=node, chain=chain, rules=tuple(rules))],
                  [FilterOp(host=node, chain=chain, remove=True)], group=group)  # fmt: skip


def silent_link_drop(node: str, interface: str = "eth0", configuration: Configuration = None) -> str:
    """The link stays up but every frame is dropped both ways: only BFD or timeouts notice."""
    cluster = _cluster(configuration)
    _target(cluster, node, interface)
    rules = [
        FilterRule(hook="prerouting", in_interface=interface),
        FilterRule(hook="postrouting", out_interface=interface),
    ]
    _filter(cluster, node, "HAO-SILENT", rules)
    return f"{node} {interface} silently dropping"


def packet_loss(node: str, percent: float, interface: str = "eth0", configuration: Configuration = None) -> str:
    """Drop a share of the packets arriving on a link (iptables statistic; netem is not available in the lab)."""
    if not 0 < percent <= 100:
        raise FaultRefused(f"percent {percent} is not in (0, 100]")
    cluster = _cluster(configuration)
    _target(cluster, node, interface)
    _filter(cluster, node, "HAO-LOSS", [FilterRule(hook="input", in_interface=interface, probability=percent / 100)])
    return f"{node} {interface}: {percent:g}% loss"


def bandwidth_limit(node: str, rate_mbit: float, interface: str = "eth0", configuration: Configuration = None) -> str:
    """Limit a link's outgoing bandwidth (tbf)."""
    cluster = _cluster(configuration)
    _target(cluster, node, interface)
    faults.inject(cluster, f"qdisc:{node}:{interface}", [QdiscOp(host=node, interface=interface, rate_mbit=rate_mbit)],
                  [QdiscOp(host=node, interface=interface)])  # fmt: skip
    return f"{node} {interface} limited to {rate_mbit:g} Mbit/s"


def partition(group_a: list[str], group_b: list[str], configuration: Configuration = None) -> str:
    """Cut every path between two groups of nodes (each side drops the other's addresses)."""
    cluster = _cluster(configuration)
    for node in group_a + group_b:
        _target(cluster, node)
    address = {n.name: str(n.address) for n in cluster.layout.nodes}
    group = f"partition:{','.join(group_a)}|{','.join(group_b)}"
    for mine, theirs in ((group_a, group_b), (group_b, group_a)):
        for node in mine:
            rules = [FilterRule(hook="input", source=address[t]) for t in theirs]
            rules += [FilterRule(hook="output", destination=address[t]) for t in theirs]
            _filter(cluster, node, "HAO-PART", rules, group=group)
    return f"partitioned {group_a} from {group_b}"


def heal(node: str, configuration: Configuration = None) -> str:
    """Remove every drop, loss and partition filter and any bandwidth limit from a node."""
    cluster = _cluster(configuration)
    handle = cluster.node(node)
    for chain in ("HAO-SILENT", "HAO-LOSS", "HAO-PART"):
        handle.apply(FilterOp(host=node, chain=chain, remove=True))
        faults.forget(cluster, f"filter:{node}:{chain}")
    for interface in handle.interfaces():
        handle.apply(QdiscOp(host=node, interface=interface))
        faults.forget(cluster, f"qdisc:{node}:{interface}")
    return f"healed {node}"


def node_loss(node: str, permanent: bool = False, configuration: Configuration = None) -> str:
    """Lose a whole node: its BMC powers it off (in the lab: every process on it killed and every link down).
    `permanent` (the lab only): broken hardware, which the remediation controller's power cycle does not bring back."""
    cluster = _cluster(configuration)
    _target(cluster, node)
    faults.inject(cluster, f"node:{node}", [PowerOp(host=node, action="off", permanent=permanent)],
                  [PowerOp(host=node, action="on", repair=True)])  # fmt: skip
    return f"lost {node}" + (" (permanently)" if permanent else "")


def slurm_primary_failover(configuration: Configuration = None) -> str:
    """Kill the primary slurmctld so that the backup takes over."""
    primary = _cluster(configuration).layout.nodes_with_role("controller")[0].name
    return kill_service(primary, "slurmctld", configuration)


def chunkserver_loss(node: str, configuration: Configuration = None) -> str:
    """Lose a storage chunkserver."""
    return kill_service(node, "chunkserver", configuration)


def storage_master_loss(configuration: Configuration = None) -> str:
    """Lose the storage master, wherever it runs now: its host or, once promoted, the metalogger's (recovery: the
    storage watcher promotes the metalogger; runbooks/storage-master-failure.md)."""
    cluster = _cluster(configuration)
    storage = cluster.spec.storage
    if storage is None or storage.master is None:
        raise CapabilityMissing(f"{cluster.name} has no storage master (storage.master in its spec)")
    hosts = [h.name for h in (storage.master, storage.metalogger) if h is not None]
    running = [h for h in hosts if cluster.node(h).service_active("mfsmaster")]
    return kill_service(running[0] if running else hosts[0], "mfsmaster", configuration)


def kill_remediation_leader(configuration: Configuration = None) -> str:
    """SIGKILL whichever remediation controller leads now (the standby must take over)."""
    from ha_ops.chaos.probes import remediation_leader

    leader = remediation_leader(configuration)
    if leader == "none":
        raise FaultRefused("no remediation controller leads: nothing to kill")
    return kill_service(leader, "controller", configuration)


def monitoring_outage(alertmanager: bool = False, configuration: Configuration = None) -> str:
    """Prometheus dies (and Alertmanager too, with `alertmanager`): no scrapes, no alert rules, no alerts."""
    mon = _cluster(configuration).spec.monitoring.host.name
    services = ["prometheus", "alertmanager"] if alertmanager else ["prometheus"]
    return "; ".join(_service_fault(mon, s, configuration, "kill", group="monitoring-outage") for s in services)


ROLLOUT_FAULT = "rollout:driver:"  # + the id of the rollout before the fault's own ("" for none)


def rollout_before_fault(cluster: Cluster) -> str | None:
    """While a rollout fault is active: the id of the rollout before it ("" for none); else None."""
    keys = [e["key"] for e in faults.active(cluster) if e["key"].startswith(ROLLOUT_FAULT)]
    return keys[-1].removeprefix(ROLLOUT_FAULT) if keys else None


def driver_rollout(
    to: str, broken: bool = True, base: str = "550.90.07", waves: str = "1,rest", timeout_s: float = 900,
    configuration: Configuration = None,
) -> str:  # fmt: skip
    """A GPU driver rollout to `to` from the cluster's rollout host (ha_ops.cluster.rollouts), from the driver the
    GPU nodes run; blocks until the rollout ends and returns its phase and reason. The remediation controllers keep
    running: the rollout announces each node it changes to them as a maintenance window, so they leave the GPUs a bad
    driver loses to the rollout's rollback. The lab builds `to` first (a driver that loses every GPU when `broken`) and
    installs `base` where the role never ran; a real cluster's package source has `to`, and `broken` and `base` are
    not used there."""
    cluster = _cluster(configuration)
    rollouts = driver_rollouts(cluster)
    rollouts.check()  # refused before anything is journaled: no rollout host, or a fleet on no (or mixed) drivers
    # The key keeps the id of the rollout before this one: the probes judge this fault's rollout, not that one.
    previous = str(rollouts.state().get("id", ""))
    faults.inject(cluster, f"{ROLLOUT_FAULT}{previous}", [], [], after="end_driver_rollout")
    rollouts.prepare(to, broken, base)
    return rollouts.start(to, waves, timeout_s)


def end_driver_rollout(configuration: Configuration = None) -> str:
    """Undo a driver rollout fault: an open rollout aborted, with every changed node rolled back."""
    cluster = _cluster(configuration)
    rollbacks.end_driver_rollout(cluster)
    faults.forget(cluster, f"{ROLLOUT_FAULT}*")
    return "driver rollout ended"
