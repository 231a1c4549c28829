"""Replicated storage placement: one replica of the shared file system per failure domain, spread over as many zones
as the spec has, and for every failure domain the replica its nodes mount (its own, else one in its zone)."""

from __future__ import annotations

from dataclasses import dataclass

from ha_ops.iac.plans.nodes import spread_domains
from ha_ops.spec.layout import leaf_for_domain
from ha_ops.spec.model import ClusterSpec


@dataclass(frozen=True)
class StorageReplica:
    name: str
    index: int
    domain: str
    zone: str
    leaf: int
    serves: tuple[str, ...]  # the failure domains whose nodes mount this replica


@dataclass(frozen=True)
class StoragePlan:
    replicas: tuple[StorageReplica, ...]
    # Replicas asked for beyond the number of failure domains: they would share a domain and fail together.
    unplaced: int = 0

    def replica_for(self, domain: str) -> StorageReplica:
        return next(r for r in self.replicas if domain in r.serves)


def spec_replicas(spec: ClusterSpec) -> int:
    return spec.storage.replicas if spec.storage is not None else 1


def plan_storage(spec: ClusterSpec, replicas: int) -> StoragePlan:
    if replicas < 1:
        return StoragePlan(())  # nothing to place; the policy refuses it
    domains = spread_domains(spec)
    chosen = list(enumerate(domains[:replicas], start=1))
    serves: dict[int, list[str]] = {i: [] for i, _ in chosen}
    for dom in spec.failure_domains:
        # A replica in another zone is still reachable, only slower: every domain gets one.
        own = next((i for i, d in chosen if d.name == dom.name), None)
        same_zone = next((i for i, d in chosen if d.zone == dom.zone), None)
        serves[own or same_zone or chosen[0][0]].append(dom.name)
    placed = tuple(
        StorageReplica(f"replica{i}", i, dom.name, dom.zone, leaf_for_domain(spec, dom.name), tuple(serves[i]))
        for i, dom in chosen
    )
    return StoragePlan(placed, unplaced=max(0, replicas - len(domains)))
