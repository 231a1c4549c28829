"""The commands a Linux host with systemd runs for each operation (ha_ops.cluster.ops): systemctl for services,
ip for links, iptables or nftables for drop filters, tc for rate limits. Pure functions, so that `--dry-run` prints
exactly what a run would execute, and the SSH node executes exactly what was printed."""

from __future__ import annotations

import ipaddress
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from ha_ops.cluster.ops import FilterHook, FilterOp, FilterRule, LinkOp, QdiscOp, ServiceAction, ServiceOp

Firewall = Literal["iptables", "nftables"]


@dataclass(frozen=True)
class Command:
    argv: tuple[str, ...]
    input: str | None = None
    check: bool = True  # False: a failure is expected and harmless (removing what is already gone)

    def __str__(self) -> str:
        text = shlex.join(self.argv)
        return f"{text} <<'EOF'\n{self.input}EOF" if self.input else text


# systemctl verbs for each service action. Freeze and thaw signal every process of the unit, as `kill` does:
# systemd itself sends them, so the unit's whole cgroup is affected and nothing is matched by name.
SYSTEMCTL: dict[ServiceAction, tuple[str, ...]] = {
    "start": ("start",),
    "stop": ("stop",),
    "restart": ("restart",),
    "kill": ("kill", "--signal=SIGKILL"),
    "freeze": ("kill", "--signal=SIGSTOP"),
    "thaw": ("kill", "--signal=SIGCONT"),
}


# Experiments name a service as ha-ops does (agent, controller, chunkserver, ...); a host runs it as the systemd
# unit its package or ha-ops' role installs. An inventory may name other units per host (`ha_ops_units`).
UNITS: dict[str, str] = {
    "agent": "ha-ops-agent",
    "controller": "ha-ops-controller",
    "alertmanager": "prometheus-alertmanager",
    "mfsmaster": "moosefs-master",
    "chunkserver": "moosefs-chunkserver",
    "metalogger": "moosefs-metalogger",
    "storage-watch": "ha-ops-storage-watch",
}


def unit_of(service: str, units: Mapping[str, str] | None = None) -> str:
    """The systemd unit that runs `service` on a host (a name no mapping knows is taken as the unit itself)."""
    return (units or {}).get(service) or UNITS.get(service, service)


def service(op: ServiceOp, units: Mapping[str, str] | None = None) -> list[Command]:
    # A thaw of a unit that is not running has nothing to do; systemctl says so with a non-zero exit.
    return [Command(("systemctl", *SYSTEMCTL[op.action], unit_of(op.unit, units)), check=op.action != "thaw")]


def service_active(service: str, units: Mapping[str, str] | None = None) -> Command:
    return Command(("systemctl", "is-active", "--quiet", unit_of(service, units)), check=False)


def service_loaded(service: str, units: Mapping[str, str] | None = None) -> Command:
    """Prints the unit's LoadState: `not-found` for a unit the host does not have."""
    return Command(("systemctl", "show", "--property=LoadState", "--value", unit_of(service, units)), check=False)


def service_enabled(service: str, units: Mapping[str, str] | None = None) -> Command:
    """Prints the unit's enablement: `masked` for a unit an operator fenced."""
    return Command(("systemctl", "is-enabled", unit_of(service, units)), check=False)


def link(op: LinkOp) -> list[Command]:
    return [Command(("ip", "link", "set", "dev", op.interface, "up" if op.up else "down"))]


def qdisc(op: QdiscOp) -> list[Command]:
    if op.rate_mbit is None:
        return [Command(("tc", "qdisc", "del", "dev", op.interface, "root"), check=False)]
    return [Command(("tc", "qdisc", "replace", "dev", op.interface, "root", "tbf", "rate", f"{op.rate_mbit:g}mbit",
                     "burst", "32kbit", "latency", "400ms"))]  # fmt: skip


def filters(op: FilterOp, firewall: Firewall = "iptables") -> list[Command]:
    if firewall == "nftables":
        return _nft_remove(op.chain) if op.remove else _nft_add(op)
    return _iptables_remove(op.chain) if op.remove else _iptables_add(op)


# --- iptables ---------------------------------------------------------------------------------------------------
# Each hook's table and built-in chain: drops before routing in raw (conntrack never sees them), after it in mangle.
IPTABLES_HOOKS: dict[FilterHook, tuple[str, str]] = {
    "prerouting": ("raw", "PREROUTING"),
    "postrouting": ("mangle", "POSTROUTING"),
    "input": ("filter", "INPUT"),
    "output": ("filter", "OUTPUT"),
}


def _iptables(rule: FilterRule) -> list[str]:
    match: list[str] = []
    if rule.in_interface:
        match += ["-i", rule.in_interface]
    if rule.out_interface:
        match += ["-o", rule.out_interface]
    if rule.source:
        match += ["-s", rule.source]
    if rule.destination:
        match += ["-d", rule.destination]
    if rule.probability is not None:
        match += ["-m", "statistic", "--mode", "random", "--probability", f"{rule.probability:.4f}"]
    return match


def _iptables_add(op: FilterOp) -> list[Command]:
    hooks = list(dict.fromkeys(IPTABLES_HOOKS[r.hook] for r in op.rules))
    commands = [Command(("iptables", "-w", "-t", table, "-N", op.chain), check=False) for table in
                dict.fromkeys(t for t, _ in hooks)]  # fmt: skip
    for rule in op.rules:
        table, _ = IPTABLES_HOOKS[rule.hook]
        commands.append(Command(("iptables", "-w", "-t", table, "-A", op.chain, *_iptables(rule), "-j", "DROP")))
    commands += [Command(("iptables", "-w", "-t", table, "-I", hook, "1", "-j", op.chain)) for table, hook in hooks]
    return commands


def _iptables_remove(chain: str) -> list[Command]:
    # Every jump to the chain (however many a killed run left), then the chain itself, in every table it may be in.
    script = "".join(
        f"while iptables -w -t {table} -D {hook} -j {chain} 2>/dev/null; do :; done; "
        f"iptables -w -t {table} -F {chain} 2>/dev/null; iptables -w -t {table} -X {chain} 2>/dev/null; "
        for table, hook in IPTABLES_HOOKS.values()
    )
    return [Command(("sh", "-c", script + "true"))]


# --- nftables ---------------------------------------------------------------------------------------------------
NFT_TABLE = "ha_ops_chaos"
# A drop in any base chain drops the packet, whatever other tables accept: the priorities only order the hooks.
NFT_PRIORITY: dict[FilterHook, int] = {"prerouting": -300, "postrouting": -150, "input": 0, "output": 0}


def _nft_match(rule: FilterRule) -> str:
    parts = []
    if rule.in_interface:
        parts.append(f'iifname "{rule.in_interface}"')
    if rule.out_interface:
        parts.append(f'oifname "{rule.out_interface}"')
    for field, address in (("saddr", rule.source), ("daddr", rule.destination)):
        if address:
            family = "ip6" if ipaddress.ip_network(address, strict=False).version == 6 else "ip"
            parts.append(f"{family} {field} {address}")
    if rule.probability is not None:
        parts.append(f"numgen random mod 10000 < {round(rule.probability * 10000)}")
    return " ".join([*parts, "drop"])


def _nft_add(op: FilterOp) -> list[Command]:
    lines = [f"table inet {NFT_TABLE} {{"]
    for hook in dict.fromkeys(r.hook for r in op.rules):
        kind = "filter"
        lines.append(f"  chain {op.chain}-{hook} {{")
        lines.append(f"    type {kind} hook {hook} priority {NFT_PRIORITY[hook]}; policy accept;")
        lines += [f"    {_nft_match(r)}" for r in op.rules if r.hook == hook]
        lines.append("  }")
    lines.append("}")
    return [Command(("nft", "-f", "-"), input="\n".join(lines) + "\n")]


def _nft_remove(chain: str) -> list[Command]:
    script = "".join(f"nft delete chain inet {NFT_TABLE} {chain}-{hook} 2>/dev/null; " for hook in NFT_PRIORITY)
    return [Command(("sh", "-c", script + "true"))]
