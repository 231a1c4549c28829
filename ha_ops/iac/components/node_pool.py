"""GpuNodePool: one spec pool's nodes, spread over its failure domains as the layout places them, spares included."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from ha_ops.errors import SpecError
from ha_ops.iac.factories import NodeFactory
from ha_ops.iac.plans.nodes import PoolPlan, find_pool, plan_pool
from ha_ops.iac.policy import check_pools
from ha_ops.iac.violations import enforce
from ha_ops.spec.model import ClusterSpec


@dataclass(frozen=True)
class GpuNodePoolArgs:
    spec: ClusterSpec
    pool: str  # a pool name of the spec
    node_factory: NodeFactory


class GpuNodePool(pulumi.ComponentResource):
    node_names: pulumi.Output[list[str]]
    spares: pulumi.Output[list[str]]
    nodes_by_domain: pulumi.Output[dict[str, list[str]]]

    def __init__(self, name: str, args: GpuNodePoolArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        try:
            pool = find_pool(args.spec, args.pool)
        except KeyError as exc:
            raise SpecError(f"GpuNodePool {name}", [f"pool: {exc.args[0]}"]) from None
        where = f"pools[{args.spec.pools.index(pool)}]"
        # Before registering: a refused pool leaves nothing behind, not even an empty component.
        enforce([v for v in check_pools(args.spec) if v.field.startswith(where)], f"GpuNodePool {name}")
        self.plan: PoolPlan = plan_pool(args.spec, args.pool)
        super().__init__("haops:compute:GpuNodePool", name, None, opts)

        child = pulumi.ResourceOptions(parent=self)
        self.nodes: dict[str, pulumi.Resource] = {
            req.name: args.node_factory(f"{name}-{req.name}", req, child) for req in self.plan.nodes
        }
        self.node_names = pulumi.Output.from_input([n.name for n in self.plan.nodes])
        self.spares = pulumi.Output.from_input(self.plan.spares)
        self.nodes_by_domain = pulumi.Output.from_input(self.plan.by_domain())
        self.register_outputs(
            {
                "pool": pool.name,
                "node_names": self.node_names,
                "spares": self.spares,
                "nodes_by_domain": self.nodes_by_domain,
                "nodes_by_zone": self.plan.by_zone(),
                "gpus": sum(n.gpus for n in self.plan.nodes),
            }
        )
