"""The controller's configuration (YAML): who it is, where the shared state lives, safety limits, the ladder, and
how to reach nodes. Unknown keys are rejected."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from ha_ops.errors import SpecError
from ha_ops.monitoring.web import MonitoringClient
from ha_ops.remediation import heartbeats as beats
from ha_ops.remediation.audit_sink import AuditSinkConfig
from ha_ops.remediation.certificates import CertificatesConfig
from ha_ops.remediation.fence_config import SlurmFence
from ha_ops.security.tls import INSECURE_WITHOUT_TLS, TlsFiles
from ha_ops.util.command_template import GpuCommand, NodeCommand
from ha_ops.util.http_front import Limits
from ha_ops.util.models import ConfigModel
from ha_ops.util.names import BaseUrl, NodeName
from ha_ops.util.yamlconfig import load_model


class Safety(ConfigModel):
    breaker_max_nodes: int = Field(2, ge=1, description="Cordons within the window that trip the breaker.")
    breaker_max_fraction: float = Field(0.1, gt=0, le=1, description="...or this share of a pool within the window.")
    breaker_window_s: float = Field(600.0, gt=0)
    min_healthy_fraction: float = Field(
        0.5, ge=0, le=1, description="Never cordon below this share of a pool in service."
    )
    max_cordons_per_minute: int = Field(10, ge=1, description="Rate limit; further cordons wait their turn.")
    dry_run: bool = Field(False, description="Shadow mode: decide, log and audit; change nothing.")
    opt_out: list[NodeName] = Field(default_factory=list, description="Nodes the controller never touches.")


class Ladder(ConfigModel):
    validate_timeout_s: float = Field(60.0, gt=0, description="How long a repair step may take to validate.")
    probation_s: float = Field(300.0, ge=0, description="After a return, a new fault within this counts as a flap.")
    max_flaps: int = Field(
        2, ge=1, description="Returns within the flap window before the node is held for replacement."
    )
    flap_window_s: float = Field(3600.0, gt=0)
    drain_timeout_s: float = Field(30.0, gt=0, description="Wait for jobs that cannot be requeued before repairing.")


class Bursts(ConfigModel):
    """Application XIDs (13, 31, 43, 45, 68) on many nodes at once are one job's fault, not a fleet failure
    (remediation/bursts.py): one finding, and no node of the burst is taken out of service for them."""

    enabled: bool = True
    min_nodes: int = Field(
        8, ge=2, description="Nodes whose application XIDs begin within the window that make a burst."
    )
    window_s: float = Field(
        10.0,
        gt=0,
        description="The window; also how long a node's escalated application-XID report waits (a burst may be "
        "forming) before it takes the node out of service.",
    )
    hold_s: float = Field(
        60.0,
        gt=0,
        description="A burst ends this long after the last application-XID report of its nodes (over the agents' "
        "heartbeat, controller.heartbeat_s, so that it lasts while they still report them).",
    )
    max_events: int = Field(4096, ge=16, description="Most onsets kept in the window (memory bound).")


DAY_S = 86400.0


class Lemon(ConfigModel):
    """Lemon nodes: a node with `incidents` incidents within `window_s` is held for replacement at the end of an
    episode instead of being returned (remediation/history.py, docs/fleet.md).

    The defaults are a starting point, not a law. Meta's Research SuperCluster found that a few nodes cause a large
    share of repeated failures and that removing them ("lemon node detection", from each node's failure history) cut
    the failure rate of large jobs from 14% to 4% (Kokolis et al., "Revisiting Reliability in Large-Scale Machine
    Learning Research Clusters", HPCA 2025, arXiv:2410.21680). Three incidents in 30 days is far above what a healthy
    GPU node sees (a node MTBF of months to years at those fleets' rates), so it names repeat offenders while one bad
    week of a sound node does not; tune it to your fleet's own MTBI (`ha-ops fleet history`)."""

    enabled: bool = True
    incidents: int = Field(3, ge=2, description="Incidents within the window that make a node a lemon.")
    window_s: float = Field(30 * DAY_S, gt=0, description="The window (seconds; 30 days by default).")


class Fleet(ConfigModel):
    """The fleet's reliability history (remediation/history.py): MTBI, tiers and their publication."""

    mtbi_window_s: float = Field(90 * DAY_S, gt=0, description="MTBI is estimated over this window (seconds).")
    tier_window_s: float = Field(
        30 * DAY_S,
        gt=0,
        description="A node's tier counts its incidents within this: none reliable, one standard, more suspect.",
    )
    publish_tiers: bool = Field(
        True,
        description="Publish each node's tier to the scheduler when it changes (Slurm: Weight and the feature "
        "`reliable`; Kubernetes: the label ha-ops.io/reliability-tier).",
    )
    max_incidents_per_node: int = Field(20, ge=2, description="Each node's latest incidents kept in the state.")
    max_incidents: int = Field(
        1000,
        ge=10,
        description="Incidents kept in the state in all (the oldest dropped first): the state is written at every "
        "commit, and on Kubernetes it is one ConfigMap (at most 1 MiB).",
    )


class NodeAccess(ConfigModel):
    """How the controller reaches a node: ssh with verified host keys, and the commands for each repair step."""

    ssh_user: str = "root"
    addresses: dict[NodeName, str] = Field(
        default_factory=dict,
        description="Where ssh reaches a node whose name does not resolve (node -> address or host name), e.g. "
        "Kubernetes nodes named by their provider.",
    )
    ssh_key: Path | None = None
    known_hosts: Path | None = None
    connect_timeout_s: float = 5.0
    # Templates: {node} (and {gpu}) are filled in shell-quoted (ha_ops.util.command_template).
    reset_gpu_command: GpuCommand = "nvidia-smi -r -i {gpu}"
    reboot_command: NodeCommand = "systemctl reboot"
    power_cycle_command: NodeCommand | None = Field(
        None,
        description="Run on the controller's host when the node does not answer ssh (its BMC), e.g. "
        "'ipmitool -I lanplus -H {node}-bmc -U admin -E chassis power cycle'.",
    )
    validate_command: NodeCommand = "ha-ops health check"
    command_timeout_s: float = 120.0
    boot_wait_s: float = Field(600.0, ge=0, description="After a reboot, how long the node may take to answer ssh.")


class MonitoringWatch(ConfigModel):
    """The controller watches the monitoring it otherwise depends on: a dead man's switch for Prometheus."""

    # Base URLs (http or https, a host; no query or credentials), as the agents' controller URLs: an address that is
    # no URL was accepted and only failed at every poll, as "monitoring down" (issue 44, finding 8)
    prometheus_url: BaseUrl = Field(description="Prometheus base URL; `/-/healthy` is polled.")
    alertmanager_url: BaseUrl | None = Field(None, description="Where HaOpsPrometheusDown is raised.")
    client: MonitoringClient | None = Field(
        None,
        description="The controller's certificate and the monitoring password, where Prometheus and "
        "Alertmanager ask for them (https URLs).",
    )
    poll_s: float = Field(2.0, gt=0)
    fail_after: int = Field(2, ge=1, description="Failed polls in a row before monitoring counts as down.")

    @model_validator(mode="after")
    def _https_needs_a_certificate(self) -> MonitoringWatch:
        secure = [u for u in (self.prometheus_url, self.alertmanager_url) if u and u.startswith("https://")]
        if secure and (self.client is None or self.client.tls is None):
            raise ValueError(f"{secure[0]}: an https URL needs client.tls (the controller's certificate)")
        return self


class PoolConfig(ConfigModel):
    nodes: list[NodeName]
    spares: list[NodeName] = Field(default_factory=list)


class StateSnapshots(ConfigModel):
    """The last good states kept beside the state (remediation/snapshots.py), for `ha-ops controller state restore`:
    a ring of `keep` documents, each overwritten in turn (the controller may not delete a ConfigMap), written by the
    leader from a state it has just written, when its term begins and then at most every `every_s`."""

    keep: int = Field(10, ge=0, le=100, description="Snapshots kept (the oldest overwritten). 0: none are taken.")
    every_s: float = Field(60.0, gt=0, description="At most one snapshot this often (and one when a term begins).")


class KubernetesLeaseConfig(ConfigModel):
    """The leader lease as a coordination.k8s.io Lease (remediation/k8s_lease.py) instead of a file in state_dir."""

    namespace: str = Field("ha-ops", min_length=1)
    name: str = Field("ha-ops-controller", min_length=1)
    label_pod: bool = Field(
        False,
        description="While it leads, label this controller's own pod (named by its id, in this namespace) "
        "ha-ops.io/leader=true: the Kubernetes layer's Service selects that label, so the agents' reports reach the "
        "leader, not a standby that answers 503.",
    )


class KubernetesStateConfig(ConfigModel):
    """The shared state (state, audit log, views) as ConfigMaps (remediation/k8s_documents.py) instead of files in
    state_dir: the controller pods need no shared volume and keep a read-only root filesystem."""

    namespace: str = Field("ha-ops", min_length=1)
    prefix: str = Field("ha-ops-controller", min_length=1, max_length=200, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


class KubernetesConfig(ConfigModel):
    """The Kubernetes API, for the scheduler (`scheduler: kubernetes`) and/or the lease."""

    kubeconfig: Path | None = Field(None, description="None: the pod's service account (or $KUBECONFIG).")
    lease: KubernetesLeaseConfig | None = Field(None, description="None: the file lease in state_dir.")
    state: KubernetesStateConfig | None = Field(None, description="None: state, audit log and views in state_dir.")
    eviction_timeout_s: float = Field(
        30.0, gt=0, description="How long an eviction a PodDisruptionBudget refuses is retried."
    )
    default_drain_policy: Literal["immediate", "allow-completion", "delete-after-timeout"] = Field(
        "immediate", description="For namespaces without the annotation ha-ops.io/drain-policy."
    )


class ControllerConfig(ConfigModel):
    id: str = Field(min_length=1, description="This instance's name, unique among the controllers.")
    listen_address: str = "0.0.0.0"
    port: int = Field(8800, ge=1, le=65535)
    api: Limits = Field(default_factory=Limits, description="What one caller may hold of the API server: deadlines "
                        "and caps per address and per certificate (ha_ops.util.http_front).")  # fmt: skip
    peers: list[BaseUrl] = Field(default_factory=list, description="Other controllers' base URLs (to name the leader).")
    state_dir: Path | None = Field(
        None,
        description="Shared storage both controllers see: lease, state, audit log. Not needed when the lease and "
        "the state are kept in the Kubernetes API (kubernetes.lease and kubernetes.state).",
    )
    scheduler: Literal["slurm", "kubernetes"] = Field(
        "slurm", description="Whose nodes and jobs the controller acts on (schedulers/); `partition` names the pool."
    )
    kubernetes: KubernetesConfig | None = None
    tls: TlsFiles | None = Field(
        None,
        description="Serve the API over mutual TLS with these files: every caller presents a certificate the CA "
        "signed, and its roles decide what it may do (docs/security.md). Required unless `insecure` is true.",
    )
    insecure: bool = Field(
        False,
        description="Without tls: serve plain HTTP, unauthenticated (anyone who reaches the port may report, mark "
        "nodes repaired or drain them). Logged as a warning at every start; for a lab or a trial only.",
    )
    certificates: CertificatesConfig | None = Field(
        None,
        description="Issue certificates with an issuing CA (an intermediate of the cluster CA): renewals for "
        "callers presenting a valid certificate, agent pods' enrollment by token, this controller's own serving "
        "certificate (ha_ops.remediation.certificates). Needs tls. None: certificates come from elsewhere only.",
    )
    audit_key_file: Path | None = Field(
        None,
        description="The key (32 bytes or more) that makes the audit chain an HMAC chain: on each controller's own "
        "disk (or a Kubernetes Secret), the same on both, never on the shared storage with the log. None: a plain "
        "SHA-256 chain, which shows accidents but not an attacker who can write the log.",
    )
    audit_sink: AuditSinkConfig | None = Field(
        None,
        description="Ship every audit entry to a central append-only sink (syslog over TLS, e.g. rsyslog): a copy "
        "that outlives the local log (`ha-ops audit verify --shipped`). None: the log stays where it is written.",
    )
    lease_ttl_s: float = Field(3.0, gt=0, le=3600)
    lease_renew_s: float = Field(1.0, gt=0, le=3600)
    lease_margin_s: float = Field(0.5, ge=0, le=3600)
    heartbeats: beats.Heartbeats = Field(default_factory=beats.Heartbeats, description="How often the agents are "
                                         "asked to beat, scaled to the fleet (remediation/heartbeats.py).")  # fmt: skip
    blind_after_s: float = Field(
        beats.DEFAULT_BLIND_AFTER_S,
        gt=0,
        description="A controller that has heard no agent for this long while another controller has is blind: as "
        "the leader it steps down, as the standby it does not take the lease. Over the agents' heartbeat, so that a "
        "leader that can hear agents hears every live one within it (unset: 1.5 heartbeats, 15 s at least).",
    )
    tick_s: float = Field(0.2, gt=0)
    state_snapshots: StateSnapshots = StateSnapshots()
    parallel_actions: int = Field(
        16,
        ge=1,
        le=256,
        description="Scheduler actions (drains, returns, spares) carried out at once, on different "
        "nodes (one node's run in order).",
    )
    parallel_repairs: int = Field(
        16,
        ge=1,
        le=256,
        description="Repairs on nodes (resets, reboots, validations) carried out at once, in slots "
        "of their own: a validation waiting for a node to boot never holds up a drain.",
    )
    partition: str = "gpu"
    pools: dict[str, PoolConfig]
    safety: Safety = Safety()
    ladder: Ladder = Ladder()
    bursts: Bursts = Bursts()
    lemon: Lemon = Lemon()
    fleet: Fleet = Fleet()
    access: NodeAccess = NodeAccess()
    slurm_timeout_s: float = 10.0
    node_poll_s: float = Field(2.0, gt=0, description="How often Slurm's node states are read (lost nodes).")
    agent_silence_s: float = Field(
        beats.DEFAULT_AGENT_SILENCE_S,
        gt=0,
        description="No agent report for this long, and the scheduler finds the node not responding: it is lost "
        "(unset: 3 heartbeats, 30 s at least).",
    )
    observer_quorum: float = Field(
        0.5,
        ge=0,
        lt=1,
        description="Silence counts only while the leader's view is whole: more than this share of the nodes it "
        "expects to hear were heard within blind_after_s, and more than this share respond to the scheduler. A "
        "partition of the control plane blinds both observers at once (remediation/observers.py).",
    )
    failure_domains: dict[str, list[NodeName]] = Field(
        default_factory=dict,
        description="Failure domain (a rack, a leaf) -> its nodes. A node whose domain is mostly silent too is not "
        "found lost on its own: a silent domain is a partition of the domain or its failure.",
    )
    monitoring: MonitoringWatch | None = None
    slurm_fence: SlurmFence = SlurmFence()
    report_clock_skew_s: float = Field(
        30.0,
        gt=0,
        le=3600,
        description="How far a node's clock may be from the controller's. A report sent (its `sent_at`) more than "
        "this before the last one accepted from its node is stale whatever agent run sent it (a replayed report of "
        "an earlier run drains no node), and one sent more than this in the future is refused.",
    )
    report_fresh_s: float = Field(
        30.0, gt=0, description="An agent report younger than this outranks an Alertmanager alert about the node."
    )

    def node_names(self) -> set[str]:
        """Every node of every pool, spares included."""
        return {n for pool in self.pools.values() for n in (*pool.nodes, *pool.spares)}

    @model_validator(mode="before")
    @classmethod
    def _windows_for_the_fleet(cls, data: Any) -> Any:
        return beats.default_windows(data)

    @property
    def agent_heartbeat_s(self) -> float:
        """The heartbeat the agents are asked for, in the answers to their reports."""
        return beats.heartbeat_s(beats.fleet_size(self.pools), self.heartbeats)

    @property
    def node_states_poll_s(self) -> float:
        """How often every node's scheduler state is read (remediation/heartbeats.py: slower in a large fleet)."""
        return max(self.node_poll_s, self.agent_heartbeat_s / beats.POLLS_PER_HEARTBEAT)

    @model_validator(mode="after")
    def _state_somewhere(self) -> ControllerConfig:
        k8s = self.kubernetes
        if self.state_dir is None and (k8s is None or k8s.lease is None or k8s.state is None):
            raise ValueError("state_dir is required unless kubernetes.lease and kubernetes.state keep it in the API")
        if self.lemon.enabled and self.fleet.max_incidents_per_node < self.lemon.incidents:
            raise ValueError(
                f"fleet.max_incidents_per_node ({self.fleet.max_incidents_per_node}) is under lemon.incidents "
                f"({self.lemon.incidents}): a lemon could never be found"
            )
        if self.certificates is not None and self.tls is None:
            raise ValueError("certificates: needs tls (certificates are issued and renewed over the TLS API)")
        enrolling = self.certificates is not None and self.certificates.enrollment is not None
        if enrolling and self.kubernetes is None:
            raise ValueError("certificates.enrollment: needs kubernetes (tokens are reviewed by its API server)")
        if problems := beats.window_problems(self.blind_after_s, self.agent_silence_s, self.agent_heartbeat_s,
                                             beats.fleet_size(self.pools)):  # fmt: skip
            raise ValueError("; ".join(problems))
        if self.agent_silence_s <= self.blind_after_s:
            # Silence counts from when the leader's view became whole again: this is its settle window after a mend.
            raise ValueError(f"agent_silence_s ({self.agent_silence_s:g}) must be over blind_after_s "
                             f"({self.blind_after_s:g}), the window in which every live agent is heard")  # fmt: skip
        listed: dict[str, str] = {}  # node -> where it was listed first (a node twice: counted twice everywhere)
        for name, pool in self.pools.items():
            for kind, nodes in (("nodes", pool.nodes), ("spares", pool.spares)):
                for node in nodes:
                    where = f"pools.{name}.{kind}"
                    if (first := listed.setdefault(node, where)) is not where:  # (identity: once in one list too)
                        raise ValueError(f"{where}: {node} is listed twice (also in {first})")
        renew_by = self.lease_ttl_s - self.lease_margin_s
        if not 0 < self.lease_renew_s < renew_by:
            raise ValueError(f"lease_renew_s ({self.lease_renew_s:g}) must be under lease_ttl_s ({self.lease_ttl_s:g}) "
                             f"less lease_margin_s ({self.lease_margin_s:g}): a leader renews before its lease "
                             "can run out")  # fmt: skip
        placed: dict[str, str] = {}
        for domain, members in self.failure_domains.items():
            for node in members:
                if placed.setdefault(node, domain) != domain:
                    raise ValueError(f"failure_domains: {node} is in both {placed[node]} and {domain}")
        key, shared = self.audit_key_file, self.state_dir
        if key is not None and shared is not None and key.resolve().is_relative_to(shared.resolve()):
            raise ValueError(f"audit_key_file: {key} is on the shared storage (state_dir {shared}), beside the log")
        return self


def load_controller_config(path: Path) -> ControllerConfig:
    """A controller's config file. Secure by default: a file without tls must say `insecure: true` (checked here,
    where a deployed controller's config is read, rather than in the model, which tests and benchmarks also build
    in code for logic that has nothing to do with how the API is served)."""
    config = load_model(path, ControllerConfig)
    if config.tls is None and not config.insecure:
        raise SpecError(str(path), [f"tls: {INSECURE_WITHOUT_TLS}"])
    return config
