"""Fabric: the leaf-spine plan of `ha_ops.iac.plans.fabric` as resources, one per switch and per link."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from ha_ops.iac.factories import LinkFactory, SwitchFactory
from ha_ops.iac.plans.fabric import FabricPlan, plan_fabric
from ha_ops.iac.policy import check_fabric
from ha_ops.iac.violations import enforce
from ha_ops.spec.model import ClusterSpec


@dataclass(frozen=True)
class FabricArgs:
    spec: ClusterSpec
    switch_factory: SwitchFactory
    link_factory: LinkFactory


class Fabric(pulumi.ComponentResource):
    spines: pulumi.Output[list[str]]
    leaves: pulumi.Output[list[str]]
    homing: pulumi.Output[dict[str, list[str]]]

    def __init__(self, name: str, args: FabricArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        plan = plan_fabric(args.spec)
        enforce(check_fabric(plan), f"Fabric {name}")
        self.plan: FabricPlan = plan
        super().__init__("haops:network:Fabric", name, None, opts)

        self.switches: dict[str, pulumi.Resource] = {
            s.name: args.switch_factory(f"{name}-{s.name}", s, pulumi.ResourceOptions(parent=self))
            for s in plan.switches()
        }
        self.links: list[pulumi.Resource] = []
        for link in plan.links:
            # A link is cabled to the switches at its ends: it waits for them (a host end is not ours to wait for).
            ends = [self.switches[end] for end in (link.lower, link.upper) if end in self.switches]
            opts_link = pulumi.ResourceOptions(parent=self, depends_on=ends)
            self.links.append(args.link_factory(f"{name}-{link.lower}-{link.upper}", link, opts_link))

        self.spines = pulumi.Output.from_input([s.name for s in plan.spines])
        self.leaves = pulumi.Output.from_input([s.name for s in plan.leaves])
        self.homing = pulumi.Output.from_input({host: sorted(s) for host, s in plan.homing.items()})
        self.register_outputs(
            {
                "spines": self.spines,
                "leaves": self.leaves,
                "homing": self.homing,
                "links": len(plan.links),
                "switch_radix": plan.radix,
                "oversubscription": plan.oversubscription(),
            }
        )
