"""Host firewalls from the cluster spec (pure): the flows a cluster needs between its hosts' roles, each host's
rules (who may reach which of its ports), and the nftables ruleset that enforces them: everything else arriving is
dropped and counted. The lab loads the ruleset into each node's namespace; on a cluster the `host_firewall` role
installs it, rendered into each host's variables by `ha-ops inventory` (one renderer for both).

Only what arrives is filtered: replies to a host's own connections are accepted as established, and what a host
sends is not limited (its peers' firewalls decide)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from ipaddress import IPv4Network

from ha_ops.spec.layout import Layout, NodeLayout
from ha_ops.spec.model import ClusterSpec

SSH = 22
SLURMCTLD, SLURMD = 6817, 6818
SRUN_PORTS = (60001, 60100)  # SrunPortRange: where slurmd reaches back to an srun (the lab's and the role's)
AUDIT_SINK = 6514  # syslog over TLS
MOOSEFS_MASTER = (9419, 9421)  # metalogger, chunkservers, clients
MOOSEFS_CHUNKSERVER = 9422
STORAGE_EXPORTER = 9425

KUBELET = 10250

ANY_HOST = "*"  # a flow to (or from) every host of the cluster
ADMIN = "admin"  # the spec's firewall.admin_sources
PODS = "pods"  # the spec's kubernetes.pod_cidr: pods reaching hosts' services over a routed pod network
# Roles a host has on Kubernetes, beside its spec roles (roles_of).
K8S_NODE = "kubernetes-node"  # runs a kubelet: every GPU node, the lab's kubelet nodes, the API servers' hosts
K8S_API = "kubernetes-api"  # runs kube-apiserver (kubernetes.api_server_hosts)


@dataclass(frozen=True)
class Flow:
    """Hosts of `sources` (roles, ANY_HOST or ADMIN) may open connections to `ports` on hosts of role `to`."""

    name: str
    to: str
    sources: tuple[str, ...]
    ports: tuple[int, int]
    why: str
    proto: str = "tcp"


@dataclass(frozen=True)
class Rule:
    """One accepted flow on one host: from these addresses (hosts or networks) to these ports."""

    name: str
    sources: tuple[str, ...]
    ports: tuple[int, int]
    proto: str = "tcp"

    def ports_text(self) -> str:
        low, high = self.ports
        return str(low) if low == high else f"{low}-{high}"


def _one(port: int) -> tuple[int, int]:
    return port, port


def flows(spec: ClusterSpec) -> list[Flow]:
    """Every flow the cluster needs, from what its spec runs."""
    out = [
        Flow("ssh", ANY_HOST, ("controller", "storage_metalogger", ADMIN), _one(SSH),
             "operators; the controllers' repairs, fences and rollouts; the storage watcher's fence"),
    ]  # fmt: skip
    if spec.schedulers.slurm is not None:
        out += [
            Flow("slurmctld", "controller", (ANY_HOST,), _one(SLURMCTLD), "Slurm's clients and daemons, the backup"),
            Flow("slurmd", "gpu", ("controller", "gpu"), _one(SLURMD), "slurmctld, and slurmd's step fan-out"),
            Flow("srun", ANY_HOST, ("controller", "gpu"), SRUN_PORTS, "slurmctld, slurmd back to srun (SrunPortRange)"),
        ]
    k8s = spec.kubernetes
    pods = (PODS,) if k8s is not None else ()  # the layer's controller pods: their watch, their audit entries
    mon = spec.monitoring
    out += [
        Flow("agent-metrics", "gpu", ("monitoring", ADMIN), _one(mon.agent_port), "Prometheus scrapes"),
        Flow("prometheus", "monitoring", ("controller", *pods, ADMIN), _one(mon.prometheus_port),
             "the controllers' watch"),
        Flow("alertmanager", "monitoring", ("controller", *pods, ADMIN), _one(mon.alertmanager_port),
             "the controllers' alert"),
    ]  # fmt: skip
    if spec.remediation is not None:
        out.append(
            Flow("ha-ops-api", "controller", ("gpu", "monitoring", "controller", ADMIN), _one(spec.remediation.port),
                 "agents' reports, Prometheus' scrape, Alertmanager's webhook, the peer, operators"),
        )  # fmt: skip
        if spec.remediation.tls:
            out.append(Flow("audit-sink", "monitoring", ("controller", *pods), _one(AUDIT_SINK), "the audit entries"))
    if k8s is not None:
        out += [
            Flow("kubelet", K8S_NODE, (K8S_API, "monitoring", ADMIN), _one(KUBELET),
                 "the API server (logs, exec, port-forward), metrics scrapes"),
            *([Flow("kube-apiserver", K8S_API, (ANY_HOST, PODS, ADMIN), _one(k8s.api_port),
                    "kubelets, controllers, pods (through their Service), operators")] if k8s.api_server_hosts else []),
            *(Flow(f"pod-network-{entry.replace('/', '-')}", K8S_NODE, (K8S_NODE,), _range(entry),
                   "the pod network's own traffic between nodes", entry.split("/")[1])
              for entry in k8s.pod_network_ports),
        ]  # fmt: skip
    if spec.storage is not None and spec.storage.kind == "moosefs":
        masters = ("storage_master", "storage_metalogger")  # (the metalogger's node is promoted to master)
        out += [
            *(Flow("moosefs-master", role, (ANY_HOST,), MOOSEFS_MASTER, "chunkservers, metalogger, clients")
              for role in masters),
            Flow("moosefs-chunkserver", "chunkserver", (ANY_HOST,), _one(MOOSEFS_CHUNKSERVER), "clients, replication"),
            Flow("storage-exporter", "monitoring", ("monitoring", ADMIN), _one(STORAGE_EXPORTER), "Prometheus"),
        ]  # fmt: skip
    return out


def _range(entry: str) -> tuple[int, int]:
    low, _, high = entry.split("/")[0].partition("-")
    return int(low), int(high or low)


def roles_of(spec: ClusterSpec, node: NodeLayout) -> tuple[str, ...]:
    """A host's spec roles, and on Kubernetes whether it runs a kubelet (K8S_NODE) or the API server (K8S_API)."""
    k8s = spec.kubernetes
    if k8s is None:
        return node.roles
    extra = []
    if "gpu" in node.roles or node.name in k8s.kubelet_nodes or node.name in k8s.api_server_hosts:
        extra.append(K8S_NODE)
    if node.name in k8s.api_server_hosts:
        extra.append(K8S_API)
    return (*node.roles, *extra)


def host_rules(spec: ClusterSpec, layout: Layout, host: str, admin: tuple[str, ...] = ()) -> list[Rule]:
    """What `host` accepts: for each flow to one of its roles, the addresses allowed. `admin` adds sources to the
    spec's admin_sources (the lab's operator on its management network)."""
    roles = {n.name: roles_of(spec, n) for n in layout.nodes}
    addresses = {n.name: str(n.address) for n in layout.nodes}
    admins = tuple(_cidr(a) for a in (*(spec.firewall.admin_sources if spec.firewall else ()), *admin))
    rules = []
    for flow in flows(spec):
        if flow.to != ANY_HOST and flow.to not in roles[host]:
            continue
        sources: list[str] = []
        for source in flow.sources:
            if source == ADMIN:
                sources += admins
            elif source == PODS:  # (a flow names it only with `kubernetes`)
                sources += [_cidr(spec.kubernetes.pod_cidr)] if spec.kubernetes is not None else []
            else:
                sources += [addresses[n.name] for n in layout.nodes if source == ANY_HOST or source in roles[n.name]]
        unique = tuple(dict.fromkeys(s for s in sources if s != addresses[host]))  # (its own: through lo)
        if unique:
            rules.append(Rule(flow.name, unique, flow.ports, flow.proto))
    return rules


def _cidr(value: object) -> str:
    network = IPv4Network(str(value), strict=False)
    return str(network.network_address) if network.prefixlen == 32 else str(network)


def render_nft(host: str, rules: list[Rule], table: str = "ha_ops") -> str:
    """The ruleset: loaded with `nft -f`, it replaces the table whole (atomically) and touches no other table."""
    lines = [
        f"# ha-ops host firewall for {host}, rendered from the cluster spec (ha_ops.security.firewall); do not edit.",
        f"table inet {table}",
        f"delete table inet {table}",
        f"table inet {table} {{",
        "  chain input {",
        "    type filter hook input priority filter; policy drop;",
        '    iifname "lo" accept',
        "    ct state established,related accept",
        "    ct state invalid drop",
        "    icmp type echo-request accept",
    ]
    for rule in rules:
        addresses, ports = ", ".join(rule.sources), rule.ports_text()
        lines.append(f'    ip saddr {{ {addresses} }} {rule.proto} dport {ports} accept comment "{rule.name}"')
    lines += [f'    counter comment "{DROP_COMMENT}"', "  }", "}", ""]
    return "\n".join(lines)


# The final rule's comment: it counts what the policy then drops.
DROP_COMMENT = "dropped: not a flow this cluster needs"


def dropped_packets(listing: str) -> int:
    """Packets the final counter counted, from `nft -j list chain inet ha_ops input`: read from nft's JSON, so
    that no other rule's comment or a change in nft's text layout can pose as the counter."""
    try:
        items = json.loads(listing)["nftables"]
        rule = next(
            i["rule"] for i in items if isinstance(i, dict) and i.get("rule", {}).get("comment") == DROP_COMMENT
        )
        return int(next(e["counter"]["packets"] for e in rule["expr"] if "counter" in e))
    except (ValueError, KeyError, TypeError, StopIteration) as exc:
        raise ValueError(f"no ha-ops drop counter in the nft listing: {exc!r}") from None


def matrix(spec: ClusterSpec, layout: Layout) -> list[tuple[str, str, int, bool]]:
    """(from host, to host, port, allowed) for every host pair and every TCP port some flow opens: the table a lab
    test probes and docs/security.md shows."""
    ports = sorted({f.ports[0] for f in flows(spec) if f.proto == "tcp"})
    out = []
    for dst in layout.nodes:
        accepted = host_rules(spec, layout, dst.name)
        for src in layout.nodes:
            if src.name == dst.name:
                continue
            for port in ports:
                allowed = any(str(src.address) in r.sources and r.ports[0] <= port <= r.ports[1] and r.proto == "tcp"
                              for r in accepted)  # fmt: skip
                out.append((src.name, dst.name, port, allowed))
    return out
