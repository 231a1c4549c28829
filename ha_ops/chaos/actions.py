"""Chaos Toolkit actions: the faults ha-ops injects in the lab. Use them from an experiment as `{"type": "action",
"provider": {"type": "python", "module": "ha_ops.chaos.actions", "func": NAME, "arguments": {...}}}`.

Every fault is journaled with its rollback before it is injected (ha_ops.chaos.faults), so `ha-ops chaos cleanup`
can undo it even after the runner was killed.
"""

from __future__ import annotations

import json

from ha_ops.chaos import faults, hold, rollbacks
from ha_ops.errors import LabError
from ha_ops.lab.cluster import Lab
from ha_ops.lab.node import LabNode

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

GPU_FAULTS = ("xid", "double_bit_ecc", "row_remap_failure", "overheat", "fallen_off_bus")


def _lab(name: str) -> Lab:
    return Lab.from_state(name)


def _target(handle: Lab, node: str, interface: str | None = None) -> LabNode:
    """The node (and interface) a fault aims at, refused unless the lab's spec has it: nothing outside the cluster
    is ever touched, and nothing is journaled for a bad target."""
    names_in_spec = list(handle.state().nodes)  # hosts and switches, as built from the spec
    if node == "host" or node not in names_in_spec:
        names = ", ".join(names_in_spec)
        raise LabError(f"refusing target {node!r}: not a node of cluster {handle.spec.name!r} (its spec has {names})")
    target = handle.node(node)
    if interface is not None and interface not in target.interfaces():
        raise LabError(f"refusing target {node}/{interface}: {node} has {', '.join(target.interfaces())}")
    return target


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
    lab: str = "lab",
) -> str:
    """Inject a GPU fault through the fake backend: any XID, a double-bit ECC error, a row-remap failure,
    overheating or a GPU fallen off the bus. `permanent`: no reset or reboot repairs it (broken hardware)."""
    if fault not in GPU_FAULTS:
        raise LabError(f"fault {fault!r} is not one of: {', '.join(GPU_FAULTS)}")
    handle = _lab(lab)
    gpus = _target(handle, node).gpus()
    if not 0 <= gpu < gpus.count():
        raise LabError(f"refusing target {node} GPU{gpu}: {node} has {gpus.count()} GPUs")
    faults.record(handle, f"gpu:{node}:{gpu}", "clear_gpu", node=node, gpu=gpu)
    if fault == "xid":
        gpus.inject_xid(gpu, xid)
    elif fault == "double_bit_ecc":
        gpus.double_bit_ecc(gpu)
    elif fault == "row_remap_failure":
        gpus.row_remap_failure(gpu)
    elif fault == "overheat":
        gpus.overheat(gpu, celsius)
    else:
        gpus.fall_off_bus(gpu)
    if permanent:
        gpus.break_permanently(gpu)
    return f"{fault} on {node} GPU{gpu}" + (" (permanent)" if permanent else "")


def clear_gpu_fault(node: str, gpu: int | None = None, lab: str = "lab") -> str:
    """Undo GPU faults on a node (one GPU, or all): a GPU reset."""
    handle = _lab(lab)
    rollbacks.clear_gpu(handle, node, gpu)
    faults.forget(handle, f"gpu:{node}:{'*' if gpu is None else gpu}")
    return f"cleared {node} GPU{'s' if gpu is None else gpu}"


def _service_fault(node: str, service: str, lab: str, how: str, group: str | None = None) -> str:
    handle = _lab(lab)
    # The lab's one munged runs on the machine itself ("host"); every other target is a node of the spec.
    target = handle.node(node) if (node, service) == ("host", "munged") else _target(handle, node)
    if service not in target.services():
        raise LabError(f"refusing target {node}/{service}: {node} runs {', '.join(target.services())}")
    faults.record(handle, f"service:{node}:{service}", "start_service", group=group, node=node, service=service)
    getattr(target, how)(service)
    return f"{how} {node}/{service}"


def kill_service(node: str, service: str, lab: str = "lab") -> str:
    """SIGKILL a lab service (slurmctld, slurmd, agent, controller, prometheus, ...; munged is on node `host`)."""
    return _service_fault(node, service, lab, "kill")


def stop_service(node: str, service: str, lab: str = "lab") -> str:
    """Stop a lab service gracefully."""
    return _service_fault(node, service, lab, "stop")


def freeze_service(node: str, service: str, lab: str = "lab") -> str:
    """SIGSTOP a lab service: alive but unresponsive."""
    return _service_fault(node, service, lab, "freeze")


def thaw_service(node: str, service: str, lab: str = "lab") -> str:
    """SIGCONT a frozen service."""
    handle = _lab(lab)
    handle.node(node).thaw(service)
    faults.forget(handle, f"service:{node}:{service}")
    return f"thawed {node}/{service}"


def start_service(node: str, service: str, lab: str = "lab") -> str:
    """Start a service again (thawing it first if frozen)."""
    handle = _lab(lab)
    rollbacks.start_service(handle, node, service)
    faults.forget(handle, f"service:{node}:{service}")
    return f"started {node}/{service}"


def restart_service(node: str, service: str, lab: str = "lab") -> str:
    """Restart a service."""
    _lab(lab).node(node).restart(service)
    return f"restarted {node}/{service}"


def link_down(node: str, interface: str = "eth0", lab: str = "lab") -> str:
    """Take a link down (a host's uplink, or a switch port such as `to-spine1` on a leaf)."""
    handle = _lab(lab)
    target = _target(handle, node, interface)
    faults.record(handle, f"link:{node}:{interface}", "link_up", node=node, interface=interface)
    target.link_down(interface)
    return f"{node} {interface} down"


def link_up(node: str, interface: str = "eth0", lab: str = "lab") -> str:
    """Bring a link up again."""
    handle = _lab(lab)
    rollbacks.link_up(handle, node, interface)
    faults.forget(handle, f"link:{node}:{interface}")
    return f"{node} {interface} up"


def _chain(
    handle: Lab, node: str, chain: str, rules: list[tuple[str, str, list[str]]], group: str | None = None
) -> None:
    faults.record(handle, f"filter:{node}:{chain}", "remove_filter", group=group, node=node, chain=chain)
    tables = {table for table, _, _ in rules}
    for table in tables:
        rollbacks.in_netns(handle, node, "iptables", "-t", table, "-N", chain, check=False)
    for table, hook, match in rules:
        rollbacks.in_netns(handle, node, "iptables", "-t", table, "-A", chain, *match, "-j", "DROP")
        rollbacks.in_netns(handle, node, "iptables", "-t", table, "-I", hook, "1", "-j", chain)


def silent_link_drop(node: str, interface: str = "eth0", lab: str = "lab") -> str:
    """The link stays up but every frame is dropped both ways: only BFD or timeouts notice."""
    handle = _lab(lab)
    _target(handle, node, interface)
    _chain(
        handle,
        node,
        "HAO-SILENT",
        [("raw", "PREROUTING", ["-i", interface]), ("mangle", "POSTROUTING", ["-o", interface])],
    )
    return f"{node} {interface} silently dropping"


def packet_loss(node: str, percent: float, interface: str = "eth0", lab: str = "lab") -> str:
    """Drop a share of the packets arriving on a link (iptables statistic; netem is not available here)."""
    if not 0 < percent <= 100:
        raise LabError(f"percent {percent} is not in (0, 100]")
    handle = _lab(lab)
    _target(handle, node, interface)
    match = ["-i", interface, "-m", "statistic", "--mode", "random", "--probability", f"{percent / 100:.4f}"]
    _chain(handle, node, "HAO-LOSS", [("filter", "INPUT", match)])
    return f"{node} {interface}: {percent:g}% loss"


def bandwidth_limit(node: str, rate_mbit: float, interface: str = "eth0", lab: str = "lab") -> str:
    """Limit a link's outgoing bandwidth (tbf)."""
    handle = _lab(lab)
    _target(handle, node, interface)
    faults.record(handle, f"qdisc:{node}:{interface}", "remove_qdisc", node=node, interface=interface)
    rollbacks.in_netns(handle, node, "tc", "qdisc", "replace", "dev", interface, "root", "tbf", "rate",
                       f"{rate_mbit:g}mbit", "burst", "32kbit", "latency", "400ms")  # fmt: skip
    return f"{node} {interface} limited to {rate_mbit:g} Mbit/s"


def partition(group_a: list[str], group_b: list[str], lab: str = "lab") -> str:
    """Cut every path between two groups of nodes (each side drops the other's addresses)."""
    handle = _lab(lab)
    address = {n.name: str(n.address) for n in handle.ctx.layout.nodes}
    for node in group_a + group_b:
        _target(handle, node)
    group = f"partition:{','.join(group_a)}|{','.join(group_b)}"
    for mine, theirs in ((group_a, group_b), (group_b, group_a)):
        for node in mine:
            rules = [("filter", "INPUT", ["-s", address[t]]) for t in theirs]
            rules += [("filter", "OUTPUT", ["-d", address[t]]) for t in theirs]
            _chain(handle, node, "HAO-PART", rules, group=group)
    return f"partitioned {group_a} from {group_b}"


def heal(node: str, lab: str = "lab") -> str:
    """Remove every drop, loss and partition filter and any bandwidth limit from a node."""
    handle = _lab(lab)
    for chain in ("HAO-SILENT", "HAO-LOSS", "HAO-PART"):
        rollbacks.remove_filter(handle, node, chain)
        faults.forget(handle, f"filter:{node}:{chain}")
    for interface in handle.node(node).interfaces():
        rollbacks.remove_qdisc(handle, node, interface)
        faults.forget(handle, f"qdisc:{node}:{interface}")
    return f"healed {node}"


def node_loss(node: str, permanent: bool = False, lab: str = "lab") -> str:
    """Lose a whole node (power loss): every process on it killed, services and jobs alike, every link down.
    `permanent`: broken hardware, which the remediation controller's power cycle does not bring back."""
    handle = _lab(lab)
    target = _target(handle, node)
    faults.record(handle, f"node:{node}", "restore_node", node=node)
    target.power_off(permanently=permanent)
    return f"lost {node}" + (" (permanently)" if permanent else "")


def slurm_primary_failover(lab: str = "lab") -> str:
    """Kill the primary slurmctld so that the backup takes over."""
    primary = _lab(lab).ctx.layout.nodes_with_role("controller")[0].name
    return kill_service(primary, "slurmctld", lab=lab)


def chunkserver_loss(node: str, lab: str = "lab") -> str:
    """Lose a storage chunkserver."""
    return kill_service(node, "chunkserver", lab)


def storage_master_loss(lab: str = "lab") -> str:
    """Lose the storage master (recovery: promote the metalogger, `ha-ops lab promote-metalogger`)."""
    from ha_ops.lab import storage

    handle = _lab(lab)
    node = handle.state().storage_master or storage.master_node(handle.ctx)
    return kill_service(node, "mfsmaster", lab)


def kill_remediation_leader(lab: str = "lab") -> str:
    """SIGKILL whichever remediation controller leads now (the standby must take over)."""
    from ha_ops.chaos.probes import remediation_leader

    leader = remediation_leader(lab)
    if leader == "none":
        raise LabError("no remediation controller leads: nothing to kill")
    return kill_service(leader, "controller", lab)


def monitoring_outage(alertmanager: bool = False, lab: str = "lab") -> str:
    """Prometheus dies (and Alertmanager too, with `alertmanager`): no scrapes, no alert rules, no alerts."""
    handle = _lab(lab)
    mon = handle.spec.monitoring.host.name
    services = ["prometheus", "alertmanager"] if alertmanager else ["prometheus"]
    return "; ".join(_service_fault(mon, s, lab, "kill", group="monitoring-outage") for s in services)


def driver_rollout(
    to: str, broken: bool = True, base: str = "550.90.07", waves: str = "1,rest", timeout_s: float = 900,
    lab: str = "lab",
) -> str:  # fmt: skip
    """A GPU driver rollout in the lab (ha_ops.lab.rollouts) to `to`, built as a driver that loses every GPU when
    `broken`, from the version the GPU nodes run (`base` is installed first where the role never ran). The remediation
    controllers are stopped for it (the agents drain in Slurm): they would also act on the GPUs a bad driver loses.
    Blocks until the rollout ends; returns its phase and reason."""
    from ha_ops.lab import rollouts

    handle = _lab(lab)
    faults.record(handle, "rollout:driver", "end_driver_rollout")
    handle.use_controllers(False)
    rollouts.prepare(handle, base, {to: not broken})
    current = set(rollouts.active_versions(handle).values())
    if len(current) != 1:
        raise LabError(f"the GPU nodes run different drivers ({', '.join(map(str, sorted(current, key=str)))})")
    (from_version,) = current
    assert from_version is not None
    argv = rollouts.rollout_args(handle, to, from_version, "--soak", "0", "--waves", waves)
    result = rollouts.on_operator_node(handle, *argv, timeout=timeout_s)
    if not result.stdout.lstrip().startswith("{"):
        raise LabError(f"the rollout to {to} printed no summary: {result.stderr[-1500:]}")
    summary = json.loads(result.stdout)
    return f"rollout to {to}: {summary['phase']}" + (f" ({summary['reason']})" if summary["reason"] else "")


def end_driver_rollout(lab: str = "lab") -> str:
    """Undo a driver rollout fault: an open rollout aborted with rollback, the remediation controllers back."""
    handle = _lab(lab)
    rollbacks.end_driver_rollout(handle)
    faults.forget(handle, "rollout:driver")
    return "driver rollout ended; controllers running"
