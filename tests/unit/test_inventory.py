"""`ha-ops inventory --spec`: the Ansible inventory rendered from a cluster spec."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from ha_ops.cli.main import app
from ha_ops.spec import load_spec
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
