"""Bad role inputs are refused before the role changes anything, naming the field. The playbooks run against
localhost in check mode: validation is the first thing each role does, so nothing is touched either way."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
BIN = REPO / ".venv" / "bin"


def run_role(tmp_path: Path, role: str, variables: dict) -> subprocess.CompletedProcess:
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "input check", "hosts": "localhost", "connection": "local", "gather_facts": False,
        "roles": [{"role": role, "vars": variables}],
    }]))  # fmt: skip
    env = dict(os.environ, ANSIBLE_ROLES_PATH=str(REPO / "roles"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_INVENTORY_UNPARSED_WARNING="false")  # fmt: skip
    return subprocess.run([str(BIN / "ansible-playbook"), "--check", "-i", "localhost,", str(playbook)],
                          capture_output=True, text=True, env=env, timeout=120)  # fmt: skip


BOND = {"name": "bond0", "members": ["eth1", "eth2"]}

CASES = [
    (
        "nic_bonding",
        {"nic_bonding_bonds": [{"name": "bond0", "members": ["eth1"]}]},
        "nic_bonding_bonds[0] (bond0): members: a bond needs at least 2 members, got 1",
    ),
    ("nic_bonding", {"nic_bonding_bonds": [BOND | {"mode": "balance-rr"}]}, "balance-rr"),
    (
        "nic_bonding",
        {"nic_bonding_bonds": [BOND | {"primary": "eth1"}]},
        "primary: only active-backup has a primary member",
    ),
    (
        "nic_bonding",
        {"nic_bonding_bonds": [BOND | {"mode": "active-backup", "primary": "eth9"}]},
        "primary: eth9 is not one of the members",
    ),
    (
        "nic_bonding",
        {"nic_bonding_bonds": [BOND, {"name": "bond1", "members": ["eth2", "eth3"]}]},
        "nic_bonding_bonds: a NIC is used twice",
    ),
    ("nic_bonding", {"nic_bonding_bonds": [BOND | {"mtu": 100}]}, "mtu: 100 is outside 576-65520"),
    ("nic_bonding", {"nic_bonding_backend": "systemd-networkd"}, "nic_bonding_backend"),
    ("gpu_driver", {"gpu_driver_version": "latest"}, 'gpu_driver_version: "latest" is not a driver version'),
    ("gpu_driver", {"gpu_driver_version": "570.86.15", "gpu_driver_action": "upgrade"}, "gpu_driver_action"),
    (
        "gpu_driver",
        {"gpu_driver_version": "570.86.15", "gpu_driver_install_method": "archive"},
        "gpu_driver_archive_dir: required with gpu_driver_install_method archive",
    ),
    ("slurm_controller", {"slurm_controller_hosts": []}, "slurm_controller_hosts: no controller"),
    (
        "slurm_controller",
        {"slurm_controller_hosts": ["ctl1"], "slurm_controller_slurmctld_timeout": 3},
        "slurm_controller_slurmctld_timeout: below 4 s",
    ),
]


@pytest.mark.parametrize(("role", "variables", "message"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_bad_input_is_refused_naming_the_field(tmp_path: Path, role: str, variables: dict, message: str) -> None:
    result = run_role(tmp_path, role, variables)
    assert result.returncode != 0, result.stdout
    said = " ".join((result.stdout + result.stderr).split())
    assert message in said, said[-3000:]
    assert "changed=0" in said


def test_good_input_passes_validation(tmp_path: Path) -> None:
    """The same check-mode run with good bonds gets past validation (and fails only later, on this host's missing
    netplan), so the refusals above are about the inputs."""
    result = run_role(tmp_path, "nic_bonding", {"nic_bonding_bonds": [BOND], "nic_bonding_backend": "ifupdown",
                                                "nic_bonding_ifupdown_dir": str(tmp_path / "ifaces")})  # fmt: skip
    said = " ".join((result.stdout + result.stderr).split())
    assert "Check each bond's members, primary and MTU" in said
    assert "a bond needs" not in said
    assert "Render for ifupdown" in said
