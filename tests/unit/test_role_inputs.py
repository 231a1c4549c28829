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
    ("ha_ops_controller", {}, "ha_ops_controller_state_dir: required"),
    (  # secure by default (issue 44, finding 4): plain HTTP only when meant, and never in production
        "ha_ops_controller",
        {
            "ha_ops_controller_state_dir": "/srv/ha-ops",
            "ha_ops_controller_audit_key": "ab" * 32,
            "ha_ops_controller_tls": {},
        },
        "ha_ops_controller_tls: {} serves the API over plain HTTP",
    ),
    (
        "ha_ops_controller",
        {
            "ha_ops_controller_state_dir": "/srv/ha-ops",
            "ha_ops_controller_audit_key": "ab" * 32,
            "ha_ops_controller_tls": {},
            "ha_ops_controller_insecure": True,
            "ha_ops_production": True,
        },
        "ha_ops_controller_tls: {} serves the API over plain HTTP",
    ),
    (  # plain HTTP meant: past that check, refused at the next (this host is no controller)
        "ha_ops_controller",
        {
            "ha_ops_controller_state_dir": "/srv/ha-ops",
            "ha_ops_controller_audit_key": "ab" * 32,
            "ha_ops_controller_tls": {},
            "ha_ops_controller_insecure": True,
        },
        "ha_ops_controller_group: localhost is not in the group remediation_controllers",
    ),
    (
        "ha_ops_agent",
        {"ha_ops_agent_controller_urls": ["http://10.0.0.1:8800/v1/reports"], "ha_ops_agent_controller_tls": {}},
        "ha_ops_agent_controller_tls: {} reports over plain HTTP",
    ),
    (
        "ha_ops_controller",
        {"ha_ops_controller_state_dir": "/srv/ha-ops", "ha_ops_controller_audit_key": "secret"},
        "ha_ops_controller_audit_key: required, 64 or more hex digits",
    ),
    (
        "ha_ops_controller",
        {"ha_ops_controller_state_dir": "/srv/ha-ops", "ha_ops_controller_audit_key": "ab" * 32},
        "ha_ops_controller_group: localhost is not in the group remediation_controllers",
    ),
    ("ha_ops_audit_sink", {}, "ha_ops_audit_sink_permitted_peers: nobody may ship"),
    (
        "ha_ops_audit_sink",
        {"ha_ops_audit_sink_permitted_peers": ["ctl1", 'ctl"2']},
        "ha_ops_audit_sink_permitted_peers[1]:",
    ),
    (
        "ha_ops_audit_sink",
        {
            "ha_ops_audit_sink_permitted_peers": ["ctl1"],
            "ha_ops_audit_sink_cert_file": "/nonexistent/sink.crt",
            "ansible_python_interpreter": str(BIN / "python"),
        },  # (it looks: the first module the role runs)
        "ha_ops_audit_sink_cert_file: /nonexistent/sink.crt is not on localhost",
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


def test_the_moosefs_roles_failover_config_is_one_the_storage_watcher_loads(tmp_path: Path) -> None:
    """The role's template for `ha-ops storage watch` renders a config the watcher accepts, with the fence and the
    promotion on the service address."""
    from ha_ops.storage.failover import load_failover_config

    out = tmp_path / "storage-watch.yaml"
    role_vars = {
        "moosefs_master_name": "mfsm", "moosefs_master_ip": "10.0.0.5", "moosefs_client_port": 9421,
        "moosefs_chunkservers": ["cs1", "cs2"], "moosefs_failover_prefix": 24, "moosefs_failover_interface": "bond0",
        "moosefs_failover_after_s": 5,
        "moosefs_failover_power_off_command": "ha-ops power off {node} --inventory /etc/ha-ops/hosts.yml",
        "moosefs_failover_state_dir": "/var/lib/ha-ops/storage-watch",
        "moosefs_failover_ssh_key": "/etc/ha-ops/storage-watch/id_ed25519",
        "moosefs_failover_known_hosts": "/etc/ha-ops/storage-watch/known_hosts",
    }  # fmt: skip
    template = REPO / "roles" / "moosefs" / "templates" / "storage-watch.yaml.j2"
    (tmp_path / "render.yml").write_text(yaml.safe_dump([{
        "name": "render", "hosts": "mfsml", "gather_facts": False, "vars": role_vars,
        "tasks": [{"ansible.builtin.template": {"src": str(template), "dest": str(out)}}],
    }]))  # fmt: skip
    # The chunkservers' addresses come from the inventory, as the role reads them (hostvars).
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": {
        "mfsml": {"ansible_connection": "local", "ansible_python_interpreter": str(BIN / "python")},
        "cs1": {"ansible_host": "10.0.0.21"}, "cs2": {"ansible_host": "10.0.0.22"},
    }}}))  # fmt: skip
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="false")
    argv = [str(BIN / "ansible-playbook"), "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "render.yml")]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    config = load_failover_config(out)
    assert (config.id, config.master_host, config.master_address) == ("mfsml", "mfsm", "10.0.0.5")
    assert config.peers == ["10.0.0.21:9422", "10.0.0.22:9422"]
    assert config.fence_command.startswith("systemctl mask --now moosefs-master && { ip addr del 10.0.0.5/24 dev bond0")
    assert "ip addr replace 10.0.0.5/24 dev bond0" in config.promote_command
    assert config.promote_command.endswith("arping -q -U -c 2 -I bond0 10.0.0.5 >/dev/null 2>&1 & } && mfsmaster -a")
    assert config.power_off_command == role_vars["moosefs_failover_power_off_command"]
