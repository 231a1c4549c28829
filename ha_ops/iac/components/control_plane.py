"""ControlPlane: the spec's Slurm controllers (primary and backup, in different failure domains) and the etcd
members, spread over failure domains and zones."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from ha_ops.iac.factories import NodeFactory
from ha_ops.iac.plans.control_plane import ETCD_MEMBERS, ControlPlanePlan, plan_control_plane
from ha_ops.iac.policy import check_control_plane, check_slurm_controllers
from ha_ops.iac.violations import enforce
from ha_ops.spec.model import ClusterSpec


@dataclass(frozen=True)
class ControlPlaneArgs:
    spec: ClusterSpec
    node_factory: NodeFactory
    etcd_members: int = ETCD_MEMBERS


class ControlPlane(pulumi.ComponentResource):
    slurm_primary: pulumi.Output[str]
    slurm_backup: pulumi.Output[str]
    etcd_initial_cluster: pulumi.Output[str]

    def __init__(self, name: str, args: ControlPlaneArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        spec = args.spec
        plan = plan_control_plane(spec, args.etcd_members)
        violations = check_slurm_controllers(spec) + check_control_plane(plan, len(spec.failure_domains))
        enforce(violations, f"ControlPlane {name}")
        self.plan: ControlPlanePlan = plan
        super().__init__("haops:control:ControlPlane", name, None, opts)

        child = pulumi.ResourceOptions(parent=self)
        self.slurm_controllers: dict[str, pulumi.Resource] = {
            n.name: args.node_factory(f"{name}-{n.name}", n, child) for n in plan.slurm
        }
        self.etcd: dict[str, pulumi.Resource] = {
            n.name: args.node_factory(f"{name}-{n.name}", n, child) for n in plan.etcd
        }
        self.slurm_primary = pulumi.Output.from_input(plan.slurm[0].name)
        self.slurm_backup = pulumi.Output.from_input(plan.slurm[1].name)
        self.etcd_initial_cluster = pulumi.Output.from_input(plan.etcd_initial_cluster())
        self.register_outputs(
            {
                "slurm_primary": self.slurm_primary,
                "slurm_backup": self.slurm_backup,
                "slurm_domains": {n.name: n.domain for n in plan.slurm},
                "etcd_members": [{"name": m.name, "domain": m.domain, "zone": m.zone} for m in plan.etcd],
                "etcd_initial_cluster": self.etcd_initial_cluster,
            }
        )
