"""`ha-ops inventory --spec`: the Ansible inventory rendered from a cluster spec."""

from __future__ import annotations

import json
from ipaddress import IPv4Address
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from ha_ops.cli.main import app
from ha_ops.errors import SpecError
from ha_ops.spec import compute_layout, load_spec
from ha_ops.spec.addresses import addresses_in, resolve_addresses
from ha_ops.spec.inventory import gres_type, group_name, render_inventory
from tests.unit.cli_helpers import run_main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

runner = CliRunner()


@pytest.fixture(scope="module")
def lab_storage() -> dict:
    return render_inventory(load_spec(EXAMPLES / "lab-storage.yaml"))


def members(inventory: dict, group: str) -> list[str]:
    return list(inventory["all"]["children"][group]["hosts"])


def test_controllers_keep_the_spec_order_so_the_first_is_the_primary(lab_storage: dict) -> None:
    assert members(lab_storage, "slurm_controllers") == ["ctl1", "ctl2"]
    assert members(lab_storage, "remediation_controllers") == ["ctl1", "ctl2"]


def test_gpu_nodes_carry_their_gres_and_size_and_spares_are_marked(lab_storage: dict) -> None:
    assert members(lab_storage, "slurm_compute") == ["gpu1", "gpu2", "gpu3", "gpu4"]
    assert members(lab_storage, "spares") == ["gpu4"]
    gpu1 = lab_storage["all"]["hosts"]["gpu1"]
    assert gpu1["slurm_compute_gpus"] == 8
    assert gpu1["slurm_compute_gpu_type"] == "h100-sxm5-80gb"
    assert gpu1["ha_ops_spare"] is False
    assert lab_storage["all"]["hosts"]["gpu4"]["ha_ops_spare"] is True


def test_every_host_has_its_address_and_failure_domain(lab_storage: dict) -> None:
    hosts = lab_storage["all"]["hosts"]
    assert hosts["ctl2"]["ansible_host"] == hosts["ctl2"]["slurm_address"] == "10.77.1.10"
    assert hosts["ctl2"]["ha_ops_failure_domain"] == "rack2"
    assert hosts["ctl2"]["ha_ops_zone"] == "zone-a"
    assert set(members(lab_storage, "domain_rack1")) | set(members(lab_storage, "domain_rack2")) == set(hosts)
    assert "ctl1" in members(lab_storage, "rack_r1") and "ctl2" in members(lab_storage, "rack_r2")
    assert set(members(lab_storage, "zone_zone_a")) == set(hosts)


def test_storage_groups_and_the_replica_count_come_from_the_spec(lab_storage: dict) -> None:
    assert members(lab_storage, "moosefs_master") == ["mfsm"]
    assert members(lab_storage, "moosefs_metalogger") == ["mfsml"]
    assert members(lab_storage, "moosefs_chunkserver") == ["cs1", "cs2", "cs3"]
    assert set(members(lab_storage, "moosefs_client")) == {"ctl1", "ctl2", "gpu1", "gpu2", "gpu3", "gpu4"}
    cluster = lab_storage["all"]["vars"]
    assert cluster["moosefs_goal"] == 2
    assert cluster["slurm_controller_cluster_name"] == "labstor"
    assert cluster["slurm_controller_slurmctld_timeout"] == 20
    assert cluster["monitoring_controller_port"] == 8800
    assert cluster["ha_ops_agent_metrics_port"] == cluster["monitoring_agent_port"] == 9426


def test_names_become_valid_group_names_and_gres_types() -> None:
    assert group_name("zone-a.1") == "zone_a_1"
    assert gres_type("H100-SXM5-80GB") == "h100-sxm5-80gb"
    assert gres_type("A100 80GB PCIe") == "a100-80gb-pcie"


def test_the_production_example_renders_every_gpu_node() -> None:
    spec = load_spec(EXAMPLES / "production.yaml")
    inventory = render_inventory(spec)
    assert len(members(inventory, "gpu_nodes")) == sum(p.count for p in spec.pools)


def test_cli_writes_yaml_and_json(tmp_path: Path) -> None:
    out = tmp_path / "inventory.yml"
    result = runner.invoke(app, ["inventory", "--spec", str(EXAMPLES / "lab.yaml"), "--out", str(out)],
                           catch_exceptions=False)  # fmt: skip
    assert result.exit_code == 0, result.output
    written = yaml.safe_load(out.read_text())
    assert "slurm_controllers" in written["all"]["children"]
    result = runner.invoke(app, ["inventory", "--spec", str(EXAMPLES / "lab.yaml"), "--json"], catch_exceptions=False)
    assert json.loads(result.stdout) == written


def test_a_bad_spec_is_refused_naming_the_field(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text((EXAMPLES / "lab.yaml").read_text().replace("gpus_per_node: 8", "gpus_per_node: 0"))
    assert run_main(monkeypatch, "inventory", "--spec", str(bad)) == 2
    assert "gpus_per_node" in capsys.readouterr().err


def test_an_existing_cluster_keeps_its_hosts_addresses_and_bmcs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """The spec of a cluster that exists (examples/existing-cluster.yaml) renders the inventory Ansible and
    `ha-ops power` reach its hosts with: their own names and addresses, racks, marked spares, BMCs by reference."""
    out = tmp_path / "inventory.yml"
    code = run_main(monkeypatch, "inventory", "--spec", str(EXAMPLES / "existing-cluster.yaml"), "--out", str(out))
    assert code == 0, capsys.readouterr().err
    inventory = yaml.safe_load(out.read_text())
    hosts = inventory["all"]["hosts"]
    assert members(inventory, "slurm_controllers") == ["slurm-ctl-a", "slurm-ctl-b"]
    assert members(inventory, "slurm_compute")[:2] == ["dgx-a01-1", "dgx-a01-2"]
    assert members(inventory, "spares") == ["dgx-b01-2"]
    assert members(inventory, "rack_b01") == ["slurm-ctl-b", "dgx-b01-1", "dgx-b01-2"]
    assert hosts["dgx-a02-1"]["ansible_host"] == "10.40.2.11"
    assert hosts["dgx-a02-1"]["ha_ops_bmc"] == {"kind": "redfish", "address": "https://10.41.2.11", "user": "ha-ops",
                                                 "password_env": "HA_OPS_BMC_PASSWORD"}  # fmt: skip
    assert hosts["slurm-ctl-a"]["ha_ops_bmc"]["password_file"] == "/etc/ha-ops/bmc-password"
    assert "ha_ops_bmc" not in hosts["metrics-1"]  # none given: `ha-ops power` refuses it by name
    from ha_ops.cluster.power import BmcConfig

    assert BmcConfig.model_validate(hosts["dgx-a01-1"]["ha_ops_bmc"]).kind == "redfish"  # what `ha-ops power` reads


def test_the_lab_refuses_an_existing_clusters_spec_before_building_anything() -> None:
    from ha_ops.errors import SpecError
    from ha_ops.lab.cluster import Lab

    with pytest.raises(SpecError) as caught:
        Lab(load_spec(EXAMPLES / "existing-cluster.yaml")).up()
    assert caught.value.source == "failure_domains[0].subnet" and "builds its own fabric" in str(caught.value)


# `--addresses`: the hosts where a cloud stack (infra/aws) really put them.


def inventory_with(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, spec: str, addresses: Path,
                   ) -> tuple[dict, str]:  # fmt: skip
    """The --json inventory of an example with --addresses, once it exited 0, and what it wrote on stderr."""
    code = run_main(monkeypatch, "inventory", "--spec", str(EXAMPLES / spec), "--addresses", str(addresses), "--json")
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out), captured.err


def test_addresses_override_the_spec_addresses_of_the_hosts_they_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    spec = load_spec(EXAMPLES / "lab-storage.yaml")
    picked = {node.name: f"172.31.{i}.7" for i, node in enumerate(compute_layout(spec).nodes)}
    addresses = tmp_path / "addresses.yml"  # the plain form, in YAML
    addresses.write_text(yaml.safe_dump(picked))
    inventory, err = inventory_with(monkeypatch, capsys, "lab-storage.yaml", addresses)
    hosts = inventory["all"]["hosts"]
    assert {h: (v["ansible_host"], v["slurm_address"]) for h, v in hosts.items()} == {
        h: (a, a) for h, a in picked.items()
    }
    assert "warning" not in err  # every host has its address
    # The firewall rules are rendered from the same addresses: gpu1 lets the controllers in at their new ones.
    ruleset = hosts["gpu1"]["host_firewall_ruleset"]
    assert picked["ctl1"] in ruleset and "10.77.0.10" not in ruleset


def test_addresses_from_a_stack_output_are_its_nodes_and_the_hosts_left_out_are_named_in_one_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    spec = load_spec(EXAMPLES / "production.yaml")
    layout = compute_layout(spec)
    built = [n.name for n in layout.nodes if {"gpu", "controller"} & set(n.roles)]  # what infra/aws builds
    nodes = {name: f"10.80.{i // 200}.{i % 200 + 20}" for i, name in enumerate(built)}
    outputs = tmp_path / "addresses.json"  # `pulumi stack output --json > addresses.json`
    outputs.write_text(json.dumps({"nodes": nodes, "etcd_members": {"etcd1": "10.80.0.30"}, "vpc_id": "vpc-1",
                                   "nat_public_ips": {"us-east-1a": "198.51.100.1"}}, indent=4))  # fmt: skip
    monkeypatch.setenv("HA_OPS_QUIET", "1")  # (quiet hides progress, never a warning)
    inventory, err = inventory_with(monkeypatch, capsys, "production.yaml", outputs)
    hosts = inventory["all"]["hosts"]
    assert all(hosts[h]["ansible_host"] == hosts[h]["slurm_address"] == a for h, a in nodes.items())
    assert "etcd1" not in hosts and "vpc_id" not in hosts  # the other outputs are not hosts
    left_out = [n for n in layout.nodes if n.name not in nodes]
    assert sorted(n.name for n in left_out) == ["mfs1", "mfs2", "mfs3", "mfsm1", "mfsm2", "mon1"]
    assert all(hosts[n.name]["ansible_host"] == str(n.address) for n in left_out)  # they keep the spec's
    (warning,) = err.strip().splitlines()
    assert warning.startswith("warning:") and str(outputs) in warning
    assert warning.endswith(": " + ", ".join(n.name for n in left_out))


def inventory_of_production(monkeypatch: pytest.MonkeyPatch, addresses: Path) -> int:
    """`ha-ops inventory` of the production example with an --addresses file: its exit code."""
    return run_main(
        monkeypatch, "inventory", "--spec", str(EXAMPLES / "production.yaml"), "--addresses", str(addresses)
    )


def test_an_address_for_a_host_the_spec_lacks_is_refused_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    addresses = tmp_path / "addresses.json"
    addresses.write_text(json.dumps({"nodes": {"gpu1": "10.80.0.20", "gpu99": "10.80.0.21"}}))
    code = inventory_of_production(monkeypatch, addresses)
    assert code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"--addresses {addresses}: gpu99: not a host of spec 'prod'" in captured.err
    assert "Traceback" not in captured.err


@pytest.mark.parametrize(
    ("name", "text", "named", "not_named"),
    [
        # Bad addresses: each named with its host, the good one not.
        ("addresses.yml", "gpu1: 10.80.0.300\ngpu2: 10.80.0.21\nctl1: 2001:db8::1\nctl2: null\n",
         ["--addresses {path}: invalid", "gpu1: '10.80.0.300' is not an IPv4 address",
          "ctl1: '2001:db8::1' is not an IPv4 address", "ctl2: None is not an IPv4 address"], ["gpu2"]),
        # A file that is no mapping at all.
        ("addresses.json", '["10.80.0.20"]', ["the top level must be a mapping of hosts to addresses, got list"], []),
    ],
)  # fmt: skip
def test_a_bad_addresses_file_is_refused_naming_what_is_wrong(
    name: str, text: str, named: list[str], not_named: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:  # fmt: skip
    addresses = tmp_path / name
    addresses.write_text(text)
    assert inventory_of_production(monkeypatch, addresses) == 2
    err = capsys.readouterr().err
    for line in named:
        assert line.format(path=addresses) in err
    for word in not_named:
        assert word not in err


def test_resolving_addresses_reports_every_problem_at_once() -> None:
    spec = load_spec(EXAMPLES / "lab.yaml")
    with pytest.raises(SpecError) as caught:
        resolve_addresses(spec, {"nope": "10.0.0.1", "gpu1": 167772161, "gpu2": "10.0.0.2"}, "--addresses a.json")
    assert caught.value.source == "--addresses a.json"
    assert caught.value.problems == ["nope: not a host of spec 'lab'", "gpu1: 167772161 is not an IPv4 address"]
    resolved, unlisted = resolve_addresses(spec, addresses_in({"gpu2": " 10.0.0.2 "}, "x"), "x")
    assert resolved == {"gpu2": IPv4Address("10.0.0.2")}
    assert "gpu2" not in unlisted and len(unlisted) == len(compute_layout(spec).nodes) - 1
