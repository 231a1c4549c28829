"""The lab as an operator's inventory (`ha-ops lab inventory --ssh`): every host and switch at its address on the
management network, the lab's ssh key and known_hosts, each host's BMC (the lab's Redfish service), fake-GPU
injection on the GPU nodes, the operator's certificate for the controllers' API, the host that runs driver
rollouts, and the lab's spec. `--inventory` commands then reach the lab exactly as they reach a cluster of real
machines: over SSH, with verified host keys, and no nsenter."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ha_ops.lab import bmc, controllers, mgmt, monitoring, rollouts, storage, tls
from ha_ops.lab.agents import gpu_dir
from ha_ops.lab.context import LabContext
from ha_ops.lab.drivers import ha_ops_command
from ha_ops.lab.sshd import client_key, known_hosts
from ha_ops.spec.inventory import render_inventory
from ha_ops.util.atomic import write_atomic


def write_spec(ctx: LabContext) -> Path:
    """The lab's spec as a file (for the inventory's ha_ops_spec, and runbook steps that name {spec})."""
    path = ctx.paths.etc / "spec.yaml"
    write_atomic(path, yaml.safe_dump(ctx.spec.model_dump(mode="json"), sort_keys=False))
    return path


def ssh_inventory(ctx: LabContext) -> dict[str, Any]:
    """The spec's inventory (groups, failure domains) with what the SSH path needs to reach and drive the lab."""
    spec = write_spec(ctx)
    inventory = render_inventory(ctx.spec)
    inventory["all"]["vars"] |= {
        "ansible_user": "root",
        "ansible_ssh_private_key_file": str(client_key(ctx)),
        "ha_ops_known_hosts": str(known_hosts(ctx)),
        "ha_ops_spec": str(spec),
        "ha_ops_shared_dir": str(ctx.paths.shared),
        "ha_ops_storage_mount": str(storage.MOUNT),  # where the storage's clients mount MooseFS
        "ha_ops_controller_state_dir": str(controllers.state_dir(ctx)),
        "ha_ops_rollout": rollouts.site(ctx),  # driver rollouts run on the operator node, as in the lab's own path
        # The nodes share this machine's files: the ha-ops a node runs is this one.
        "ha_ops_command": ha_ops_command(),
    }
    if tls.enabled(ctx):  # the operator's certificate for the controllers' mutual TLS, and the monitoring's
        inventory["all"]["vars"]["ha_ops_tls"] = tls.config_block(ctx, "operator")
        operator = monitoring.client(ctx, "operator")
        assert operator is not None
        inventory["all"]["vars"]["ha_ops_monitoring"] = operator.model_dump(mode="json", exclude_none=True)
    if storage.enabled(ctx):
        inventory["all"]["vars"]["ha_ops_storage_watch_state_dir"] = str(storage.watcher_state_dir(ctx))
    hosts = inventory["all"]["hosts"]
    for node in ctx.layout.nodes:
        hosts[node.name] |= {
            "ansible_host": str(mgmt.address(ctx, node.name)),
            "ha_ops_bmc": {
                "kind": "redfish",
                "address": bmc.url(ctx),
                "user": bmc.USER,
                "password_file": str(bmc.password_file(ctx)),
                "system": f"/redfish/v1/Systems/{node.name}",
            },
        }
        if "gpu" in node.roles:
            hosts[node.name] |= {"ha_ops_gpu_injection": "fake", "ha_ops_fake_gpu_dir": str(gpu_dir(ctx, node.name))}
        if "controller" in node.roles:  # where the lab writes each controller's config (the role: /etc/ha-ops)
            hosts[node.name]["ha_ops_controller_config_file"] = str(controllers.config_path(ctx, node.name))
    switches = {}
    for name in ctx.switch_names():
        hosts[name] = {"ansible_host": str(mgmt.address(ctx, name))}
        switches[name] = None
    inventory["all"]["children"]["switches"] = {"hosts": switches}
    return inventory


def ssh_inventory_path(ctx: LabContext) -> Path:
    """Where the lab keeps its own SSH inventory: what its remediation controllers power nodes through (their BMC)."""
    return ctx.paths.etc / "inventory-ssh.yml"


def write_ssh_inventory(ctx: LabContext) -> Path:
    path = ssh_inventory_path(ctx)
    write_atomic(path, yaml.safe_dump(ssh_inventory(ctx), sort_keys=False))
    return path
