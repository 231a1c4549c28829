"""Host firewalls from the spec (ha_ops.security.firewall): which flows each role needs, what each host accepts
from whom, the nftables text, the matrix, and the inventory that hands each host its ruleset."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from ha_ops.errors import SpecError
from ha_ops.security.firewall import SLURMD, SSH, Rule, dropped_packets, flows, host_rules, matrix, render_nft
from ha_ops.spec import compute_layout, load_spec, parse_spec
from ha_ops.spec.inventory import render_inventory

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def full():  # type: ignore[no-untyped-def]
    spec = load_spec(EXAMPLES / "lab-storage.yaml")
    return spec, compute_layout(spec)


def with_extra(extra: str):  # type: ignore[no-untyped-def]
    """The full lab's spec with YAML added at its end."""
    return parse_spec(yaml.safe_load((EXAMPLES / "lab-storage.yaml").read_text() + extra), "x.yaml")


def addresses(layout, role: str) -> set[str]:  # type: ignore[no-untyped-def]
    return {str(n.address) for n in layout.nodes_with_role(role)}


def accepted(rules: list[Rule], name: str) -> set[str]:
    return {s for r in rules if r.name == name for s in r.sources}


def test_the_flows_follow_what_the_spec_runs(full) -> None:  # type: ignore[no-untyped-def]
    spec, _ = full
    names = {f.name for f in flows(spec)}
    assert {"ssh", "slurmctld", "slurmd", "srun", "agent-metrics", "ha-ops-api", "moosefs-master",
            "moosefs-chunkserver", "storage-exporter"} <= names  # fmt: skip
    assert ("audit-sink" in names) == spec.remediation.tls
    plain = load_spec(EXAMPLES / "lab.yaml")
    assert not {"moosefs-master", "moosefs-chunkserver"} & {f.name for f in flows(plain)}


def test_each_host_accepts_only_its_roles_flows_from_the_right_roles(full) -> None:  # type: ignore[no-untyped-def]
    spec, layout = full
    gpu1 = host_rules(spec, layout, "gpu1")
    assert {r.name for r in gpu1} == {"ssh", "slurmd", "srun", "agent-metrics"}
    assert accepted(gpu1, "agent-metrics") == addresses(layout, "monitoring")
    assert accepted(gpu1, "slurmd") == addresses(layout, "controller") | addresses(layout, "gpu") - {
        str(layout.node("gpu1").address)
    }  # (never itself: its own traffic comes in through lo)
    assert accepted(gpu1, "ssh") == addresses(layout, "controller") | addresses(layout, "storage_metalogger")
    ctl1 = host_rules(spec, layout, "ctl1", admin=("169.254.7.1",))
    api = accepted(ctl1, "ha-ops-api")
    assert addresses(layout, "gpu") <= api and addresses(layout, "monitoring") <= api and "169.254.7.1" in api
    assert not addresses(layout, "chunkserver") & api
    assert "169.254.7.1" in accepted(ctl1, "ssh")
    mon = host_rules(spec, layout, "mon1")
    assert accepted(mon, "audit-sink") == addresses(layout, "controller")
    # The metalogger's node is promoted to master when the master is lost: it accepts the master's flows already.
    assert {r.name for r in host_rules(spec, layout, "mfsml")} >= {"moosefs-master"}


def test_admin_sources_come_from_the_spec_as_networks() -> None:
    with_admins = with_extra("\nfirewall:\n  admin_sources: [192.0.2.0/24, 198.51.100.7]\n")
    ssh = accepted(host_rules(with_admins, compute_layout(with_admins), "gpu2"), "ssh")
    assert {"192.0.2.0/24", "198.51.100.7"} <= ssh
    with pytest.raises(SpecError, match=r"firewall\.admin_sources\[0\]"):
        with_extra("\nfirewall:\n  admin_sources: [not-a-network]\n")
    with pytest.raises(SpecError, match=r"firewall\.allow: unknown key"):
        with_extra("\nfirewall:\n  allow: everything\n")


def test_the_ruleset_replaces_its_own_table_and_drops_the_rest() -> None:
    text = render_nft("gpu1", [Rule("ssh", ("10.0.0.1", "10.0.0.2"), (SSH, SSH)), Rule("srun", ("10.0.0.3",),
                                                                                          (60001, 60100))])  # fmt: skip
    lines = [line.strip() for line in text.splitlines()]
    assert lines[1:3] == ["table inet ha_ops", "delete table inet ha_ops"]  # a reload replaces it whole
    assert "type filter hook input priority filter; policy drop;" in lines
    assert 'ip saddr { 10.0.0.1, 10.0.0.2 } tcp dport 22 accept comment "ssh"' in lines
    assert 'ip saddr { 10.0.0.3 } tcp dport 60001-60100 accept comment "srun"' in lines
    assert lines.index('iifname "lo" accept') < lines.index("ct state established,related accept") < len(lines) - 3
    assert lines[-3] == 'counter comment "dropped: not a flow this cluster needs"'


def test_the_matrix_allows_exactly_the_flows(full) -> None:  # type: ignore[no-untyped-def]
    spec, layout = full
    table = {(s, d, p): ok for s, d, p, ok in matrix(spec, layout)}
    assert table[("mon1", "gpu1", spec.monitoring.agent_port)] is True
    assert table[("gpu2", "gpu1", spec.monitoring.agent_port)] is False
    assert table[("ctl1", "gpu1", SLURMD)] is True and table[("mon1", "gpu1", SLURMD)] is False
    assert (
        table[("gpu1", "ctl1", spec.remediation.port)] is True
        and table[("cs1", "ctl1", spec.remediation.port)] is False
    )
    assert table[("gpu1", "gpu2", SSH)] is False and table[("ctl2", "gpu2", SSH)] is True
    assert not any(s == d for s, d, _ in table)


def test_the_inventory_hands_each_host_its_ruleset(full) -> None:  # type: ignore[no-untyped-def]
    spec, layout = full
    hosts = render_inventory(spec.model_copy(update={"firewall": None}))["all"]["hosts"]
    assert all("host_firewall_ruleset" not in h for h in hosts.values())  # no firewall section: none
    with_firewall = with_extra("\nfirewall: {}\n")
    hosts = render_inventory(with_firewall)["all"]["hosts"]
    assert hosts["gpu1"]["host_firewall_ruleset"] == render_nft("gpu1", host_rules(with_firewall, layout, "gpu1"))
    assert set(hosts) == {n.name for n in layout.nodes}


def test_on_kubernetes_kubelets_the_api_server_the_pod_network_and_pods_reaching_hosts_are_flows(full) -> None:  # type: ignore[no-untyped-def]
    """With `kubernetes`: every GPU node (and kubelet or API server host) takes the kubelet's port from the API
    servers, monitoring and admins; the API servers take theirs from every host, the pods and admins; the pod
    network's own ports pass between nodes (udp too); and pods (the layer's controller pods) reach the monitoring
    host's Prometheus, Alertmanager and audit sink, which they could not before (the lab's pods' traffic to the
    sink was dropped)."""
    _, layout = full
    spec = with_extra("\nfirewall: {}\nkubernetes: {api_server_hosts: [ctl1], kubelet_nodes: [ctl2], "
                      "pod_network_ports: [8472/udp, 179/tcp]}\n")  # fmt: skip
    address = {n.name: str(n.address) for n in layout.nodes}

    def accepts(host: str) -> dict[str, Rule]:
        return {r.name: r for r in host_rules(spec, layout, host)}

    gpu1, ctl1, ctl2, mon1 = (accepts(h) for h in ("gpu1", "ctl1", "ctl2", "mon1"))
    assert gpu1["kubelet"].ports == (10250, 10250) and address["ctl1"] in gpu1["kubelet"].sources
    assert address["mon1"] in gpu1["kubelet"].sources and address["gpu2"] not in gpu1["kubelet"].sources
    assert "kubelet" in ctl2 and "kubelet" in ctl1  # a kubelet node, and the API server's host
    assert "kube-apiserver" in ctl1 and "kube-apiserver" not in ctl2
    assert {address["gpu1"], "10.244.0.0/15"} <= set(ctl1["kube-apiserver"].sources)
    vxlan = gpu1["pod-network-8472-udp"]
    assert (vxlan.proto, vxlan.ports) == ("udp", (8472, 8472)) and address["ctl2"] in vxlan.sources
    assert "pod-network-8472-udp" not in mon1  # not a Kubernetes node
    for flow in ("audit-sink", "prometheus", "alertmanager"):
        assert "10.244.0.0/15" in mon1[flow].sources, flow
    assert "udp dport 8472 accept" in render_nft("gpu1", host_rules(spec, layout, "gpu1"))
    assert {p for *_, p, _ in matrix(spec, layout)} >= {10250, 179} and 8472 not in {p for *_, p, _ in
                                                                                     matrix(spec, layout)}  # fmt: skip
    # Without kubernetes nothing of it, and pods reach nothing.
    plain = {r.name: r for r in host_rules(with_extra("\nfirewall: {}\n"), layout, "mon1")}
    assert "kubelet" not in {f.name for f in flows(with_extra("\nfirewall: {}\n"))}
    assert all("10.244.0.0/15" not in r.sources for r in plain.values())


@pytest.mark.parametrize(("extra", "problem"), [
    ("kubernetes: {api_server_hosts: [nope]}", "kubernetes.api_server_hosts[0]: 'nope' is not a host"),
    ("kubernetes: {pod_network_ports: [9000-8000/tcp]}", "kubernetes.pod_network_ports[0]: '9000-8000/tcp'"),
    ("kubernetes: {pod_network_ports: [8472/sctp]}", "kubernetes.pod_network_ports[0]: String should match"),
])  # fmt: skip
def test_bad_kubernetes_firewall_fields_are_named(extra: str, problem: str) -> None:
    with pytest.raises(SpecError) as refused:
        with_extra(f"\n{extra}\n")
    assert problem in str(refused.value), str(refused.value)


# `nft -j list chain inet ha_ops input` as nftables 1.0.6 (Debian 12) printed it for a table shaped as render_nft
# renders one (counts set here; the ssh rule given a counter of its own, which must not be read as the drop count).
NFT_LISTING = json.loads(
    '{"nftables": [{"metainfo": {"version": "1.0.6", "release_name": "Lester Gooch #5", "json_schema_vers'
    'ion": 1}}, {"chain": {"family": "inet", "table": "ha_ops", "name": "input", "handle": 1, "type": "fi'
    'lter", "hook": "input", "prio": 0, "policy": "drop"}}, {"rule": {"family": "inet", "table": "ha_ops"'
    ', "chain": "input", "handle": 3, "comment": "ssh from admin", "expr": [{"match": {"op": "==", "left"'
    ': {"payload": {"protocol": "tcp", "field": "dport"}}, "right": 22}}, {"counter": {"packets": 99, "by'
    'tes": 1}}, {"accept": null}]}}, {"rule": {"family": "inet", "table": "ha_ops", "chain": "input", "ha'
    'ndle": 4, "comment": "dropped: not a flow this cluster needs", "expr": [{"counter": {"packets": 7, "'
    'bytes": 420}}]}}]}'
)


def test_the_drop_count_is_the_final_counters_from_nfts_json() -> None:
    assert dropped_packets(json.dumps(NFT_LISTING)) == 7  # not the ssh rule's counter
    without = {"nftables": NFT_LISTING["nftables"][:3]}
    for listing in (json.dumps(without), "table inet ha_ops {", "{}"):
        with pytest.raises(ValueError, match="no ha-ops drop counter"):
            dropped_packets(listing)
