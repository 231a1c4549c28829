"""How each fault is undone: called by experiments' rollbacks (through actions) and by `ha-ops chaos cleanup`."""

from __future__ import annotations

from ha_ops.lab import netns
from ha_ops.lab.cluster import Lab
from ha_ops.util.proc import CommandResult, run

FILTER_HOOKS = (("raw", "PREROUTING"), ("mangle", "POSTROUTING"), ("filter", "INPUT"), ("filter", "OUTPUT"))


def in_netns(lab: Lab, node: str, *argv: str, check: bool = True) -> CommandResult:
    """A command in the node's network namespace only (iptables, tc: no need for its hostname or mounts)."""
    return run(["nsenter", f"--net={netns.NETNS_DIR / lab.ctx.netns(node)}", *argv], check=check, timeout=10)


def clear_gpu(lab: Lab, node: str, gpu: int | None = None) -> None:
    lab.node(node).gpus().clear(gpu)


def start_service(lab: Lab, node: str, service: str) -> None:
    handle = lab.node(node)
    handle.thaw(service)
    handle.start(service)


def link_up(lab: Lab, node: str, interface: str) -> None:
    lab.node(node).link_up(interface)


def remove_filter(lab: Lab, node: str, chain: str) -> None:
    """Remove an ha-ops iptables chain (drops, loss, partition) from a node, with every jump to it."""
    for table, hook in FILTER_HOOKS:
        while in_netns(lab, node, "iptables", "-t", table, "-D", hook, "-j", chain, check=False).ok:
            pass
        in_netns(lab, node, "iptables", "-t", table, "-F", chain, check=False)
        in_netns(lab, node, "iptables", "-t", table, "-X", chain, check=False)


def remove_qdisc(lab: Lab, node: str, interface: str) -> None:
    in_netns(lab, node, "tc", "qdisc", "del", "dev", interface, "root", check=False)


def restore_node(lab: Lab, node: str) -> None:
    """After a node loss: its links up again, and `lab up` restarts what the node ran."""
    handle = lab.node(node)
    for interface in handle.interfaces():
        handle.link_up(interface)
    lab.up()
