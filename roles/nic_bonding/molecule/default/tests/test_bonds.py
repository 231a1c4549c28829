"""The rendered bonds, read back through each system's own parser where the container has it."""

import pytest

testinfra_hosts = ["podman://hao-nic-bonding"]


def test_netplan_generates_an_802_3ad_bond_with_fast_lacp(host):
    f = host.file("/etc/netplan/60-ha-ops-bonds.yaml")
    assert f.mode == 0o600
    host.run_test("netplan generate")
    netdev = host.file("/run/systemd/network/10-netplan-bond0.netdev").content_string
    assert "Kind=bond" in netdev
    assert "Mode=802.3ad" in netdev
    assert "LACPTransmitRate=fast" in netdev
    assert "TransmitHashPolicy=layer3+4" in netdev
    assert "MIIMonitorSec=100ms" in netdev
    assert "MTUBytes=9000" in netdev


def test_netplan_generates_an_active_backup_bond_with_its_primary(host):
    netdev = host.file("/run/systemd/network/10-netplan-bond1.netdev").content_string
    assert "Mode=active-backup" in netdev
    assert "MIIMonitorSec=50ms" in netdev
    assert "LACPTransmitRate" not in netdev
    primary = host.file("/run/systemd/network/10-netplan-ib0.network").content_string
    assert "PrimarySlave=true" in primary
    assert "Bond=bond1" in primary


def test_netplan_bond_carries_the_address_and_gateway(host):
    network = host.file("/run/systemd/network/10-netplan-bond0.network").content_string
    assert "Address=192.0.2.10/24" in network
    assert "Gateway=192.0.2.1" in network


@pytest.mark.parametrize("bond,mode", [("bond0", "802.3ad"), ("bond1", "active-backup")])
def test_ifupdown_parses_each_bond(host, bond, mode):
    out = host.check_output(f"ifquery --interfaces=/etc/network/interfaces {bond}")
    assert f"bond-mode: {mode}" in out
    members = "eth1 eth2" if bond == "bond0" else "ib0 ib1"
    assert f"bond-slaves: {members}" in out


def test_ifupdown_members_point_at_their_bond(host):
    out = host.check_output("ifquery --interfaces=/etc/network/interfaces eth2")
    assert "bond-master: bond0" in out
    assert "mtu: 9000" in out
    assert "bond-lacp-rate: fast" in host.check_output("ifquery --interfaces=/etc/network/interfaces bond0")


def test_networkmanager_keyfiles_are_private_and_complete(host):
    bond = host.file("/etc/NetworkManager/system-connections/ha-ops-bond0.nmconnection")
    assert bond.mode == 0o600
    text = bond.content_string
    for line in ("type=bond", "interface-name=bond0", "mode=802.3ad", "lacp_rate=fast", "miimon=100",
                 "xmit_hash_policy=layer3+4", "mtu=9000", "address1=192.0.2.10/24,192.0.2.1"):
        assert line in text, line
    member = host.file("/etc/NetworkManager/system-connections/ha-ops-member-ib1.nmconnection").content_string
    assert "master=bond1" in member and "slave-type=bond" in member and "mtu=4092" in member
    assert "primary=ib0" in host.file(
        "/etc/NetworkManager/system-connections/ha-ops-bond1.nmconnection").content_string
