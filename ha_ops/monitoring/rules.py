"""The ha-ops alert rules for Prometheus, written once.

Two groups. "ha-ops-lab" holds the rules the remediation controller and the lab's tests react to, with `for: 0s` so
that a fault in the lab alerts within a scrape; the lab loads only this group. "ha-ops-cluster" holds the rules for a
production cluster, with `for:` durations that ride out a scrape or two lost: GPU health per GPU, a node or its agent
down, the Slurm controllers, the remediation controllers and their leader, and the fabric links. `ha-ops monitoring
rules` renders both, and the monitoring role ships exactly that output (a unit test keeps them equal).

Every alert carries a `summary`, a `description` (what it means and what ha-ops does about it) and a `runbook_url`:
the runbook in runbooks/ for that failure, under `runbook_base`. The default base is the relative "runbooks/", which
names the file in this repository; a cluster renders its rules with `--runbook-base` set to where its people read the
runbooks (a wiki, a Git web view of this repository).
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

# Where the runbooks are read, unless the caller says: relative to this repository's root.
RUNBOOK_BASE = "runbooks/"

# The runbook (a file in runbooks/) for each alert: the failure's own where there is one, else the closest.
RUNBOOKS: dict[str, str] = {
    "HaOpsScrapeTargetDown": "node-loss.md",  # mostly an agent, i.e. a node; a controller's has its own alert
    "HaOpsGpuNodeUnhealthy": "gpu-failure.md",
    "HaOpsStorageMasterDown": "storage-master-failure.md",
    "HaOpsStorageUnderReplicated": "storage-node-failure.md",
    "HaOpsStorageMissingChunks": "storage-node-failure.md",
    "HaOpsRemediationBreakerOpen": "gpu-failure.md",  # its manual steps say when to reset the breaker
    "HaOpsNodeNeedsReplacement": "gpu-failure.md",
    "HaOpsGpuNodeDegraded": "gpu-failure.md",
    "HaOpsGpuUnhealthy": "gpu-failure.md",
    "HaOpsNodeDown": "node-loss.md",
    "HaOpsSlurmControllerDown": "slurm-primary-failure.md",
    "HaOpsSlurmNoController": "slurm-primary-failure.md",
    "HaOpsRemediationControllerDown": "remediation-controller-failure.md",
    "HaOpsNoRemediationLeader": "remediation-controller-failure.md",
    "HaOpsRemediationBlocked": "remediation-controller-failure.md",
    "HaOpsAuditLogNotIntact": "remediation-controller-failure.md",
    "HaOpsFabricLinkDown": "fabric-link-failure.md",  # a host's fabric port: the leaf-spine runbook is the closest
    "HaOpsFabricBondDegraded": "fabric-link-failure.md",
}

HEADER = (
    "# The ha-ops alert rules, rendered by `ha-ops monitoring rules` (ha_ops/monitoring/rules.py): do not edit here.\n"
)


def runbook_url(alert: str, runbook_base: str = RUNBOOK_BASE) -> str:
    """Where the runbook for `alert` is read: its file of runbooks/ under `runbook_base` (one slash between)."""
    return f"{runbook_base.rstrip('/')}/{RUNBOOKS[alert]}" if runbook_base else RUNBOOKS[alert]


def _rule(
    alert: str, expr: str, severity: str, summary: str, description: str, runbook_base: str, for_: str = "0s"
) -> dict[str, Any]:
    return {
        "alert": alert,
        "expr": expr,
        "for": for_,
        "labels": {"severity": severity},
        "annotations": {
            "summary": summary,
            "description": description,
            "runbook_url": runbook_url(alert, runbook_base),
        },
    }


def lab_group(runbook_base: str = RUNBOOK_BASE) -> dict[str, Any]:
    """What the remediation controller acts on and the lab tests watch; `for: 0s` throughout."""
    b = runbook_base
    return {
        "name": LAB_GROUP,
        "rules": [
            _rule(
                "HaOpsScrapeTargetDown",
                "up == 0",
                "critical",
                "{{ $labels.job }} at {{ $labels.instance }} is down",
                "Prometheus cannot scrape {{ $labels.job }} at {{ $labels.instance }}. For a node's agent the "
                "remediation controller suspects the node and takes it out of service once Slurm finds it not "
                "responding too; for a remediation controller the standby leads alone.",
                b,
            ),
            _rule(
                "HaOpsGpuNodeUnhealthy",
                'ha_ops_node_health{state="unhealthy"} == 1',
                "critical",
                "GPU node {{ $labels.node }} is unhealthy",
                "The ha-ops agent on {{ $labels.node }} finds a GPU fault (an XID, uncorrectable ECC errors, a "
                "row-remap failure, overheating, a lost GPU). The remediation controller drains the node, brings in "
                "a spare and climbs the repair ladder (GPU reset, reboot, validation) before it returns the node.",
                b,
            ),
            _rule(
                "HaOpsStorageMasterDown",
                "ha_ops_storage_master_up == 0",
                "critical",
                "the MooseFS master does not answer: promote the metalogger",
                "The storage exporter gets no answer from the MooseFS master. The storage watcher fences the old "
                "master and promotes the metalogger; the alert clears once the new master answers.",
                b,
            ),
            _rule(
                "HaOpsStorageUnderReplicated",
                "ha_ops_storage_chunks_undergoal > 0 or ha_ops_storage_chunks_endangered > 0 "
                "or ha_ops_storage_chunkservers < ha_ops_storage_chunkservers_expected",
                "warning",
                "storage runs below its replica count",
                "Chunks are below their replica count, some have a single copy left, or fewer chunkservers are "
                "connected than the spec has. The master re-replicates by itself; until it is done one more lost "
                "chunkserver can lose data.",
                b,
            ),
            _rule(
                "HaOpsStorageMissingChunks",
                "ha_ops_storage_chunks_missing > 0",
                "critical",
                "{{ $value }} chunks have no copy left",
                "{{ $value }} chunks have no copy on any connected chunkserver: the files that use them cannot be "
                "read. Nothing re-replicates them: only a chunkserver holding them brings them back, so bring lost "
                "chunkservers back first.",
                b,
            ),
            _rule(
                "HaOpsRemediationBreakerOpen",
                "ha_ops_controller_breaker_open == 1",
                "critical",
                "remediation stopped: the circuit breaker is open (see its reason)",
                "Remediation controller {{ $labels.id }} was asked to take more nodes out of service than its "
                "safety limits allow, and stopped taking any out. Find whether the monitoring or the fleet is at "
                "fault (ha-ops controller status), then ha-ops controller breaker-reset.",
                b,
            ),
            _rule(
                "HaOpsNodeNeedsReplacement",
                "ha_ops_controller_needs_replacement == 1",
                "warning",
                "{{ $labels.node }} is held out of service for replacement",
                "{{ $labels.node }} kept failing (a flapping GPU) or failed validation after a reboot: the repair "
                "ladder is spent and the node stays out of service. Replace the GPU or the node, then "
                "ha-ops controller repaired {{ $labels.node }}.",
                b,
            ),
            _rule(
                "HaOpsGpuNodeDegraded",
                'ha_ops_node_health{state="degraded"} == 1',
                "warning",
                "GPU node {{ $labels.node }} is degraded",
                "The ha-ops agent on {{ $labels.node }} reports a warning (a pending row remap, correctable ECC "
                "errors, PCIe replays, a warning XID) but no fault. The remediation controller watches the node "
                "(suspect) and does not take it out of service.",
                b,
            ),
            _rule(
                "HaOpsRemediationBlocked",
                # While nobody leads: a standby that failed a takeover once, while its peer leads, says nothing.
                "ha_ops_controller_blocked == 1 unless on () (sum(ha_ops_controller_leader) > 0)",
                "critical",
                "no remediation controller can lead: {{ $labels.id }} cannot take over ({{ $labels.reason }})",
                "Remediation controller {{ $labels.id }} wins the lease but cannot lead, and no other controller "
                "leads. Reason state: the shared state {{ $labels.document }} cannot be loaded (damaged from "
                "outside); it is refused rather than forget what was done, and retried at every lease step. Until "
                "then faulty GPU nodes are drained only by their agents' fallback and nothing is repaired. Restore "
                "it with ha-ops controller state restore.",
                b,
            ),
            _rule(
                "HaOpsAuditLogNotIntact",
                "ha_ops_audit_intact == 0",
                "critical",
                "the remediation audit log was cut or changed ({{ $labels.id }} found it when it took over)",
                "Remediation controller {{ $labels.id }} found the audit log short of the head its state or the "
                "lease records, or an entry changed, when it took over. It leads on, and the log keeps the break in an "
                "entry of its own; what was done before it may be lost. See ha-ops controller status, ha-ops audit "
                "verify --config, and the audit sink's copy.",
                b,
            ),
        ],
    }


def cluster_group(fabric_devices: str = FABRIC_DEVICES, runbook_base: str = RUNBOOK_BASE) -> dict[str, Any]:
    """A production cluster's alerts. The agent job is "ha-ops-agent", the controllers' "ha-ops-controller", and
    node_exporter provides the link and bond metrics; `fabric_devices` selects the fabric's network devices."""
    b = runbook_base
    return {
        "name": CLUSTER_GROUP,
        "rules": [
            _rule(
                "HaOpsGpuUnhealthy",
                'ha_ops_gpu_health{state="unhealthy"} == 1',
                "critical",
                "GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on {{ $labels.node }} is unhealthy",
                "The ha-ops agent on {{ $labels.node }} has found GPU {{ $labels.gpu }} faulty for a minute. It "
                "reported the fault at once: the remediation controller drains the node, brings in a spare and "
                "climbs the repair ladder (GPU reset, reboot, validation) before it returns the node.",
                b,
                "1m",  # the agent drains at once; people hear of it when it lasts
            ),
            _rule(
                "HaOpsNodeDown",
                'up{job="ha-ops-agent"} == 0',
                "critical",
                "{{ $labels.instance }}: the node or its ha-ops agent is down",
                "Prometheus has not scraped the ha-ops agent at {{ $labels.instance }} for a minute: the node is "
                "lost (power, kernel panic) or its agent stopped. When Slurm finds it not responding too, the "
                "remediation controller takes it out, brings in a spare and power-cycles it as its fence.",
                b,
                "1m",  # a scrape or two lost to a busy node is not an outage
            ),
            _rule(
                "HaOpsSlurmControllerDown",
                "(max by (host) (ha_ops_slurm_controller_up) == 0) unless on () (max(ha_ops_slurm_controller_up) == 0)",
                "warning",
                "slurmctld on {{ $labels.host }} does not answer: the other controller serves alone (no redundancy)",
                "slurmctld on {{ $labels.host }} does not answer scontrol ping from the leading remediation "
                "controller. The other slurmctld schedules alone, and a hung primary is fenced; bring it back to "
                "restore redundancy.",
                b,
                "1m",
            ),
            _rule(
                "HaOpsSlurmNoController",
                "max(ha_ops_slurm_controller_up) == 0",
                "critical",
                "no slurmctld answers: jobs cannot be scheduled or drained",
                "Neither slurmctld answers scontrol ping: no job is scheduled, and the remediation controller can "
                "neither drain nor return nodes until one answers again.",
                b,
                "30s",
            ),
            _rule(
                "HaOpsRemediationControllerDown",
                'up{job="ha-ops-controller"} == 0',
                "warning",
                "remediation controller {{ $labels.instance }} is down: the other one leads alone",
                "Prometheus cannot scrape the remediation controller at {{ $labels.instance }}. If it led, the "
                "standby takes the lease within one lease TTL; until it is back there is no standby.",
                b,
                "1m",
            ),
            _rule(
                "HaOpsNoRemediationLeader",
                "sum(ha_ops_controller_leader) == 0 or absent(ha_ops_controller_leader)",
                "critical",
                "no remediation controller leads: faulty GPU nodes are not taken out of service",
                "No remediation controller holds the lease, or none exports its leader metric: GPU faults are "
                "reported but no node is drained or repaired. Check that the controllers run and reach their "
                "lease store.",
                b,
                "30s",  # a failover takes one lease TTL
            ),
            _rule(
                "HaOpsFabricLinkDown",
                f'node_network_up{{device=~"{fabric_devices}"}} == 0',
                "warning",
                "fabric link {{ $labels.device }} on {{ $labels.instance }} is down",
                "node_exporter on {{ $labels.instance }} reports fabric device {{ $labels.device }} down. Traffic "
                "takes the remaining links; find and replace the failed cable or optic.",
                b,
                "30s",
            ),
            _rule(
                "HaOpsFabricBondDegraded",
                "node_bonding_active < node_bonding_slaves",
                "warning",
                "bond {{ $labels.master }} on {{ $labels.instance }} runs on {{ $value }} member(s) only",
                "Bond {{ $labels.master }} on {{ $labels.instance }} has fewer active members than it should: it "
                "carries less bandwidth, with no redundancy left if one member remains. Check the missing "
                "members' links.",
                b,
                "30s",
            ),
        ],
    }


@functools.cache
def alert_names() -> frozenset[str]:
    """Every alert these rules raise: what the remediation controller records of an alert by name (an unknown name,
    which only a forged notification carries, is not stored)."""
    return frozenset(rule["alert"] for group in (lab_group(), cluster_group()) for rule in group["rules"])


def render_rules(
    groups: Iterable[str] | None = None, fabric_devices: str = FABRIC_DEVICES, runbook_base: str = RUNBOOK_BASE
) -> dict[str, Any]:
    """The rule file as a dict: every group, or only those named in `groups` (in this module's order); every
    runbook_url under `runbook_base`."""
    every = [lab_group(runbook_base), cluster_group(fabric_devices, runbook_base)]
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


def rules_yaml(
    groups: Iterable[str] | None = None, fabric_devices: str = FABRIC_DEVICES, runbook_base: str = RUNBOOK_BASE
) -> str:
    """The rule file as Prometheus reads it: a header, then the rules in a stable order."""
    rules = render_rules(groups, fabric_devices, runbook_base)
    body = yaml.dump(rules, Dumper=_Dumper, sort_keys=False, explicit_start=True, width=_WIDTH)
    return HEADER + body
