"""A real cluster's hosts from its Ansible inventory, parsed by ansible-inventory: YAML and INI, group_vars,
ha-ops' own variables, and one-line errors naming the host and the variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from ha_ops.cluster.inventory import load_inventory
from ha_ops.errors import SpecError

YAML = """\
all:
  vars:
    ansible_user: ops
    ansible_become: true
    ha_ops_known_hosts: /etc/ha-ops/known_hosts
    ha_ops_spec: cluster.yaml
  children:
    slurm_controllers:
      hosts:
        ctl1: {ansible_host: 10.0.0.11}
    gpu_nodes:
      vars:
        ha_ops_gpu_injection: dcgm
        ha_ops_firewall: nftables
      hosts:
        gpu1:
          ansible_host: 10.0.1.21
          ha_ops_bmc: {kind: redfish, address: "https://10.9.0.21", user: admin, password_env: BMC_PASSWORD}
        gpu2.example.com: {}
"""


def test_yaml_inventory_with_inherited_variables(tmp_path: Path) -> None:
    (tmp_path / "hosts.yml").write_text(YAML)
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "slurm_controllers.yml").write_text("ansible_port: 2222\n")
    inv = load_inventory(tmp_path / "hosts.yml")
    assert sorted(inv.hosts) == ["ctl1", "gpu1", "gpu2.example.com"]
    gpu1, ctl1 = inv.host("gpu1"), inv.host("ctl1")
    assert (gpu1.address, gpu1.user, gpu1.become, gpu1.firewall) == ("10.0.1.21", "ops", True, "nftables")
    assert gpu1.gpu_injection == "dcgm" and "gpu_nodes" in gpu1.groups
    assert gpu1.bmc is not None and gpu1.bmc.kind == "redfish" and gpu1.bmc.password_env == "BMC_PASSWORD"
    assert ctl1.port == 2222  # from group_vars/, as Ansible would
    assert str(ctl1.known_hosts) == "/etc/ha-ops/known_hosts"
    assert ctl1.bmc is None and ctl1.gpu_injection == "none"
    assert inv.host("gpu2.example.com").address == "gpu2.example.com"  # a full DNS name is its own address
    assert inv.spec == (tmp_path / "cluster.yaml").resolve()
    assert not inv.production
    with pytest.raises(SpecError, match="'gpu9' is not a host of this inventory"):
        inv.host("gpu9")


def test_ini_inventory(tmp_path: Path) -> None:
    (tmp_path / "hosts.ini").write_text(
        "[gpu_nodes]\ngpu1 ansible_host=10.0.1.21 ha_ops_fake_gpu_dir=/var/lib/fake-gpus\n"
        "[all:vars]\nha_ops_production=true\nansible_ssh_private_key_file=~/.ssh/ops\n"
    )
    inv = load_inventory(tmp_path / "hosts.ini")
    gpu1 = inv.host("gpu1")
    assert gpu1.gpu_injection == "fake" and gpu1.fake_gpu_dir == "/var/lib/fake-gpus"
    assert str(gpu1.key_file) == "~/.ssh/ops"
    assert inv.production  # faults need --confirm-production


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[gpu_nodes\ngpu1 ansible_host=", "does not parse as an Ansible inventory"),
        ("[gpu_nodes]\ngpu1\n", "gpu1: no address (set ansible_host)"),
        ("[g]\ngpu1 ansible_host=10.0.0.1 ansible_port=99999\n", "gpu1: ansible_port"),
        ("[g]\ngpu1 ansible_host=10.0.0.1 ha_ops_firewall=pf\n", "gpu1: ha_ops_firewall"),
        ("[g]\ngpu1 ansible_host=10.0.0.1 ha_ops_gpu_injection=fake\n", "gpu1: ha_ops_gpu_injection: fake needs"),
        (
            "all:\n  hosts:\n    gpu1:\n      ansible_host: 10.0.0.1\n"
            "      ha_ops_bmc: {kind: ipmi, address: 10.9.0.1, user: admin}\n",
            "gpu1: ha_ops_bmc: Value error, give exactly one of password_file and password_env",
        ),
    ],
)
def test_bad_inventories_are_one_line_errors_naming_the_problem(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / ("hosts.yml" if text.startswith("all:") else "hosts.ini")
    path.write_text(text)
    with pytest.raises(SpecError) as info:
        load_inventory(path)
    assert message in str(info.value)
    assert "\n" not in str(info.value)
    assert info.value.exit_code == 2


def test_a_missing_inventory_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no such inventory file"):
        load_inventory(tmp_path / "absent.yml")
