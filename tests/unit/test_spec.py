"""ClusterSpec: the examples load, their layouts hold the promised facts, and every rule names its field."""

from __future__ import annotations

import copy
import functools
from collections import Counter
from collections.abc import Callable
from ipaddress import IPv4Address
from pathlib import Path
from typing import Any

import pytest
import yaml

from ha_ops.errors import SpecError
from ha_ops.spec import ClusterSpec, compute_layout, load_spec, parse_spec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EXAMPLE_FILES = ["lab.yaml", "production.yaml", "existing-cluster.yaml"]

Mutation = Callable[[dict[str, Any]], None]


@functools.cache
def _example_data(name: str) -> dict[str, Any]:
    data = yaml.safe_load((EXAMPLES / name).read_text())
    assert isinstance(data, dict)
    return data


def lab_data() -> dict[str, Any]:
    """A fresh, mutable copy of examples/lab.yaml as plain data."""
    return copy.deepcopy(_example_data("lab.yaml"))


def put(path: tuple[str | int, ...], value: Any) -> Mutation:
    """Set the value at `path` (keys and list indexes), creating nothing on the way."""

    def mutate(data: dict[str, Any]) -> None:
        node: Any = data
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value

    return mutate


def drop(path: tuple[str | int, ...]) -> Mutation:
    def mutate(data: dict[str, Any]) -> None:
        node: Any = data
        for part in path[:-1]:
            node = node[part]
        del node[path[-1]]

    return mutate


def append(path: tuple[str | int, ...], value: Any) -> Mutation:
    def mutate(data: dict[str, Any]) -> None:
        node: Any = data
        for part in path:
            node = node[part]
        node.append(copy.deepcopy(value))

    return mutate


def lab_with(*mutations: Mutation) -> dict[str, Any]:
    data = lab_data()
    for mutate in mutations:
        mutate(data)
    return data


def problems_of(data: Any) -> list[str]:
    with pytest.raises(SpecError) as info:
        parse_spec(data)
    return info.value.problems


def assert_problem(problems: list[str], field: str, phrase: str) -> None:
    """Some problem is reported against exactly `field` and says `phrase`."""
    matching = [p for p in problems if p.startswith(f"{field}: ") and phrase in p]
    assert matching, f"no problem for {field!r} saying {phrase!r} in {problems}"


# --- good specs ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", EXAMPLE_FILES)
def test_example_loads(name: str) -> None:
    spec = load_spec(EXAMPLES / name)
    assert isinstance(spec, ClusterSpec)
    assert parse_spec(_example_data(name)) == spec


def test_lab_layout() -> None:
    spec = load_spec(EXAMPLES / "lab.yaml")
    layout = compute_layout(spec)
    assert layout.problems == []
    roles = Counter(role for node in layout.nodes for role in node.roles)
    assert roles == {"controller": 2, "monitoring": 1, "gpu": 4}
    assert [s.name for s in layout.spines] == ["spine1", "spine2"]
    assert [lf.name for lf in layout.leaves] == ["leaf1", "leaf2"]
    assert [n.name for n in layout.nodes if n.spare] == ["gpu4"]  # floor(4 * 0.25) = 1, the last node


def test_production_layout() -> None:
    spec = load_spec(EXAMPLES / "production.yaml")
    layout = compute_layout(spec)
    assert spec.production
    assert layout.problems == []
    roles = Counter(role for node in layout.nodes for role in node.roles)
    assert roles == {
        "controller": 2,
        "monitoring": 1,
        "storage_master": 1,
        "storage_metalogger": 1,
        "chunkserver": 3,
        "gpu": 64,
    }
    assert sum(n.gpus for n in layout.nodes) == 64 * 8
    assert {n.gpu_model for n in layout.nodes_with_role("gpu")} == {"H100-SXM5-80GB"}
    assert len(layout.spines) == 4
    assert len(layout.leaves) == 4
    # Each rack is its own failure domain on its own leaf, across two zones.
    assert sorted(d.leaf or 0 for d in spec.failure_domains) == [1, 2, 3, 4]
    assert len({d.zone for d in spec.failure_domains}) == 2
    primary, backup = spec.controllers.hosts
    assert spec.controllers.ha
    assert spec.domain(primary.domain).zone != spec.domain(backup.domain).zone
    # Every leaf has one uplink to every spine.
    for leaf in layout.leaves:
        assert sorted(link.spine for link in layout.links if link.leaf == leaf.index) == [1, 2, 3, 4]
    assert spec.storage is not None
    assert spec.storage.kind == "moosefs"
    assert (spec.storage.replicas, len(spec.storage.hosts)) == (2, 3)
    pool = spec.pools[0]
    assert 0.15 <= pool.spare_fraction <= 0.2


@pytest.mark.parametrize(("name", "spares"), [("lab.yaml", 1), ("production.yaml", 9)])
def test_spare_count(name: str, spares: int) -> None:
    spec = load_spec(EXAMPLES / name)
    layout = compute_layout(spec)
    assert sum(pool.spare_count for pool in spec.pools) == spares
    assert sum(1 for n in layout.nodes if n.spare) == spares


@pytest.mark.parametrize("name", EXAMPLE_FILES)
def test_every_pool_spreads_over_two_domains(name: str) -> None:
    spec = load_spec(EXAMPLES / name)
    layout = compute_layout(spec)
    for pool in spec.pools:
        per_domain = Counter(n.domain for n in layout.nodes if n.pool == pool.name)
        assert sum(per_domain.values()) == pool.count
        assert len(per_domain) >= 2
        assert max(per_domain.values()) - min(per_domain.values()) <= 1  # round-robin


@pytest.mark.parametrize("name", EXAMPLE_FILES)
def test_addresses_unique_and_inside_their_leaf(name: str) -> None:
    spec = load_spec(EXAMPLES / name)
    layout = compute_layout(spec)
    addresses = [n.address for n in layout.nodes]
    assert len(set(addresses)) == len(addresses)
    for node in layout.nodes:
        leaf = layout.leaf(node.leaf)
        existing = spec.domain(node.domain).subnet  # an existing cluster's rack keeps its own subnet
        subnet = existing or leaf.subnet
        assert node.address in subnet, node
        assert node.address not in (leaf.gateway, subnet.network_address, subnet.broadcast_address)
        assert existing or leaf.subnet.subnet_of(spec.network.host_cidr)
    assert not set(layout.service_addresses.values()) & set(addresses)  # e.g. mfsmaster: no host has it
    link_addresses = [a for link in layout.links for a in (link.spine_address, link.leaf_address)]
    assert len(set(link_addresses)) == len(link_addresses)
    assert all(a in spec.network.fabric_cidr for a in link_addresses)


def test_a_host_on_the_moosefs_masters_service_address_is_refused() -> None:
    # production.yaml once put ctl1 on 10.80.0.5, the address that moves with the MooseFS master role, and passed.
    data = _example_data("production.yaml")
    data["controllers"]["hosts"][0]["address"] = "10.80.0.5"
    assert_problem(problems_of(data), "controllers.hosts[0].address",
                   "10.80.0.5 (ctl1) collides with the MooseFS master's service address")  # fmt: skip


def test_explicit_address_is_kept() -> None:
    spec = parse_spec(lab_with(put(("controllers", "hosts", 0, "address"), "10.77.0.5")))
    assert compute_layout(spec).node("ctl1").address == IPv4Address("10.77.0.5")


@pytest.mark.parametrize("fraction", [0.0, 0.5])
def test_spare_fraction_bounds_are_allowed(fraction: float) -> None:
    spec = parse_spec(lab_with(put(("pools", 0, "spare_fraction"), fraction)))
    assert spec.pools[0].spare_fraction == fraction


def test_single_controller_without_ha_is_allowed() -> None:
    spec = parse_spec(lab_with(put(("controllers", "ha"), False), drop(("controllers", "hosts", 1))))
    assert [h.name for h in spec.controllers.hosts] == ["ctl1"]


ONE_SPINE = [put(("fabric", "spines"), 1), put(("fabric", "uplinks_per_leaf"), 1)]


def test_single_uplink_without_ecmp_is_allowed() -> None:
    spec = parse_spec(lab_with(*ONE_SPINE, put(("fabric", "ecmp"), False)))
    assert spec.fabric.uplinks_per_leaf == 1


# --- one rule per case: the problem names the field and the rule --------------------------------------------

MOOSEFS_2_HOSTS = {
    "kind": "moosefs",
    "replicas": 3,
    "hosts": [{"name": "mfs1", "domain": "rack1"}, {"name": "mfs2", "domain": "rack2"}],
}

RULES = [
    pytest.param(
        [append(("failure_domains",), {"name": "rack2", "zone": "z", "rack": "r", "power_feed": "f"})],
        "failure_domains",
        "duplicate name 'rack2'",
        id="duplicate-domain",
    ),
    pytest.param(
        [put(("monitoring", "host", "name"), "ctl1")],
        "hosts",
        "duplicate host name 'ctl1'",
        id="duplicate-host",
    ),
    pytest.param(
        [
            append(
                ("pools",),
                {
                    "name": "gpu",
                    "count": 2,
                    "gpus_per_node": 1,
                    "gpu_model": "x",
                    "domains": ["rack1", "rack2"],
                },
            )
        ],
        "pools",
        "duplicate pool name 'gpu'",
        id="duplicate-pool",
    ),
    pytest.param(
        [put(("pools", 0, "name"), "ctl")],
        "hosts",
        "duplicate host name 'ctl2'",
        id="pool-node-collides-with-host",
    ),
    pytest.param(
        [
            put(("controllers", "hosts", 0, "address"), "10.77.0.20"),
            put(("monitoring", "host", "address"), "10.77.0.20"),
        ],
        "monitoring.host.address",
        "collides with ctl1",
        id="duplicate-address",
    ),
    pytest.param(
        [put(("controllers", "hosts", 0, "address"), "10.77.1.20")],
        "controllers.hosts[0].address",
        "is not a host address of leaf1's subnet 10.77.0.0/24",
        id="address-on-other-leaf",
    ),
    pytest.param(
        [put(("controllers", "hosts", 1, "address"), "10.77.1.255")],
        "controllers.hosts[1].address",
        "is not a host address of leaf2's subnet",
        id="address-is-broadcast",
    ),
    pytest.param(
        [put(("controllers", "hosts", 0, "address"), "10.77.0.1")],
        "controllers.hosts[0].address",
        "collides with leaf1 gateway",
        id="address-is-gateway",
    ),
    pytest.param(
        [put(("network", "fabric_cidr"), "10.77.200.0/24")],
        "network",
        "overlap",
        id="host-fabric-cidr-overlap",
    ),
    pytest.param(
        [drop(("controllers", "hosts", 1))],
        "controllers.hosts",
        "HA is requested",
        id="ha-with-one-controller",
    ),
    pytest.param(
        [put(("controllers", "hosts", 1, "domain"), "rack1")],
        "controllers.hosts",
        "share failure domain 'rack1'",
        id="ha-controllers-same-domain",
    ),
    pytest.param(
        [put(("pools", 0, "domains"), ["rack1"])],
        "pools[0].domains",
        "spread over >= 2 failure domains",
        id="pool-one-domain",
    ),
    pytest.param(
        [put(("pools", 0, "domains"), ["rack2", "rack2"])],
        "pools[0].domains",
        "spread over >= 2 failure domains",
        id="pool-same-domain-twice",
    ),
    pytest.param(
        [put(("pools", 0, "count"), 1), put(("pools", 0, "spare_fraction"), 0.0)],
        "pools[0].count",
        "cannot spread over >= 2 failure domains",
        id="pool-of-one-node",
    ),
    pytest.param(
        [put(("pools", 0, "spare_fraction"), -0.01)],
        "pools[0].spare_fraction",
        "outside 0-0.5",
        id="spare-below-0",
    ),
    pytest.param(
        [put(("pools", 0, "spare_fraction"), 0.51)],
        "pools[0].spare_fraction",
        "outside 0-0.5",
        id="spare-above-half",
    ),
    pytest.param([put(("nmae",), "lab")], "nmae", "unknown key", id="unknown-top-level-key"),
    pytest.param([put(("fabric", "spine"), 2)], "fabric.spine", "unknown key", id="unknown-nested-key"),
    pytest.param(
        [put(("controllers", "hosts", 0, "adress"), "10.77.0.5")],
        "controllers.hosts[0].adress",
        "unknown key",
        id="unknown-key-in-list-item",
    ),
    pytest.param([put(("fabric", "spines"), "2")], "fabric.spines", "valid integer", id="string-for-int"),
    pytest.param([put(("pools", 0, "count"), True)], "pools[0].count", "valid integer", id="bool-for-int"),
    pytest.param([put(("fabric", "leaves"), 2.0)], "fabric.leaves", "valid integer", id="float-for-int"),
    pytest.param([put(("network",), [])], "network", "valid dictionary", id="list-for-mapping"),
    pytest.param([put(("pools", 0, "domains"), "rack1")], "pools[0].domains", "valid list", id="string-for-list"),
    pytest.param([put(("controllers", "ha"), "yes")], "controllers.ha", "valid boolean", id="string-for-bool"),
    pytest.param([put(("version",), True)], "version", "valid integer", id="bool-for-version"),
    pytest.param([put(("version",), 2)], "version", "should be 1", id="unknown-version"),
    pytest.param(
        [put(("controllers", "hosts", 0, "address"), 167772165)],
        "controllers.hosts[0].address",
        "should be a string",
        id="int-for-address",
    ),
    pytest.param([put(("network", "host_cidr"), True)], "network.host_cidr", "should be a string", id="bool-for-cidr"),
    pytest.param(
        [put(("network", "host_cidr"), "10.77.0.1/16")],
        "network.host_cidr",
        "valid IPv4 network",
        id="cidr-host-bits",
    ),
    pytest.param([drop(("fabric",))], "fabric", "required key is missing", id="missing-key"),
    pytest.param(
        [put(("fabric", "uplinks_per_leaf"), 3)],
        "fabric.uplinks_per_leaf",
        "only 2 spines",
        id="uplinks-over-spines",
    ),
    pytest.param(
        [put(("fabric", "spines"), 4)],
        "fabric.uplinks_per_leaf",
        "every leaf needs one uplink to each of the 4 spines, got 2",
        id="uplinks-under-spines",
    ),
    pytest.param(ONE_SPINE, "fabric.uplinks_per_leaf", "ECMP", id="ecmp-with-one-uplink"),
    pytest.param(
        [put(("monitoring", "agent_port"), 9090)],
        "monitoring",
        "port 9090 is used twice",
        id="monitoring-port-collision",
    ),
    pytest.param(
        [put(("monitoring", "prometheus_port"), 80)],
        "monitoring.prometheus_port",
        "1024",
        id="privileged-port",
    ),
    pytest.param(
        [put(("monitoring", "host", "name"), "spine1")], "hosts", "'spine1' is reserved", id="reserved-spine1"
    ),
    pytest.param([put(("monitoring", "host", "name"), "leaf2")], "hosts", "'leaf2' is reserved", id="reserved-leaf2"),
    pytest.param([put(("pools", 0, "name"), "leaf")], "hosts", "'leaf1' is reserved", id="pool-makes-reserved-name"),
    pytest.param([put(("monitoring", "host", "name"), "Mon_1")], "monitoring.host.name", "pattern", id="bad-host-name"),
    pytest.param(
        [put(("storage",), MOOSEFS_2_HOSTS)],
        "storage.replicas",
        "need >= 3 storage hosts, got 2",
        id="replicas",
    ),
    pytest.param(
        [put(("storage", "replicas"), 2)],
        "storage",
        "shared-dir has no storage hosts",
        id="shared-dir-replicas",
    ),
    pytest.param(
        [put(("controllers", "hosts", 1, "domain"), "rack9")],
        "controllers.hosts[1].domain",
        "unknown failure domain 'rack9'",
        id="unknown-host-domain",
    ),
    pytest.param(
        [put(("pools", 0, "domains"), ["rack1", "rack9"])],
        "pools[0].domains",
        "unknown failure domain(s) 'rack9'",
        id="unknown-pool-domain",
    ),
    pytest.param(
        [put(("failure_domains", 0, "leaf"), 3)],
        "failure_domains[0].leaf",
        "leaf 3 does not exist",
        id="leaf-missing",
    ),
    pytest.param(
        [append(("controllers", "hosts"), {"name": "ctl3", "domain": "rack1"})],
        "controllers.hosts",
        "primary and one backup",
        id="three-controllers",
    ),
    pytest.param([put(("schedulers",), {})], "schedulers", "no scheduler", id="no-scheduler"),
    pytest.param(
        [put(("remediation", "scheduler"), "kubernetes")],
        "remediation.scheduler",
        "needs a kubernetes section",
        id="remediation-on-kubernetes-without-it",
    ),
    pytest.param(
        [put(("network", "host_cidr"), "10.77.0.0/24")],
        "network.host_cidr",
        "fewer /24 subnets",
        id="host-cidr-small",
    ),
    pytest.param(
        [put(("network", "fabric_cidr"), "10.76.0.0/30")],
        "network.fabric_cidr",
        "too small for 4 links",
        id="fabric-small",
    ),
    pytest.param(
        [put(("network", "host_cidr"), "8.8.0.0/16")],
        "network.host_cidr",
        "must be a private range",
        id="public-cidr",
    ),
]


@pytest.mark.parametrize(("mutations", "field", "phrase"), RULES)
def test_rule(mutations: list[Mutation], field: str, phrase: str) -> None:
    assert_problem(problems_of(lab_with(*mutations)), field, phrase)


def test_all_problems_are_reported_at_once() -> None:
    problems = problems_of(lab_with(put(("fabric", "uplinks_per_leaf"), 3), put(("pools", 0, "spare_fraction"), 0.9)))
    assert_problem(problems, "fabric.uplinks_per_leaf", "only 2 spines")
    assert_problem(problems, "pools[0].spare_fraction", "outside 0-0.5")


def test_full_leaf_is_reported_once_per_leaf() -> None:
    problems = problems_of(lab_with(put(("pools", 0, "count"), 2000)))
    assert sorted(p.split(":")[0] for p in problems) == ["leaf1", "leaf2"]
    assert all("more hosts than its /24 subnet holds" in p for p in problems)


@pytest.mark.parametrize(
    ("data", "phrase"),
    [
        (None, "the spec is empty"),
        ([1, 2], "must be a mapping, got list"),
        ("lab", "must be a mapping, got str"),
    ],
)
def test_top_level_must_be_a_mapping(data: Any, phrase: str) -> None:
    problems = problems_of(data)
    assert len(problems) == 1
    assert phrase in problems[0]


def test_non_string_key_is_named_as_a_key() -> None:
    data = lab_with(put(("fabric", 3), "x"))  # type: ignore[arg-type]
    assert_problem(problems_of(data), "fabric", "key 3 is not a string")


# --- reading files ------------------------------------------------------------------------------------------


def test_yaml_syntax_error_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("version: 1\nname: lab\nfabric: {spines: 2\nleaves: 2\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert info.value.source == str(path)
    [problem] = info.value.problems
    assert problem.startswith("line 4, column ")
    assert "not valid YAML" in problem


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as info:
        load_spec(tmp_path / "absent.yaml")
    assert info.value.problems == ["cannot read: No such file or directory"]


def test_directory_is_not_a_spec(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as info:
        load_spec(tmp_path)
    assert info.value.problems == ["cannot read: Is a directory"]


@pytest.mark.parametrize(
    ("content", "phrase"),
    [
        (b"\xff\xfe name: lab\n", "not UTF-8 text"),
        (b"version: 2024-02-30\n", "day is out of range"),  # PyYAML raises a bare ValueError here
        (b"a: " + b"[" * 5000 + b"]" * 5000 + b"\n", "nested too deeply"),
        (b"a: !!python/object:os.system x\n", "line 1, column 4: not valid YAML"),
        (b"", "the spec is empty"),
    ],
    ids=["not-utf8", "bad-date", "deep-nesting", "unsafe-tag", "empty"],
)
def test_unreadable_files_raise_spec_error(tmp_path: Path, content: bytes, phrase: str) -> None:
    path = tmp_path / "spec.yaml"
    path.write_bytes(content)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    [problem] = info.value.problems
    assert phrase in problem


def test_error_message_lists_source_and_problems() -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(lab_with(put(("fabric", "uplinks_per_leaf"), 3)), source="cluster.yaml")
    assert str(info.value).startswith("cluster.yaml: fabric.uplinks_per_leaf: ")
    assert info.value.exit_code == 2


# --- an existing cluster ------------------------------------------------------------------------------------


def existing_data() -> dict[str, Any]:
    return copy.deepcopy(_example_data("existing-cluster.yaml"))


def existing_with(*mutations: Mutation) -> dict[str, Any]:
    data = existing_data()
    for mutate in mutations:
        mutate(data)
    return data


def test_an_existing_cluster_keeps_its_names_addresses_bmcs_and_marked_spares() -> None:
    spec = load_spec(EXAMPLES / "existing-cluster.yaml")
    layout = compute_layout(spec)
    assert layout.problems == []
    gpus = layout.nodes_with_role("gpu")
    assert [(n.name, str(n.address), n.domain) for n in gpus[:3]] == [
        ("dgx-a01-1", "10.40.1.11", "row-a-r01"), ("dgx-a01-2", "10.40.1.12", "row-a-r01"),
        ("dgx-a02-1", "10.40.2.11", "row-a-r02"),
    ]  # fmt: skip
    assert [n.name for n in gpus if n.spare] == ["dgx-b01-2"]
    assert spec.pools[0].count == 6 and spec.pools[0].domains == ["row-a-r01", "row-a-r02", "row-b-r01"]
    assert gpus[0].bmc is not None and gpus[0].bmc.address == "https://10.41.1.11"
    assert str(layout.node("slurm-ctl-a").address) == "10.40.1.2"


@pytest.mark.parametrize(
    ("mutation", "field", "phrase"),
    [
        (drop(("pools", 0, "nodes", 1, "address")), "pools[0].nodes[1].address", "needs its address"),
        (put(("pools", 0, "nodes", 1, "address"), "10.40.1.11"), "pools[0].nodes[1].address", "collides with dgx-a01"),
        (put(("pools", 0, "nodes", 0, "address"), "10.40.2.40"), "pools[0].nodes[0].address",
         "not a host address of row-a-r01's subnet 10.40.1.0/24"),
        (put(("pools", 0, "count"), 7), "pools[0].count", "6 nodes are listed"),
        (put(("pools", 0, "spare_fraction"), 0.2), "pools[0].spare_fraction", "marks its spares"),
        (put(("pools", 0, "nodes", 2, "domain"), "row-z"), "pools[0].nodes[2].domain", "unknown failure domain"),
        (put(("pools", 0, "domains"), ["row-a-r01", "row-a-r02"]), "pools[0].nodes[4].domain", "not one of the pool"),
        (drop(("controllers", "hosts", 1, "address")), "controllers.hosts[1].address", "an existing subnet"),
        (put(("pools", 0, "nodes", 3, "name"), "dgx-a02-1"), "hosts", "duplicate host name 'dgx-a02-1'"),
        (put(("pools", 0, "nodes", 0, "bmc"), {"kind": "redfish", "address": "https://b", "user": "u"}),
         "pools[0].nodes[0].bmc", "exactly one of password_file and password_env"),
    ],
)  # fmt: skip
def test_existing_cluster_rules_name_their_field(mutation: Mutation, field: str, phrase: str) -> None:
    problems = problems_of(existing_with(mutation))
    matching = [p for p in problems if p.startswith(field) and phrase in p]
    assert matching, f"no problem for {field!r} saying {phrase!r} in {problems}"


def test_a_listed_pool_in_one_domain_is_refused() -> None:
    nodes = [{"name": f"n{i}", "domain": "row-a-r01", "address": f"10.40.1.{20 + i}"} for i in range(3)]
    assert_problem(problems_of(existing_with(put(("pools", 0, "nodes"), nodes))), "pools[0].domains",
                   "spread over >= 2 failure domains, got 1")  # fmt: skip


def test_the_storage_service_address_in_an_existing_subnet_is_reserved() -> None:
    storage = {"kind": "moosefs", "replicas": 1,
               "master": {"name": "mfs-m", "domain": "row-a-r01", "address": "10.40.1.30"},
               "metalogger": {"name": "mfs-l", "domain": "row-a-r01", "address": "10.40.1.31"},
               "hosts": [{"name": "mfs-c", "domain": "row-a-r02", "address": "10.40.2.30"}]}  # fmt: skip
    assert compute_layout(parse_spec(existing_with(put(("storage",), storage)))).service_addresses == {
        "mfsmaster": IPv4Address("10.40.1.5")
    }
    storage["hosts"][0] |= {"domain": "row-a-r01", "address": "10.40.1.5"}  # type: ignore[index]
    assert_problem(problems_of(existing_with(put(("storage",), storage))), "storage.hosts[0].address",
                   "collides with the MooseFS master's service address")  # fmt: skip


@pytest.mark.parametrize(
    ("path", "value", "named"),
    [
        (("failure_domains", 0, "rack"), "{{ lookup('pipe', 'touch /tmp/owned') }}", "failure_domains[0].rack"),
        (("failure_domains", 1, "power_feed"), "pdu-{% raw %}a", "failure_domains[1].power_feed"),
        (("failure_domains", 0, "zone"), "z{# a comment #}", "failure_domains[0].zone"),
        (("pools", 0, "gpu_model"), "H100 {{ 7*7 }}", "pools[0].gpu_model"),
    ],
)
def test_template_syntax_in_any_spec_string_is_refused_naming_the_field(
    path: tuple[str | int, ...], value: str, named: str
) -> None:
    # Issue 44, finding 9: a rack of `{{ lookup('pipe', ...) }}` passed `spec validate` and landed unescaped in the
    # inventory, where Ansible runs it on the control node when the variable is templated.
    data = lab_data()
    put(path, value)(data)
    with pytest.raises(SpecError) as refused:
        parse_spec(data)
    assert refused.value.problems == [
        f"{named}: template syntax ({{{{, {{% or {{#}}) is not allowed: Ansible would evaluate it"
    ]
    # A brace alone is still a brace.
    put(path, "rack-{1}")(data)
    parse_spec(data)


def test_models_beside_the_spec_keep_their_braces() -> None:
    # Only the spec's strings are refused template syntax: a rollout site's driver_args (the inventory's
    # ha_ops_rollout) carry command templates on purpose, as the full lab's do.
    from ha_ops.cluster.rollouts import RolloutSite

    site = RolloutSite.parse({"host": "mon1", "driver_args": ["--health-command", "check {{host}} {%x%}"]}, "here")
    assert site.driver_args[1] == "check {{host}} {%x%}"
