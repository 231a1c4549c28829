"""ReplicatedStorage: the shared file system as one replica per failure domain (spread over zones), each built by
the replica factory, and the replica every failure domain mounts."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from ha_ops.iac.factories import StorageReplicaFactory
from ha_ops.iac.plans.storage import StoragePlan, plan_storage, spec_replicas
from ha_ops.iac.policy import check_storage
from ha_ops.iac.violations import enforce
from ha_ops.spec.model import ClusterSpec


@dataclass(frozen=True)
class ReplicatedStorageArgs:
    spec: ClusterSpec
    replica_factory: StorageReplicaFactory
    replicas: int | None = None  # default: the spec's storage.replicas


class ReplicatedStorage(pulumi.ComponentResource):
    mount_for_domain: pulumi.Output[dict[str, str]]

    def __init__(self, name: str, args: ReplicatedStorageArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        wanted = args.replicas if args.replicas is not None else spec_replicas(args.spec)
        plan = plan_storage(args.spec, wanted)
        enforce(check_storage(plan), f"ReplicatedStorage {name}")
        self.plan: StoragePlan = plan
        super().__init__("haops:storage:ReplicatedStorage", name, None, opts)

        child = pulumi.ResourceOptions(parent=self)
        self.replicas: dict[str, pulumi.Resource] = {
            r.name: args.replica_factory(f"{name}-{r.name}", r, child) for r in plan.replicas
        }
        self.mount_for_domain = pulumi.Output.from_input({domain: r.name for r in plan.replicas for domain in r.serves})
        self.register_outputs(
            {
                "replicas": [{"name": r.name, "domain": r.domain, "zone": r.zone} for r in plan.replicas],
                "mount_for_domain": self.mount_for_domain,
            }
        )
