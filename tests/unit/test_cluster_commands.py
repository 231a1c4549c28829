"""The commands a real host runs for each fault operation, and the operations as journaled data."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ha_ops.cluster import commands
from ha_ops.cluster.ops import OPS, FilterOp, FilterRule, LinkOp, PowerOp, QdiscOp, ServiceOp, capability, describe


def argvs(cmds: list[commands.Command]) -> list[list[str]]:
    return [list(c.argv) for c in cmds]


@pytest.mark.parametrize(
    ("action", "argv", "check"),
    [
        ("start", ["systemctl", "start", "slurmd"], True),
        ("stop", ["systemctl", "stop", "slurmd"], True),
        ("restart", ["systemctl", "restart", "slurmd"], True),
        ("kill", ["systemctl", "kill", "--signal=SIGKILL", "slurmd"], True),
        ("freeze", ["systemctl", "kill", "--signal=SIGSTOP", "slurmd"], True),
        ("thaw", ["systemctl", "kill", "--signal=SIGCONT", "slurmd"], False),
    ],
)
def test_services_go_through_systemctl(action: str, argv: list[str], check: bool) -> None:
    (command,) = commands.service(ServiceOp(host="gpu1", unit="slurmd", action=action))  # type: ignore[arg-type]
    assert list(command.argv) == argv
    assert command.check is check


def test_services_are_sent_as_the_units_a_host_runs_them_as() -> None:
    (agent,) = commands.service(ServiceOp(host="gpu1", unit="agent", action="freeze"))
    assert list(agent.argv) == ["systemctl", "kill", "--signal=SIGSTOP", "ha-ops-agent"]
    assert list(commands.service_active("chunkserver").argv)[-1] == "moosefs-chunkserver"
    # the inventory's ha_ops_units names another unit; a service no mapping knows is its own unit
    (own,) = commands.service(ServiceOp(host="gpu1", unit="agent", action="start"), {"agent": "gpu-agent"})
    assert list(own.argv) == ["systemctl", "start", "gpu-agent"]
    assert list(commands.service_loaded("slurmctld", {"agent": "x"}).argv)[-1] == "slurmctld"


def test_links_and_rate_limits() -> None:
    assert argvs(commands.link(LinkOp(host="gpu1", interface="eth0", up=False))) == [
        ["ip", "link", "set", "dev", "eth0", "down"]
    ]
    assert argvs(commands.qdisc(QdiscOp(host="gpu1", interface="eth0", rate_mbit=10))) == [
        [
            "tc",
            "qdisc",
            "replace",
            "dev",
            "eth0",
            "root",
            "tbf",
            "rate",
            "10mbit",
            "burst",
            "32kbit",
            "latency",
            "400ms",
        ]
    ]
    (removal,) = commands.qdisc(QdiscOp(host="gpu1", interface="eth0"))
    assert list(removal.argv) == ["tc", "qdisc", "del", "dev", "eth0", "root"]
    assert removal.check is False  # no limit left is what removal wants


PARTITION = FilterOp(
    host="gpu1",
    chain="HAO-PART",
    rules=(FilterRule(hook="input", source="10.0.0.2"), FilterRule(hook="output", destination="10.0.0.2")),
)


def test_iptables_rules_hook_one_chain_each_once() -> None:
    assert argvs(commands.filters(PARTITION, "iptables")) == [
        ["iptables", "-w", "-t", "filter", "-N", "HAO-PART"],
        ["iptables", "-w", "-t", "filter", "-A", "HAO-PART", "-s", "10.0.0.2", "-j", "DROP"],
        ["iptables", "-w", "-t", "filter", "-A", "HAO-PART", "-d", "10.0.0.2", "-j", "DROP"],
        ["iptables", "-w", "-t", "filter", "-I", "INPUT", "1", "-j", "HAO-PART"],
        ["iptables", "-w", "-t", "filter", "-I", "OUTPUT", "1", "-j", "HAO-PART"],
    ]
    both_ways = (FilterRule(hook="prerouting", in_interface="h0"), FilterRule(hook="postrouting", out_interface="h0"))
    silent = FilterOp(host="leaf1", chain="HAO-SILENT", rules=both_ways)
    rendered = argvs(commands.filters(silent, "iptables"))
    assert ["iptables", "-w", "-t", "raw", "-A", "HAO-SILENT", "-i", "h0", "-j", "DROP"] in rendered
    assert ["iptables", "-w", "-t", "mangle", "-I", "POSTROUTING", "1", "-j", "HAO-SILENT"] in rendered
    loss = FilterOp(host="gpu1", chain="HAO-LOSS", rules=(FilterRule(hook="input", probability=0.3),))
    assert "--probability" in argvs(commands.filters(loss))[1] and "0.3000" in argvs(commands.filters(loss))[1]


def test_iptables_removal_removes_every_jump_in_every_table() -> None:
    (command,) = commands.filters(FilterOp(host="gpu1", chain="HAO-PART", remove=True), "iptables")
    script = command.argv[2]
    for table, hook in (("raw", "PREROUTING"), ("mangle", "POSTROUTING"), ("filter", "INPUT"), ("filter", "OUTPUT")):
        assert f"while iptables -w -t {table} -D {hook} -j HAO-PART" in script
        assert f"iptables -w -t {table} -X HAO-PART" in script
    assert script.endswith("true")  # removing what a killed run never added is not an error


def test_nftables_renders_one_base_chain_per_hook() -> None:
    (command,) = commands.filters(PARTITION, "nftables")
    assert list(command.argv) == ["nft", "-f", "-"]
    assert command.input is not None
    assert "table inet ha_ops_chaos {" in command.input
    assert "chain HAO-PART-input {" in command.input and "type filter hook input priority 0;" in command.input
    assert "ip saddr 10.0.0.2 drop" in command.input and "ip daddr 10.0.0.2 drop" in command.input
    v6 = FilterOp(host="gpu1", chain="HAO-PART", rules=(FilterRule(hook="input", source="fd00::2"),))
    assert "ip6 saddr fd00::2 drop" in (commands.filters(v6, "nftables")[0].input or "")
    loss = FilterOp(host="gpu1", chain="HAO-LOSS", rules=(FilterRule(hook="input", probability=0.25),))
    assert "numgen random mod 10000 < 2500 drop" in (commands.filters(loss, "nftables")[0].input or "")
    (removal,) = commands.filters(FilterOp(host="gpu1", chain="HAO-PART", remove=True), "nftables")
    assert "nft delete chain inet ha_ops_chaos HAO-PART-input" in removal.argv[2]
    assert str(command).startswith("nft -f - <<'EOF'\ntable inet ha_ops_chaos {")


def test_operations_round_trip_through_the_journal_and_refuse_bad_values() -> None:
    ops = [PARTITION, PowerOp(host="gpu2", action="cycle"), ServiceOp(host="ctl1", unit="slurmctld", action="kill")]
    assert OPS.validate_json(OPS.dump_json(ops)) == ops
    assert [capability(op) for op in ops] == ["filters", "power", "services"]
    assert describe(ops[1]) == "power cycle gpu2"
    with pytest.raises(ValidationError):
        FilterOp(host="gpu1", chain="not-ours")  # only ha-ops' own chains are ever added or removed
    with pytest.raises(ValidationError):
        OPS.validate_python([{"kind": "service", "host": "a", "unit": "b", "action": "explode"}])
