"""The lab's host firewalls (spec `firewall`): each host node's namespace gets the nftables ruleset the cluster
spec gives it (ha_ops.security.firewall), with the operator's machine on the management network as its admin
host, as a real cluster's bastion would be. Switches are not filtered (they forward; their BGP is theirs)."""

from __future__ import annotations

from pathlib import Path

from ha_ops.lab import kubelets, mgmt
from ha_ops.lab.context import LabContext
from ha_ops.lab.netns import NETNS_DIR
from ha_ops.security.firewall import Rule, dropped_packets, host_rules, render_nft
from ha_ops.util.proc import run


def enabled(ctx: LabContext) -> bool:
    return ctx.spec.firewall is not None


def rules(ctx: LabContext, host: str) -> list[Rule]:
    found = host_rules(ctx.spec, ctx.layout, host, admin=(str(mgmt.operator_address(ctx)),))
    if ctx.spec.kubernetes is not None and host in kubelets.names(ctx):
        # The lab's stand-in for kube-proxy: pods reach the API through the relay on their node's Service address
        # (ha_ops.lab.api_proxy), so the node itself takes that port from its pods.
        found.append(Rule("kubernetes-service (the lab's relay)", (str(ctx.spec.kubernetes.pod_cidr),), (443, 443)))
    return found


def ruleset_path(ctx: LabContext, host: str) -> Path:
    return ctx.paths.etc / "firewall" / f"{host}.nft"


def apply(ctx: LabContext) -> None:
    """Every host's ruleset written and loaded into its namespace (replacing the table whole: idempotent)."""
    if not enabled(ctx):
        return
    for node in ctx.layout.nodes:
        path = ruleset_path(ctx, node.name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render_nft(node.name, rules(ctx, node.name)))
        run(["nsenter", f"--net={NETNS_DIR / ctx.netns(node.name)}", "nft", "-f", str(path)], timeout=10)


def dropped(ctx: LabContext, host: str) -> int:
    """Packets the host's firewall dropped so far (its final counter)."""
    argv = ["nsenter", f"--net={NETNS_DIR / ctx.netns(host)}", "nft", "-j", "list", "chain", "inet", "ha_ops", "input"]
    return dropped_packets(run(argv, timeout=10).stdout)
