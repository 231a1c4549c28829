"""How each fault is undone: called by experiments' rollbacks (through actions) and by `ha-ops chaos cleanup`."""

from __future__ import annotations

import logging
import sys
import time

from ha_ops.lab import netns
from ha_ops.lab.cluster import Lab
from ha_ops.util.proc import CommandResult, run

log = logging.getLogger(__name__)

FILTER_HOOKS = (("raw", "PREROUTING"), ("mangle", "POSTROUTING"), ("filter", "INPUT"), ("filter", "OUTPUT"))


def in_netns(lab: Lab, node: str, *argv: str, check: bool = True) -> CommandResult:
    """A command in the node's network namespace only (iptables, tc: no need for its hostname or mounts)."""
    return run(["nsenter", f"--net={netns.NETNS_DIR / lab.ctx.netns(node)}", *argv], check=check, timeout=10)


def clear_gpu(lab: Lab, node: str, gpu: int | None = None) -> None:
    lab.node(node).gpus().clear(gpu)


def start_service(lab: Lab, node: str, service: str) -> None:
    if service == "mfsmaster" and lab.state().storage_master not in (None, node):
        return  # the metalogger was promoted meanwhile: the old master stays fenced (two masters would split)
    handle = lab.node(node)
    handle.thaw(service)
    handle.start(service)
    if service == "slurmctld":
        _slurm_controllers_back(lab)


def _slurm_controllers_back(lab: Lab, timeout: float = 30.0) -> None:
    """After a slurmctld fault the lab is whole only when every slurmctld answers. Slurm 22.05's backup sometimes
    fails to return to standby when the primary takes control back (it logs "heartbeat file creation failed" from
    then on and answers no ping; shared/LAB-NOTES.md): restart it, as the runbook tells an operator to."""
    from ha_ops.chaos.probes import slurm_controller_status

    deadline = time.time() + timeout
    hosts = [n.name for n in lab.ctx.layout.nodes_with_role("controller")]
    while time.time() < deadline:
        down = [h for h in hosts if slurm_controller_status(h, lab=lab.spec.name) != "UP"]
        if not down:
            return
        time.sleep(1.0)
    for host in down:
        log.warning("slurmctld on %s did not answer after the primary returned; restarting it", host)
        lab.node(host).restart("slurmctld")


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
    """After a node loss: the node powered on again (repaired, if its loss was permanent), its services running."""
    handle = lab.node(node)
    if handle.powered_on():
        handle.repair_hardware()  # the controller's power cycle already brought it back: leave it running
    else:
        handle.power_cycle(repair=True)


def end_driver_rollout(lab: Lab) -> None:
    """After a driver rollout fault: a rollout still open is aborted with every changed node rolled back, and the
    remediation controllers run again."""
    from ha_ops.lab import rollouts

    state = rollouts.rollout_state(lab)
    if state and state["phase"] not in ("halted", "completed", "aborted"):
        state_dir = str(rollouts.files(lab).state_dir)
        argv = [sys.executable, "-m", "ha_ops", "rollout", "abort", "--rollback", "--state-dir", state_dir, "--json"]
        result = rollouts.on_operator_node(lab, *argv, timeout=900)
        if not result.ok:
            log.error("aborting the rollout failed: %s", result.stderr[-1500:])
    lab.use_controllers(True)
