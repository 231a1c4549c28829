"""The Ansible inventory of a cluster, rendered from its spec: the playbooks in playbooks/ and `ha-ops rollout` read
it. Group names are the ones the roles default to; host order inside a group is meaningful (the first Slurm
controller is the primary)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from ipaddress import IPv4Address
from typing import Any

from ha_ops.security.firewall import host_rules, render_nft
from ha_ops.spec.layout import Layout, NodeLayout, compute_layout
from ha_ops.spec.model import ClusterSpec

# Layout role -> inventory groups.
ROLE_GROUPS: dict[str, tuple[str, ...]] = {
    "controller": ("slurm_controllers", "remediation_controllers", "moosefs_client"),
    "gpu": ("gpu_nodes", "slurm_compute", "moosefs_client"),
    "monitoring": ("monitoring",),
    "storage_master": ("moosefs_master",),
    "storage_metalogger": ("moosefs_metalogger",),
    "chunkserver": ("moosefs_chunkserver",),
}


def group_name(text: str) -> str:
    """Ansible group names are identifiers: anything else becomes an underscore."""
    return re.sub(r"[^A-Za-z0-9_]", "_", text)


def gres_type(gpu_model: str) -> str:
    """A Slurm gres type from a GPU model (lower case letters, digits, dashes): H100-SXM5-80GB -> h100-sxm5-80gb."""
    return re.sub(r"[^a-z0-9]+", "-", gpu_model.lower()).strip("-") or "gpu"


def _host_vars(spec: ClusterSpec, node: NodeLayout) -> dict[str, Any]:
    domain = next(d for d in spec.failure_domains if d.name == node.domain)
    hostvars: dict[str, Any] = {
        "ansible_host": str(node.address),
        "slurm_address": str(node.address),
        "ha_ops_failure_domain": node.domain,
        "ha_ops_zone": domain.zone,
        "ha_ops_rack": domain.rack,
        "ha_ops_power_feed": domain.power_feed,
        "ha_ops_leaf": node.leaf,
    }
    if node.bmc is not None:  # `ha-ops power` and the remediation controllers reach the node's BMC with it
        hostvars["ha_ops_bmc"] = node.bmc.model_dump(mode="json", exclude_none=True, exclude_defaults=True)
    if "gpu" in node.roles:
        hostvars |= {
            "ha_ops_pool": node.pool,
            "ha_ops_spare": node.spare,
            "slurm_compute_gpus": node.gpus,
            "slurm_compute_gpu_type": gres_type(node.gpu_model),
            "slurm_compute_cpus": node.cpus,
            "slurm_compute_real_memory_mb": node.memory_mb,
        }
    return hostvars


def _cluster_vars(spec: ClusterSpec, layout: Layout) -> dict[str, Any]:
    cluster: dict[str, Any] = {"ha_ops_cluster": spec.name, "ha_ops_production": spec.production}
    slurm = spec.schedulers.slurm
    if slurm is not None:
        cluster |= {
            "slurm_controller_cluster_name": slurm.cluster_name,
            "slurm_controller_partition": slurm.partition,
            "slurm_controller_slurmctld_timeout": slurm.slurmctld_timeout_s,
            "slurm_controller_slurmd_timeout": slurm.slurmd_timeout_s,
            "slurm_controller_message_timeout": slurm.message_timeout_s,
        }
    if spec.storage is not None and spec.storage.kind == "moosefs":
        cluster["moosefs_goal"] = spec.storage.replicas
        if "mfsmaster" in layout.service_addresses:
            cluster["moosefs_master_address"] = str(layout.service_addresses["mfsmaster"])
    mon = spec.monitoring
    cluster |= {
        "monitoring_prometheus_port": mon.prometheus_port,
        "monitoring_alertmanager_port": mon.alertmanager_port,
        "monitoring_agent_port": mon.agent_port,
        "ha_ops_agent_metrics_port": mon.agent_port,
    }
    if spec.remediation is not None:
        cluster["monitoring_controller_port"] = spec.remediation.port
        if not spec.remediation.tls:  # plain HTTP, as the spec means it (remediation.insecure): the roles' default
            # is the ha_ops_pki role's certificates, and they refuse plain HTTP unless told
            cluster |= {"ha_ops_controller_tls": {}, "ha_ops_controller_insecure": True,
                        "ha_ops_agent_controller_tls": {}, "ha_ops_agent_controller_insecure": True}  # fmt: skip
    return cluster


def with_addresses(layout: Layout, addresses: Mapping[str, IPv4Address]) -> Layout:
    """The layout with these hosts at these addresses (e.g. the ones a cloud picked: ha_ops.spec.addresses)."""
    nodes = [dataclasses.replace(n, address=addresses[n.name]) if n.name in addresses else n for n in layout.nodes]
    return dataclasses.replace(layout, nodes=nodes)


def render_inventory(spec: ClusterSpec, addresses: Mapping[str, IPv4Address] | None = None) -> dict[str, Any]:
    """An Ansible YAML inventory: role groups, one group per failure domain, zone and rack, and spares.

    `addresses` (host -> address) overrides the layout's: each such host's ansible_host and slurm_address, and
    wherever the other hosts' firewall rules name it, since they are rendered from the same layout."""
    layout = compute_layout(spec)
    if addresses:
        layout = with_addresses(layout, addresses)
    hosts = {node.name: _host_vars(spec, node) for node in layout.nodes}
    if spec.firewall is not None:  # each host's nftables ruleset, for the host_firewall role
        for node in layout.nodes:
            hosts[node.name]["host_firewall_ruleset"] = render_nft(node.name, host_rules(spec, layout, node.name))
    children: dict[str, dict[str, Any]] = {}

    def add(group: str, host: str) -> None:
        members = children.setdefault(group_name(group), {"hosts": {}})["hosts"]
        members.setdefault(host, None)

    for node in layout.nodes:
        for role in node.roles:
            for group in ROLE_GROUPS.get(role, ()):
                add(group, node.name)
    for node in layout.nodes:
        if "gpu" in node.roles and node.spare:
            add("spares", node.name)
        domain = next(d for d in spec.failure_domains if d.name == node.domain)
        add(f"domain_{node.domain}", node.name)
        add(f"zone_{domain.zone}", node.name)
        add(f"rack_{domain.rack}", node.name)
    # Host variables once, under `all`; groups only list their members.
    return {"all": {"vars": _cluster_vars(spec, layout), "hosts": hosts, "children": children}}
