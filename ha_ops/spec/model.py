"""The cluster model: one ClusterSpec, read from cluster.yaml, from which every renderer works.

Field-level rules live on the fields; rules that relate fields to each other run in `_check_rules` so that
every problem in a spec is reported at once, each naming its field.

Over 400 lines because the spec is one document: its sections' models and the rules across them read together
(what a pool, a failure domain and the fabric must agree on); what is not the model lives apart (strings.py: what
no spec string may hold; layout.py: where each host goes).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from ipaddress import IPv4Address, IPv4Network
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints, model_validator
from pydantic_core import PydanticCustomError

from ha_ops.cluster.power import BmcConfig
from ha_ops.spec.strings import FIELD_PROBLEMS, string_problems

HostName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9-]{0,30}$")]
Port = Annotated[int, Field(ge=1024, le=65535)]
# Names the layout gives to fabric switches; hosts may not take them.
SWITCH_NAME = re.compile(r"(spine|leaf)\d+")


def _written_as_text(value: object) -> object:
    """Addresses and networks are written as text: ipaddress also takes ints and bytes (`true` -> 0.0.0.1)."""
    if isinstance(value, int | float | bytes):
        raise PydanticCustomError("string_type", "Input should be a string, got {type}", {"type": type(value).__name__})
    return value


def _exact_int(value: object) -> object:
    """Literal[1] alone also accepts true and 1.0."""
    if isinstance(value, bool | float):
        raise PydanticCustomError(
            "int_type", "Input should be a valid integer, got {type}", {"type": type(value).__name__}
        )
    return value


Address = Annotated[IPv4Address | None, Field(strict=False), BeforeValidator(_written_as_text)]
Cidr = Annotated[IPv4Network, Field(strict=False), BeforeValidator(_written_as_text)]


class StrictModel(BaseModel):
    """Unknown keys and wrong types are errors: a typo in a spec must never be silently ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class FailureDomain(StrictModel):
    """A place that fails together: one rack on one power feed, in one zone."""

    name: HostName
    zone: str
    rack: str
    power_feed: str
    leaf: int | None = Field(default=None, ge=1, description="Leaf switch (1-based) the domain's hosts attach to")
    subnet: Cidr | None = Field(
        default=None,
        description="An existing cluster's: the subnet this domain's hosts already have addresses in (each host then "
        "names its address). Without it the domain's hosts take addresses from its leaf's /24 of network.host_cidr.",
    )


class Host(StrictModel):
    name: HostName
    domain: HostName
    address: Address = None
    bmc: BmcConfig | None = Field(default=None, description="Its BMC (Redfish or IPMI): the inventory's ha_ops_bmc.")


class PoolNode(Host):
    """A node of an existing cluster, by its own name and address."""

    spare: bool = Field(default=False, description="Held out of the main partition until a node of the pool fails.")


class Controllers(StrictModel):
    """Slurm controller hosts in order: the first is the primary, the second the backup."""

    ha: bool = True
    hosts: list[Host] = Field(min_length=1)


class NodePool(StrictModel):
    """GPU nodes of one kind: `count` nodes named <name><n> (n from 1), placed round-robin over `domains`, the last
    `spare_fraction` of them spares; or an existing cluster's `nodes`, each with its own name, domain, address and
    BMC, spares marked (`count` and `domains` then follow from the list)."""

    name: HostName
    count: int = Field(ge=1, le=100_000)
    gpus_per_node: int = Field(ge=1, le=16)
    gpu_model: str
    spare_fraction: float = 0.0
    domains: list[HostName]
    # Bounded by what any one machine has (64 Ki CPUs, 64 TiB): 2**63 was accepted and written into slurm.conf
    cpus_per_node: int = Field(default=16, ge=1, le=65_536)
    memory_mb: int = Field(default=65536, ge=256, le=64 * 2**20)
    nodes: list[PoolNode] = Field(default_factory=list, max_length=100_000)

    @model_validator(mode="before")
    @classmethod
    def _from_nodes(cls, data: object) -> object:
        """With `nodes`, `count` and `domains` may be left out: the list says them (a stated one must agree)."""
        if isinstance(data, dict) and isinstance(data.get("nodes"), list) and data["nodes"]:
            listed = [n for n in data["nodes"] if isinstance(n, dict)]
            data = {"count": len(data["nodes"]), **data}
            if "domains" not in data:
                data["domains"] = list(dict.fromkeys(n["domain"] for n in listed if isinstance(n.get("domain"), str)))
        return data

    @property
    def spare_count(self) -> int:
        if self.nodes:
            return sum(n.spare for n in self.nodes)
        return math.floor(self.count * self.spare_fraction + 1e-9)

    def node_names(self) -> list[str]:
        if self.nodes:
            return [n.name for n in self.nodes]
        return [f"{self.name}{i}" for i in range(1, self.count + 1)]

    def node_domains(self) -> list[str]:
        """Each node's failure domain, in node order (none for a pool with no domains: an unvalidated spec)."""
        if self.nodes:
            return [n.domain for n in self.nodes]
        return [self.domains[k % len(self.domains)] for k in range(self.count)] if self.domains else []


class Fabric(StrictModel):
    """Leaf-spine fabric with eBGP: every leaf has one uplink to every spine (`uplinks_per_leaf` == `spines`)."""

    spines: int = Field(ge=1, le=64)
    leaves: int = Field(ge=1, le=250)
    uplinks_per_leaf: int = Field(ge=1, le=64)
    bfd_interval_ms: int = Field(default=100, ge=10, le=10_000)
    bfd_multiplier: int = Field(default=3, ge=2, le=255)
    ecmp: bool = True
    switch_radix: int = Field(default=64, ge=4)


class Network(StrictModel):
    """Address pools: one /24 per leaf from `host_cidr`, one /31 per fabric link from `fabric_cidr`."""

    host_cidr: Cidr = IPv4Network("10.77.0.0/16")
    fabric_cidr: Cidr = IPv4Network("10.76.0.0/16")


class Storage(StrictModel):
    """Shared storage for Slurm state and checkpoints. `shared-dir` is the lab's single directory (no replicas).

    `moosefs`: `hosts` are the chunkservers (each stores up to `chunkserver_capacity_mb`), `master` serves the
    metadata and `metalogger` keeps a copy of it and becomes the master when the master is lost. Master and
    metalogger share a leaf, so the master's service address can move between them.
    """

    kind: Literal["shared-dir", "moosefs"]
    replicas: int = Field(default=1, ge=1, le=9)
    hosts: list[Host] = Field(default_factory=list)
    master: Host | None = None
    metalogger: Host | None = None
    chunkserver_capacity_mb: int = Field(default=512, ge=128, le=1_048_576)

    def all_hosts(self) -> list[Host]:
        return [h for h in (self.master, self.metalogger) if h is not None] + list(self.hosts)


class SlurmScheduler(StrictModel):
    cluster_name: HostName = "ha-ops"
    partition: HostName = "gpu"
    # 4 s is the practical floor: slurmctld busy-loops below it (shared/LAB-NOTES.md). Slurm's default is 120 s.
    slurmctld_timeout_s: int = Field(default=5, ge=4, le=3600)
    # Slurm's default is 300 s.
    slurmd_timeout_s: int = Field(default=5, ge=2, le=3600)
    # How long a client (and `scontrol ping`) waits on a controller that does not answer before it tries the next:
    # part of every failover's time. Slurm's default is 10 s.
    message_timeout_s: int = Field(default=10, ge=2, le=100)


class Schedulers(StrictModel):
    slurm: SlurmScheduler | None = None


class Monitoring(StrictModel):
    host: Host
    prometheus_port: Port = 9090
    alertmanager_port: Port = 9093
    agent_port: Port = 9426
    scrape_interval_s: float = Field(default=1.0, gt=0, le=300)


class Remediation(StrictModel):
    """The remediation controller: one instance on each controller host, with these safety limits."""

    port: Port = 8800
    dry_run: bool = False
    breaker_max_nodes: int = Field(default=2, ge=1)
    breaker_max_fraction: float = Field(default=0.5, gt=0, le=1)
    breaker_window_s: float = Field(default=600.0, gt=0, le=7 * 86_400)  # (a week; 1e308 s was accepted)
    min_healthy_fraction: float = Field(default=0.5, ge=0, le=1)
    max_cordons_per_minute: int = Field(default=10, ge=1)
    opt_out: list[HostName] = Field(default_factory=list)
    # Whose nodes and jobs the controllers act on: Slurm's, or (with a `kubernetes` section) Kubernetes', their
    # lease and state then kept in the API. Game days and runbook checks judge the same scheduler.
    scheduler: Literal["slurm", "kubernetes"] = "slurm"
    # The controllers' API over mutual TLS, every caller with a certificate of the cluster's CA (docs/security.md).
    # The lab issues them from its own CA; on a cluster the ha_ops_pki role, or the controllers' own issuer. Secure
    # by default: plain HTTP (tls: false) lets anyone on the network report, mark nodes repaired or drain them, so it
    # needs `insecure: true` as well, and is refused where the spec says `production: true`.
    tls: bool = True
    insecure: bool = False

    @model_validator(mode="after")
    def _plain_http_only_when_asked(self) -> Remediation:
        if not self.tls and not self.insecure:
            raise ValueError(
                "tls: false serves the controllers' API over plain HTTP (anyone on the network "
                "may report, mark nodes repaired or drain them); set insecure: true to mean it"
            )
        return self


class Firewall(StrictModel):
    """Host firewalls (nftables, ha_ops.security.firewall): each host accepts only the flows the cluster needs
    between its hosts' roles (Slurm, ssh, metrics, storage, the ha-ops API; with `kubernetes` the kubelet's, the
    API server's, the pod network's and the pods' own), and drops the rest."""

    admin_sources: list[Cidr] = Field(
        default_factory=list,
        description="Where operators come from (bastions, admin networks, where Ansible runs): ssh and the APIs.",
    )


class Kubernetes(StrictModel):
    """A Kubernetes control plane for the cluster's GPU nodes. In the lab: etcd, kube-apiserver,
    kube-controller-manager and kube-scheduler on loopback, and KWOK standing in for the kubelets (the GPU nodes are
    registered as Nodes it keeps Ready, and pods bound to them become Running)."""

    api_port: Port = 16443
    etcd_port: Port = 12379
    service_cidr: Cidr = IPv4Network("10.96.0.0/16")
    # Lab only: how many extra KWOK GPU nodes to register beside the spec's own (scale tests).
    extra_kwok_nodes: int = Field(default=0, ge=0, le=30_000)
    # Lab only: hosts of the spec that run a real kubelet with containerd, so pods there run as real containers
    # (ha_ops/lab/kubelets.py). A GPU node named here registers itself instead of through KWOK, with its fake GPUs
    # advertised as `nvidia.com/gpu`; it is tainted so that only the agent, not the lab's pretend workloads, runs there.
    kubelet_nodes: list[HostName] = Field(default_factory=list, max_length=8)
    # For the host firewalls (ha_ops.security.firewall): the pods' addresses (a routed pod network: pods reach the
    # hosts' services from these; the lab's real pods are in 10.245.0.0/16, KWOK's in 10.244.0.0/16), the hosts that
    # run kube-apiserver (empty: none of the spec's hosts, e.g. a managed control plane, or the lab's on the
    # operator's machine, reached through admin_sources), and the ports the pod network's own traffic needs between
    # nodes, as `PORT/PROTO` or `LOW-HIGH/PROTO` (e.g. 8472/udp for VXLAN, 179/tcp for Calico's BGP; none for a
    # network routed without an overlay, as the lab's).
    pod_cidr: Cidr = IPv4Network("10.244.0.0/15")
    api_server_hosts: list[HostName] = Field(default_factory=list, max_length=16)
    pod_network_ports: list[Annotated[str, StringConstraints(pattern=r"^\d{1,5}(-\d{1,5})?/(tcp|udp)$")]] = Field(
        default_factory=list, max_length=32
    )


class Images(StrictModel):
    """Container images of the ha-ops services on Kubernetes (the agent DaemonSet, the remediation controller).

    Written as references; the HA policy (ha_ops/iac/policy.py, rule HA-IMAGE-DIGEST) refuses any that is not
    pinned by digest (`name@sha256:<64 hex>`) before anything is built: a tag can move under a running cluster.
    """

    agent: str = Field(min_length=1)
    controller: str = Field(min_length=1)


class ClusterSpec(StrictModel):
    version: Annotated[Literal[1], BeforeValidator(_exact_int)] = 1
    name: HostName
    production: bool = False
    failure_domains: list[FailureDomain] = Field(min_length=1)
    network: Network = Network()
    fabric: Fabric
    controllers: Controllers
    pools: list[NodePool] = Field(min_length=1)
    storage: Storage | None = None
    schedulers: Schedulers
    monitoring: Monitoring
    remediation: Remediation | None = None
    firewall: Firewall | None = None
    kubernetes: Kubernetes | None = None
    images: Images | None = None

    @model_validator(mode="after")
    def _no_template_syntax(self) -> ClusterSpec:
        """No string of the spec holds template syntax or a control character: any may reach the inventory. (The
        spec only: other models may carry templates on purpose, as a rollout site's driver_args does.)"""
        problems = [p for name, value in self for p in string_problems(value, name)]
        if problems:  # (spec.load.validation_problems reads it as one line per field)
            raise PydanticCustomError(FIELD_PROBLEMS, "{problems}", {"problems": "\n".join(problems)})
        return self

    @model_validator(mode="after")
    def _check_rules(self) -> ClusterSpec:
        problems = _rule_problems(self)
        if problems:
            raise ValueError("\n".join(problems))
        return self

    # Queries used by every renderer.
    @property
    def gpu_partition(self) -> str:
        """Where the GPU nodes' work runs: the Slurm partition, which is also their `ha-ops.io/pool` on Kubernetes."""
        return self.schedulers.slurm.partition if self.schedulers.slurm else "gpu"

    @property
    def scheduler(self) -> Literal["slurm", "kubernetes"]:
        """The scheduler whose nodes the remediation controllers act on, and so the one game days judge."""
        return self.remediation.scheduler if self.remediation is not None else "slurm"

    def domain(self, name: str) -> FailureDomain:
        return next(d for d in self.failure_domains if d.name == name)

    def host_names(self) -> list[str]:
        names = [h.name for h in self.controllers.hosts]
        for pool in self.pools:
            names += pool.node_names()
        names.append(self.monitoring.host.name)
        if self.storage:
            names += [h.name for h in self.storage.all_hosts()]
        return names


def _listed_node_problems(pool: NodePool, where: str, domains: set[str]) -> list[str]:
    """An existing cluster's pool: its list agrees with `count` and `domains`, its domains exist, spares are marked
    (not a fraction), and every node has an address."""
    if not pool.nodes:
        return []
    problems = []
    if pool.count != len(pool.nodes):
        problems.append(f"{where}.count: {pool.count}, but {len(pool.nodes)} nodes are listed (leave count out)")
    if pool.spare_fraction:
        problems.append(f"{where}.spare_fraction: a pool that lists its nodes marks its spares (nodes[k].spare)")
    for k, node in enumerate(pool.nodes):
        if node.domain not in domains:
            problems.append(f"{where}.nodes[{k}].domain: unknown failure domain {node.domain!r}")
        elif node.domain not in pool.domains:
            problems.append(f"{where}.nodes[{k}].domain: {node.domain!r} is not one of the pool's domains")
        if node.address is None:
            problems.append(f"{where}.nodes[{k}].address: a listed node needs its address (the one it has)")
    return problems


def _rule_problems(spec: ClusterSpec) -> list[str]:
    problems: list[str] = []
    domains = {d.name for d in spec.failure_domains}

    for name, n in Counter(d.name for d in spec.failure_domains).items():
        if n > 1:
            problems.append(f"failure_domains: duplicate name {name!r}")
    for i, dom in enumerate(spec.failure_domains):
        if dom.leaf is not None and dom.leaf > spec.fabric.leaves:
            problems.append(
                f"failure_domains[{i}].leaf: leaf {dom.leaf} does not exist (fabric.leaves is {spec.fabric.leaves})"
            )

    named_hosts: list[tuple[str, Host]] = [(f"controllers.hosts[{i}]", h) for i, h in enumerate(spec.controllers.hosts)]
    named_hosts.append(("monitoring.host", spec.monitoring.host))
    if spec.storage:
        named_hosts += [(f"storage.hosts[{i}]", h) for i, h in enumerate(spec.storage.hosts)]
        named_hosts += [
            (f"storage.{role}", h) for role in ("master", "metalogger") if (h := getattr(spec.storage, role))
        ]
    for where, host in named_hosts:
        if host.domain not in domains:
            problems.append(f"{where}.domain: unknown failure domain {host.domain!r}")

    for name, n in Counter(spec.host_names()).items():
        if n > 1:
            problems.append(f"hosts: duplicate host name {name!r} (pool nodes are named <pool><n>)")
    for name in spec.host_names():
        if SWITCH_NAME.fullmatch(name):
            problems.append(f"hosts: {name!r} is reserved for a fabric switch")

    ctl = spec.controllers
    if ctl.ha and len(ctl.hosts) < 2:
        problems.append(
            f"controllers.hosts: HA is requested (controllers.ha) but {len(ctl.hosts)} host is given; need 2"
        )
    if len(ctl.hosts) > 2:
        problems.append(f"controllers.hosts: {len(ctl.hosts)} hosts given; Slurm takes a primary and one backup")
    if ctl.ha and len(ctl.hosts) >= 2 and ctl.hosts[0].domain == ctl.hosts[1].domain:
        problems.append(
            f"controllers.hosts: primary and backup share failure domain {ctl.hosts[0].domain!r}; HA needs two domains"
        )

    for name, n in Counter(p.name for p in spec.pools).items():
        if n > 1:
            problems.append(f"pools: duplicate pool name {name!r}")
    for i, pool in enumerate(spec.pools):
        where = f"pools[{i}]"
        problems += _listed_node_problems(pool, where, domains)
        if not 0.0 <= pool.spare_fraction <= 0.5:
            problems.append(f"{where}.spare_fraction: {pool.spare_fraction} is outside 0-0.5")
        unknown = [d for d in pool.domains if d not in domains]
        if unknown:
            problems.append(f"{where}.domains: unknown failure domain(s) {', '.join(map(repr, unknown))}")
        spread = set(pool.node_domains()) if pool.nodes else set(pool.domains)
        if len(spread) < 2:
            problems.append(f"{where}.domains: a pool must spread over >= 2 failure domains, got {len(spread)}")
        elif pool.count < 2:
            problems.append(f"{where}.count: 1 node cannot spread over >= 2 failure domains")

    if spec.production and spec.remediation is not None and not spec.remediation.tls:
        problems.append("remediation.insecure: plain HTTP is refused where production is true (remediation.tls)")

    if spec.kubernetes is not None:
        for i, name in enumerate(spec.kubernetes.kubelet_nodes):
            if name not in spec.host_names():
                problems.append(f"kubernetes.kubelet_nodes[{i}]: {name!r} is not a host of the spec")
        for name, n in Counter(spec.kubernetes.kubelet_nodes).items():
            if n > 1:
                problems.append(f"kubernetes.kubelet_nodes: {name!r} is named twice")
        for i, name in enumerate(spec.kubernetes.api_server_hosts):
            if name not in spec.host_names():
                problems.append(f"kubernetes.api_server_hosts[{i}]: {name!r} is not a host of the spec")
        for i, entry in enumerate(spec.kubernetes.pod_network_ports):
            low, _, high = entry.split("/")[0].partition("-")
            if not 1 <= int(low) <= int(high or low) <= 65535:
                problems.append(f"kubernetes.pod_network_ports[{i}]: {entry!r} is not a port or an ascending range")

    fab = spec.fabric
    if fab.uplinks_per_leaf > fab.spines:
        problems.append(f"fabric.uplinks_per_leaf: {fab.uplinks_per_leaf} uplinks but only {fab.spines} spines")
    elif fab.uplinks_per_leaf < fab.spines:
        # With fewer uplinks than spines two leaves can end up sharing no spine: the fabric splits.
        problems.append(
            f"fabric.uplinks_per_leaf: every leaf needs one uplink to each of the {fab.spines} spines, "
            f"got {fab.uplinks_per_leaf}"
        )
    if fab.ecmp and fab.uplinks_per_leaf < 2:
        problems.append("fabric.uplinks_per_leaf: ECMP (fabric.ecmp) needs >= 2 uplinks per leaf")

    net = spec.network
    if net.host_cidr.overlaps(net.fabric_cidr):
        problems.append(f"network: host_cidr {net.host_cidr} and fabric_cidr {net.fabric_cidr} overlap")
    for field in ("host_cidr", "fabric_cidr"):
        cidr: IPv4Network = getattr(net, field)
        if not cidr.is_private or cidr.overlaps(IPv4Network("127.0.0.0/8")):
            problems.append(f"network.{field}: {cidr} must be a private range outside loopback")
    if net.host_cidr.prefixlen > 24 or 2 ** (24 - net.host_cidr.prefixlen) < fab.leaves:
        problems.append(f"network.host_cidr: {net.host_cidr} has fewer /24 subnets than fabric.leaves ({fab.leaves})")
    if net.fabric_cidr.num_addresses < 2 * fab.leaves * fab.uplinks_per_leaf:
        problems.append(
            f"network.fabric_cidr: {net.fabric_cidr} is too small for {fab.leaves * fab.uplinks_per_leaf} links"
        )

    mon = spec.monitoring
    for port, n in Counter([mon.prometheus_port, mon.alertmanager_port, mon.agent_port]).items():
        if n > 1:
            problems.append(f"monitoring: port {port} is used twice (prometheus, alertmanager and agent ports collide)")

    if spec.storage:
        st = spec.storage
        if st.kind == "shared-dir" and (st.replicas != 1 or st.all_hosts()):
            problems.append("storage: kind shared-dir has no storage hosts and exactly 1 replica")
        if st.kind == "moosefs":
            if st.replicas > len(st.hosts):
                problems.append(
                    f"storage.replicas: {st.replicas} replicas need >= {st.replicas} storage hosts, got {len(st.hosts)}"
                )
            for role in ("master", "metalogger"):
                if getattr(st, role) is None:
                    problems.append(f"storage.{role}: kind moosefs needs a {role} host")

    if spec.remediation is not None:
        gpu_nodes = {name for pool in spec.pools for name in pool.node_names()}
        for name in spec.remediation.opt_out:
            if name not in gpu_nodes:
                problems.append(f"remediation.opt_out: {name!r} is not a GPU node of any pool")
        if spec.remediation.scheduler == "kubernetes" and spec.kubernetes is None:
            problems.append("remediation.scheduler: kubernetes needs a kubernetes section")

    if spec.schedulers.slurm is None:
        problems.append("schedulers: no scheduler configured (schedulers.slurm)")

    if not problems:
        # Address collisions need a consistent spec to compute the layout.
        from ha_ops.spec.layout import layout_problems

        problems += layout_problems(spec)
    return problems
