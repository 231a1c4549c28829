"""High-availability rules over a ClusterSpec and the plans derived from it, checked before anything is created.

Pure: no Pulumi. Each check returns violations naming the rule id and the offending field; `enforce_spec` raises a
PolicyViolationError (a SpecError: the CLI exits 2) naming every one. Some rules repeat what the spec model already
refuses (a pool in one domain): the policy must also hold for a spec built in code without validation.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from ha_ops.errors import SpecError
from ha_ops.iac.plans.control_plane import ControlPlanePlan
from ha_ops.iac.plans.fabric import FabricPlan, plan_fabric
from ha_ops.iac.plans.storage import StoragePlan
from ha_ops.iac.violations import PolicyViolationError, Violation, enforce
from ha_ops.spec.layout import compute_layout
from ha_ops.spec.model import ClusterSpec

MIN_POOL_DOMAINS = 2
MIN_SPARE_FRACTION = 0.15
MIN_SLURM_CONTROLLERS = 2
MIN_SPINES = 2
MIN_HOST_LINKS = 2
MIN_STORAGE_REPLICAS = 2
MIN_POOL_ZONES = 2

RULES: dict[str, str] = {
    "HA-POOL-DOMAINS": f"every GPU pool has nodes in >= {MIN_POOL_DOMAINS} failure domains",
    "HA-POOL-SPARES": f"every GPU pool holds >= {MIN_SPARE_FRACTION:.0%} of its nodes (at least one) as spares",
    "HA-SLURM-CONTROLLERS": f">= {MIN_SLURM_CONTROLLERS} Slurm controllers, in different failure domains",
    "HA-FABRIC-SPINES": f"the fabric has >= {MIN_SPINES} spine switches",
    "HA-FABRIC-DUAL-HOMED": f"every host has links to >= {MIN_HOST_LINKS} leaf switches",
    "HA-FABRIC-SPOF": "no single switch whose loss cuts a failure domain off the fabric",
    "HA-FABRIC-SIZE": "the fabric can be built from switches of the spec's radix (two tiers)",
    "HA-IMAGE-DIGEST": "every container image is pinned by digest (name@sha256:<64 hex digits>)",
    "HA-ETCD-SPREAD": "an odd number (>= 3) of etcd members over >= 2 failure domains, no domain holding a quorum "
    "where the spec has enough domains",
    "HA-STORAGE-REPLICAS": f">= {MIN_STORAGE_REPLICAS} storage replicas, each in its own failure domain",
    "HA-POOL-ZONES": f"every GPU pool has nodes in >= {MIN_POOL_ZONES} availability zones (cloud stacks)",
}

# A tag may come before the digest (name:tag@sha256:...); the digest is what is pulled.
DIGEST_REF = re.compile(r"[a-z0-9][a-z0-9._\-/:]*@sha256:[0-9a-f]{64}")


def _listed(names: list[str], limit: int = 5) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def check_pools(spec: ClusterSpec) -> list[Violation]:
    known = {d.name for d in spec.failure_domains}
    out = []
    for i, pool in enumerate(spec.pools):
        where = f"pools[{i}]"
        unknown = sorted(set(pool.domains) - known)
        # Where nodes land (round-robin over the list, or each listed node's), not what the list names: [rack1,
        # rack1] is one domain.
        used = set(pool.node_domains()) & known
        if unknown:
            out.append(Violation("HA-POOL-DOMAINS", f"{where}.domains", f"unknown failure domain(s) {unknown}"))
        if len(used) < MIN_POOL_DOMAINS:
            out.append(
                Violation(
                    "HA-POOL-DOMAINS",
                    f"{where}.domains",
                    f"pool {pool.name!r} puts its {pool.count} node(s) in {len(used)} failure domain(s) "
                    f"({', '.join(sorted(used)) or 'none'}); losing one would take the whole pool",
                )
            )
        required = max(1, math.floor(pool.count * MIN_SPARE_FRACTION + 1e-9))
        if pool.spare_count < required:
            out.append(
                Violation(
                    "HA-POOL-SPARES",
                    f"{where}.nodes" if pool.nodes else f"{where}.spare_fraction",
                    f"pool {pool.name!r} holds {pool.spare_count} spare(s) of {pool.count} nodes "
                    f"({'marked spare' if pool.nodes else f'spare_fraction {pool.spare_fraction}'}); needs >= "
                    f"{required} ({MIN_SPARE_FRACTION:.0%}, at least one)",
                )
            )
    return out


def check_slurm_controllers(spec: ClusterSpec) -> list[Violation]:
    hosts = spec.controllers.hosts
    domains = {h.domain for h in hosts}
    if len(hosts) < MIN_SLURM_CONTROLLERS:
        return [
            Violation(
                "HA-SLURM-CONTROLLERS",
                "controllers.hosts",
                f"{len(hosts)} Slurm controller(s); need a primary and a backup ({MIN_SLURM_CONTROLLERS})",
            )
        ]
    if len(domains) < MIN_SLURM_CONTROLLERS:
        return [
            Violation(
                "HA-SLURM-CONTROLLERS",
                "controllers.hosts",
                f"every Slurm controller is in failure domain {hosts[0].domain!r}; losing it loses them all",
            )
        ]
    return []


def check_fabric(plan: FabricPlan) -> list[Violation]:
    out = []
    if len(plan.spines) < MIN_SPINES:
        out.append(Violation("HA-FABRIC-SPINES", "fabric.spines", f"{len(plan.spines)} spine(s); need >= {MIN_SPINES}"))
    out += [Violation("HA-FABRIC-SIZE", "fabric.switch_radix", problem) for problem in plan.problems]
    single = sorted(host for host, homes in plan.homing.items() if len(homes) < MIN_HOST_LINKS)
    if single:
        out.append(
            Violation(
                "HA-FABRIC-DUAL-HOMED",
                "fabric",
                f"{len(single)} host(s) linked to fewer than {MIN_HOST_LINKS} leaf switches: {_listed(single)}",
            )
        )
    for switch, domains in plan.single_points_of_failure().items():
        out.append(Violation("HA-FABRIC-SPOF", "fabric", f"losing {switch} alone cuts off failure domain(s) {domains}"))
    return out


def check_images(images: Mapping[str, str], where: str) -> list[Violation]:
    out = []
    for key, ref in images.items():
        if not DIGEST_REF.fullmatch(ref):
            out.append(
                Violation(
                    "HA-IMAGE-DIGEST",
                    f"{where}.{key}",
                    f"{ref!r} is not pinned by digest (write name@sha256:<64 hex digits>; a tag can move)",
                )
            )
    return out


def check_spec(spec: ClusterSpec, fabric: FabricPlan | None = None) -> list[Violation]:
    """Every spec-level rule. A spec that names failure domains it does not define (it failed, or skipped, its own
    validation) has no layout: unless another rule already refuses it, that raises SpecError."""
    out = check_pools(spec) + check_slurm_controllers(spec)
    if fabric is None:
        try:
            fabric = plan_fabric(spec, compute_layout(spec))
        except KeyError as exc:
            if not out:
                raise SpecError(spec.name, [f"failure_domains: {exc} is not a failure domain of the spec"]) from None
    if fabric is not None:
        out += check_fabric(fabric)
    if spec.images is not None:
        out += check_images(spec.images.model_dump(), "images")
    return out


def check_control_plane(plan: ControlPlanePlan, domains_available: int) -> list[Violation]:
    """etcd: an odd quorum of >= 3 members, spread over as many of the spec's failure domains as there are members
    (with fewer domains than members one domain holds a quorum; losing it stops etcd, which only more domains fix)."""
    members = plan.etcd
    used = {m.domain for m in members}
    out = []
    if len(members) < 3 or len(members) % 2 == 0:
        out.append(Violation("HA-ETCD-SPREAD", "etcd_members", f"{len(members)} members; need an odd number >= 3"))
    if len(used) < 2:
        out.append(Violation("HA-ETCD-SPREAD", "etcd", f"every etcd member is in failure domain(s) {sorted(used)}"))
    elif len(used) < min(len(members), domains_available):
        out.append(
            Violation(
                "HA-ETCD-SPREAD",
                "etcd",
                f"{len(members)} members in {len(used)} failure domains although the spec has {domains_available}",
            )
        )
    return out


def check_storage(plan: StoragePlan) -> list[Violation]:
    out = []
    if len(plan.replicas) + plan.unplaced < MIN_STORAGE_REPLICAS:
        out.append(
            Violation(
                "HA-STORAGE-REPLICAS",
                "storage.replicas",
                f"{len(plan.replicas) + plan.unplaced} replica(s); need >= {MIN_STORAGE_REPLICAS}",
            )
        )
    if plan.unplaced:
        out.append(
            Violation(
                "HA-STORAGE-REPLICAS",
                "storage.replicas",
                f"{plan.unplaced} replica(s) more than there are failure domains; they would fail together",
            )
        )
    return out


def check_pool_zones(spec: ClusterSpec, zone_map: Mapping[str, str]) -> list[Violation]:
    """Cloud stacks: where the spec's zones land (`zone_map`: spec zone -> availability zone), every pool must still
    span two availability zones; two spec zones mapped onto one AZ fail together."""
    out = []
    for i, pool in enumerate(spec.pools):
        zones = {spec.domain(d).zone for d in set(pool.node_domains())}
        azs = {zone_map[z] for z in zones if z in zone_map}
        if len(azs) < MIN_POOL_ZONES:
            out.append(
                Violation(
                    "HA-POOL-ZONES",
                    f"pools[{i}].domains",
                    f"pool {pool.name!r} lands in availability zone(s) {sorted(azs)} (spec zones {sorted(zones)}); "
                    f"needs >= {MIN_POOL_ZONES}",
                )
            )
    return out


def enforce_spec(spec: ClusterSpec, source: str | None = None) -> None:
    """Raise PolicyViolationError naming every broken spec rule; return when the spec keeps them all."""
    enforce(check_spec(spec), source or f"cluster {spec.name!r}")


__all__ = [
    "RULES",
    "PolicyViolationError",
    "Violation",
    "check_control_plane",
    "check_fabric",
    "check_images",
    "check_pool_zones",
    "check_pools",
    "check_slurm_controllers",
    "check_spec",
    "check_storage",
    "enforce",
    "enforce_spec",
]
