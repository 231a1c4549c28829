"""The host firewall as the role leaves it: the ruleset loaded (policy drop, the peer's one flow), a unit that
loads it at boot, and from the peer container the allowed port reachable while another listening port is not
(dropped: the connection times out), though the host itself still reaches both."""

import testinfra

testinfra_hosts = ["podman://hao-host-firewall-1"]

peer = testinfra.get_host("podman://hao-host-firewall-2")


def listen(host, port):
    host.run_test(f"systemd-run --unit=probe-{port} python3 -m http.server {port} --bind 0.0.0.0")
    host.run_test(f"timeout 10 bash -c 'until </dev/tcp/127.0.0.1/{port}; do sleep 0.1; done'")


def test_the_ruleset_is_loaded_with_policy_drop(host):
    table = host.check_output("nft list table inet ha_ops")
    assert "policy drop;" in table and 'tcp dport 8800 accept comment "ha-ops-api"' in table
    assert "dropped: not a flow this cluster needs" in table


def test_a_unit_loads_it_at_boot(host):
    unit = host.service("ha-ops-firewall.service")
    assert unit.is_enabled and unit.is_running  # (a oneshot that remains after its exit)
    assert host.file("/etc/ha-ops/firewall.nft").mode == 0o640


def test_only_the_allowed_flow_gets_in(host):
    address = host.check_output("hostname -I").split()[0]
    for port in (8800, 9999):
        listen(host, port)
    assert peer.run(f"timeout 5 bash -c '</dev/tcp/{address}/8800'").rc == 0
    blocked = peer.run(f"timeout 3 bash -c '</dev/tcp/{address}/9999'")
    assert blocked.rc == 124, blocked  # dropped: no answer at all (refused would be rc 1)
    assert host.run("timeout 3 bash -c '</dev/tcp/127.0.0.1/9999'").rc == 0  # the host itself: through lo
    counter = host.check_output("nft list chain inet ha_ops input")
    dropped = int(counter.split("dropped: not a flow")[0].rsplit("packets", 1)[1].split()[0])
    assert dropped >= 1
