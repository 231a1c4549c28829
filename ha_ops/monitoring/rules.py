"""The ha-ops alert rules for Prometheus, written once.

Two groups. "ha-ops-lab" holds the rules the remediation controller and the lab's tests react to, with `for: 0s` so
that a fault in the lab alerts within a scrape; the lab loads only this group. "ha-ops-cluster" holds the rules for a
production cluster, with `for:` durations that ride out a scrape or two lost: GPU health per GPU, a node or its agent
down, the Slurm controllers, the remediation controllers and their leader, and the fabric links. `ha-ops monitoring
rules` renders both, and the monitoring role ships exactly that output (a unit test keeps them equal).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

import yaml

LAB_GROUP = "ha-ops-lab"
CLUSTER_GROUP = "ha-ops-cluster"

# Network devices that carry the GPU fabric, as node_exporter names them (PromQL anchors the regex): InfiniBand
# (ib0), bonds (bond0), renamed RDMA netdevs (rdma0) and ConnectX RoCE ports named by systemd (ens1f0np0).
FABRIC_DEVICES = "(ib|bond|rdma)[0-9].*|.*np[0-9]+"

HEADER = (
    "# The ha-ops alert rules, rendered by `ha-ops monitoring rules` (ha_ops/monitoring/rules.py): do not edit here.\n"
)


def _rule(alert: str, expr: str, severity: str, summary: str, for_: str = "0s") -> dict[str, Any]:
    return {
        "alert": alert,
        "expr": expr,
        "for": for_,
        "labels": {"severity": severity},
        "annotations": {"summary": summary},
    }


def lab_group() -> dict[str, Any]:
    """What the remediation controller acts on and the lab tests watch; `for: 0s` throughout."""
    return {
        "name": LAB_GROUP,
        "rules": [
            _rule(
                "HaOpsScrapeTargetDown",
                "up == 0",
                "critical",
                "{{ $labels.job }} at {{ $labels.instance }} is down",
            ),
            _rule(
                "HaOpsGpuNodeUnhealthy",
                'ha_ops_node_health{state="unhealthy"} == 1',
                "critical",
                "GPU node {{ $labels.node }} is unhealthy",
            ),
            _rule(
                "HaOpsStorageMasterDown",
                "ha_ops_storage_master_up == 0",
                "critical",
                "the MooseFS master does not answer: promote the metalogger",
            ),
            _rule(
                "HaOpsStorageUnderReplicated",
                "ha_ops_storage_chunks_undergoal > 0 or ha_ops_storage_chunks_endangered > 0 "
                "or ha_ops_storage_chunkservers < ha_ops_storage_chunkservers_expected",
                "warning",
                "storage runs below its replica count",
            ),
            _rule(
                "HaOpsStorageMissingChunks",
                "ha_ops_storage_chunks_missing > 0",
                "critical",
                "{{ $value }} chunks have no copy left",
            ),
            _rule(
                "HaOpsRemediationBreakerOpen",
                "ha_ops_controller_breaker_open == 1",
                "critical",
                "remediation stopped: the circuit breaker is open (see its reason)",
            ),
            _rule(
                "HaOpsNodeNeedsReplacement",
                "ha_ops_controller_needs_replacement == 1",
                "warning",
                "{{ $labels.node }} is held out of service for replacement",
            ),
            _rule(
                "HaOpsGpuNodeDegraded",
                'ha_ops_node_health{state="degraded"} == 1',
                "warning",
                "GPU node {{ $labels.node }} is degraded",
            ),
        ],
    }


def cluster_group(fabric_devices: str = FABRIC_DEVICES) -> dict[str, Any]:
    """A production cluster's alerts. The agent job is "ha-ops-agent", the controllers' "ha-ops-controller", and
    node_exporter provides the link and bond metrics; `fabric_devices` selects the fabric's network devices."""
    return {
        "name": CLUSTER_GROUP,
        "rules": [
            _rule(
                "HaOpsGpuUnhealthy",
                'ha_ops_gpu_health{state="unhealthy"} == 1',
                "critical",
                "GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on {{ $labels.node }} is unhealthy",
                "1m",  # the agent drains at once; people hear of it when it lasts
            ),
            _rule(
                "HaOpsNodeDown",
                'up{job="ha-ops-agent"} == 0',
                "critical",
                "{{ $labels.instance }}: the node or its ha-ops agent is down",
                "1m",  # a scrape or two lost to a busy node is not an outage
            ),
            _rule(
                "HaOpsSlurmControllerDown",
                "(max by (host) (ha_ops_slurm_controller_up) == 0) unless on () (max(ha_ops_slurm_controller_up) == 0)",
                "warning",
                "slurmctld on {{ $labels.host }} does not answer: the other controller serves alone (no redundancy)",
                "1m",
            ),
            _rule(
                "HaOpsSlurmNoController",
                "max(ha_ops_slurm_controller_up) == 0",
                "critical",
                "no slurmctld answers: jobs cannot be scheduled or drained",
                "30s",
            ),
            _rule(
                "HaOpsRemediationControllerDown",
                'up{job="ha-ops-controller"} == 0',
                "warning",
                "remediation controller {{ $labels.instance }} is down: the other one leads alone",
                "1m",
            ),
            _rule(
                "HaOpsNoRemediationLeader",
                "sum(ha_ops_controller_leader) == 0 or absent(ha_ops_controller_leader)",
                "critical",
                "no remediation controller leads: faulty GPU nodes are not taken out of service",
                "30s",  # a failover takes one lease TTL
            ),
            _rule(
                "HaOpsFabricLinkDown",
                f'node_network_up{{device=~"{fabric_devices}"}} == 0',
                "warning",
                "fabric link {{ $labels.device }} on {{ $labels.instance }} is down",
                "30s",
            ),
            _rule(
                "HaOpsFabricBondDegraded",
                "node_bonding_active < node_bonding_slaves",
                "warning",
                "bond {{ $labels.master }} on {{ $labels.instance }} runs on {{ $value }} member(s) only",
                "30s",
            ),
        ],
    }


@functools.cache
def alert_names() -> frozenset[str]:
    """Every alert these rules raise: what the remediation controller records of an alert by name (an unknown name,
    which only a forged notification carries, is not stored)."""
    return frozenset(rule["alert"] for group in (lab_group(), cluster_group()) for rule in group["rules"])


def render_rules(groups: Iterable[str] | None = None, fabric_devices: str = FABRIC_DEVICES) -> dict[str, Any]:
    """The rule file as a dict: every group, or only those named in `groups` (in this module's order)."""
    every = [lab_group(), cluster_group(fabric_devices)]
    wanted = None if groups is None else set(groups)
    if wanted is not None and (unknown := wanted - {g["name"] for g in every}):
        raise ValueError(f"unknown rule group(s): {', '.join(sorted(unknown))}")
    return {"groups": [g for g in every if wanted is None or g["name"] in wanted]}


class _Dumper(yaml.SafeDumper):
    """Indents sequences under their key, as yamllint (and most hand-written YAML) wants."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    # A long expression as a folded block, wrapped between words, rather than a plain scalar cut mid-line.
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=">" if len(value) > _FOLD_AT else None)


_FOLD_AT = 90
_WIDTH = 110
_Dumper.add_representer(str, _str)


def rules_yaml(groups: Iterable[str] | None = None, fabric_devices: str = FABRIC_DEVICES) -> str:
    """The rule file as Prometheus reads it: a header, then the rules in a stable order."""
    body = yaml.dump(
        render_rules(groups, fabric_devices), Dumper=_Dumper, sort_keys=False, explicit_start=True, width=_WIDTH
    )
    return HEADER + body
