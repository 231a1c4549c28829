"""The high-availability policy (ha_ops.iac.policy): the examples keep every rule, and a spec broken in one place
is refused with the rule's id and the offending field."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from ha_ops.errors import SpecError
from ha_ops.iac.plans.control_plane import plan_control_plane
from ha_ops.iac.plans.fabric import plan_fabric
from ha_ops.iac.plans.nodes import NodeRequest
from ha_ops.iac.plans.storage import plan_storage
from ha_ops.iac.policy import (
    RULES,
    check_control_plane,
    check_fabric,
    check_images,
    check_pool_zones,
    check_spec,
    check_storage,
    enforce_spec,
)
from ha_ops.iac.violations import PolicyViolationError, Violation
from ha_ops.spec.model import Images
from tests.unit.iac_specs import AGENT_IMAGE, CONTROLLER_IMAGE, DIGEST, changed, example, unvalidated


def rules_of(violations: list[Violation]) -> set[str]:
    return {v.rule for v in violations}


@pytest.mark.parametrize("name", ["lab.yaml", "production.yaml", "lab-storage.yaml"])
def test_the_examples_keep_every_spec_rule(name: str) -> None:
    assert check_spec(example(name)) == []
    enforce_spec(example(name))


# --- pools ------------------------------------------------------------------------------------------------------------
def test_a_pool_in_one_failure_domain_is_refused_naming_the_rule_and_field() -> None:
    prod = example("production.yaml")
    one_domain = unvalidated(prod, pools=[prod.pools[0].model_copy(update={"domains": ["rack1"]})])
    with pytest.raises(PolicyViolationError) as info:
        enforce_spec(one_domain)
    err = info.value
    assert isinstance(err, SpecError) and err.exit_code == 2
    assert err.rules == {"HA-POOL-DOMAINS"}
    assert "HA-POOL-DOMAINS pools[0].domains:" in str(err)
    assert "'gpu' puts its 64 node(s) in 1 failure domain(s) (rack1)" in str(err)


def test_pool_domains_count_where_nodes_land_not_what_the_list_names() -> None:
    prod = example("production.yaml")
    repeated = unvalidated(prod, pools=[prod.pools[0].model_copy(update={"domains": ["rack2", "rack2"]})])
    assert [v.field for v in check_spec(repeated) if v.rule == "HA-POOL-DOMAINS"] == ["pools[0].domains"]
    unknown = unvalidated(prod, pools=[prod.pools[0].model_copy(update={"domains": ["rack1", "rack9"]})])
    messages = [v.message for v in check_spec(unknown) if v.rule == "HA-POOL-DOMAINS"]
    assert any("rack9" in m for m in messages)


@pytest.mark.parametrize(
    ("count", "fraction", "spares", "needed"),
    [(4, 0.0, 0, 1), (4, 0.2, 0, 1), (64, 0.14, 8, 9), (100, 0.1, 10, 15)],
)
def test_too_few_spares_are_refused(count: int, fraction: float, spares: int, needed: int) -> None:
    def change(data: dict[str, Any]) -> None:
        data["pools"][0] |= {"count": count, "spare_fraction": fraction}

    violations = check_spec(changed("lab.yaml", change))
    assert rules_of(violations) == {"HA-POOL-SPARES"}
    assert violations[0].field == "pools[0].spare_fraction"
    assert f"holds {spares} spare(s) of {count} nodes" in violations[0].message
    assert f"needs >= {needed}" in violations[0].message


@pytest.mark.parametrize(("count", "fraction"), [(64, 0.15), (4, 0.25), (7, 0.15), (20, 0.15)])
def test_fifteen_percent_of_spares_and_at_least_one_pass(count: int, fraction: float) -> None:
    def change(data: dict[str, Any]) -> None:
        data["pools"][0] |= {"count": count, "spare_fraction": fraction}

    assert check_spec(changed("lab.yaml", change)) == []


# --- Slurm controllers ------------------------------------------------------------------------------------------------
def test_a_single_slurm_controller_is_refused() -> None:
    def change(data: dict[str, Any]) -> None:
        data["controllers"] = {"ha": False, "hosts": [{"name": "ctl1", "domain": "rack1"}]}

    violations = check_spec(changed("lab.yaml", change))
    assert [(v.rule, v.field) for v in violations] == [("HA-SLURM-CONTROLLERS", "controllers.hosts")]
    assert "1 Slurm controller(s)" in violations[0].message


def test_slurm_controllers_sharing_a_failure_domain_are_refused() -> None:
    def change(data: dict[str, Any]) -> None:
        data["controllers"] = {
            "ha": False,  # the spec model checks the domains only when ha is set; the policy always does
            "hosts": [{"name": "ctl1", "domain": "rack1"}, {"name": "ctl2", "domain": "rack1"}],
        }

    violations = check_spec(changed("lab.yaml", change))
    assert rules_of(violations) == {"HA-SLURM-CONTROLLERS"}
    assert "failure domain 'rack1'" in violations[0].message


# --- fabric -----------------------------------------------------------------------------------------------------------
def test_a_single_spine_is_refused_and_named_as_the_switch_that_cuts_off_every_domain() -> None:
    def change(data: dict[str, Any]) -> None:
        data["fabric"] |= {"spines": 1, "uplinks_per_leaf": 1, "ecmp": False}

    violations = check_spec(changed("lab.yaml", change))
    assert rules_of(violations) == {"HA-FABRIC-SPINES", "HA-FABRIC-SPOF"}
    spof = next(v for v in violations if v.rule == "HA-FABRIC-SPOF")
    assert spof.message == "losing spine1 alone cuts off failure domain(s) ['rack1', 'rack2']"
    assert next(v for v in violations if v.rule == "HA-FABRIC-SPINES").field == "fabric.spines"


def test_a_radix_with_no_host_ports_leaves_hosts_unhomed() -> None:
    def change(data: dict[str, Any]) -> None:
        data["fabric"] |= {"spines": 4, "uplinks_per_leaf": 4, "switch_radix": 4}

    violations = check_spec(changed("lab.yaml", change))
    assert rules_of(violations) == {"HA-FABRIC-SIZE", "HA-FABRIC-DUAL-HOMED"}
    homed = next(v for v in violations if v.rule == "HA-FABRIC-DUAL-HOMED")
    assert homed.message.startswith("7 host(s) linked to fewer than 2 leaf switches: ")


def test_a_single_homed_host_is_named_with_the_switch_that_cuts_off_its_domain() -> None:
    plan = plan_fabric(example("lab.yaml"))
    link = next(lk for lk in plan.links if lk.kind == "host" and lk.lower == "gpu3")
    broken = dataclasses.replace(plan, links=tuple(lk for lk in plan.links if lk != link))
    violations = check_fabric(broken)
    assert [str(v) for v in violations] == [
        "HA-FABRIC-DUAL-HOMED fabric: 1 host(s) linked to fewer than 2 leaf switches: gpu3",
        f"HA-FABRIC-SPOF fabric: losing {next(iter(broken.homing['gpu3']))} alone cuts off failure domain(s) ['rack1']",
    ]


def test_a_fabric_larger_than_the_spines_radix_is_refused() -> None:
    def change(data: dict[str, Any]) -> None:
        data["fabric"]["switch_radix"] = 8

    violations = check_spec(changed("production.yaml", change))
    assert rules_of(violations) == {"HA-FABRIC-SIZE"}
    assert violations[0].field == "fabric.switch_radix"
    assert "40 leaf switches need 40 ports on every spine, more than switch_radix 8" in violations[0].message


# --- images -----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "ref",
    [
        "registry.example/ha-ops/agent:1.0",
        "registry.example/ha-ops/agent:latest",
        "registry.example/ha-ops/agent",
        f"registry.example/ha-ops/agent@{DIGEST.upper()}",
        f"registry.example/ha-ops/agent@{DIGEST[:-1]}",
        "registry.example/ha-ops/agent@md5:0123456789abcdef0123456789abcdef",
    ],
)
def test_an_image_without_a_sha256_digest_is_refused(ref: str) -> None:
    assert check_images({"agent": ref}, "images") == [
        Violation(
            "HA-IMAGE-DIGEST",
            "images.agent",
            f"{ref!r} is not pinned by digest (write name@sha256:<64 hex digits>; a tag can move)",
        )
    ]


def test_images_pinned_by_digest_pass_with_or_without_a_tag() -> None:
    assert check_images({"agent": AGENT_IMAGE, "controller": CONTROLLER_IMAGE}, "images") == []


def test_the_spec_images_section_is_checked() -> None:
    prod = example("production.yaml")
    pinned = prod.model_copy(update={"images": Images(agent=AGENT_IMAGE, controller=CONTROLLER_IMAGE)})
    assert check_spec(pinned) == []

    def change(data: dict[str, Any]) -> None:
        data["images"] = {"agent": AGENT_IMAGE, "controller": "registry.example/ha-ops/controller:1.0"}

    with pytest.raises(PolicyViolationError) as info:
        enforce_spec(changed("production.yaml", change))
    assert [(v.rule, v.field) for v in info.value.violations] == [("HA-IMAGE-DIGEST", "images.controller")]


# --- etcd, storage, zones ---------------------------------------------------------------------------------------------
def test_etcd_spread_over_the_domains_the_spec_has() -> None:
    prod = example("production.yaml")
    plan = plan_control_plane(prod)
    assert check_control_plane(plan, len(prod.failure_domains)) == []

    def moved(domains: list[str]) -> list[NodeRequest]:
        return [dataclasses.replace(m, domain=d) for m, d in zip(plan.etcd, domains, strict=True)]

    same = dataclasses.replace(plan, etcd=tuple(moved(["rack1", "rack1", "rack1"])))
    assert [v.message for v in check_control_plane(same, 4)] == ["every etcd member is in failure domain(s) ['rack1']"]
    crowded = dataclasses.replace(plan, etcd=tuple(moved(["rack1", "rack1", "rack3"])))
    assert rules_of(check_control_plane(crowded, 4)) == {"HA-ETCD-SPREAD"}
    # With two domains, two members share one: the best there is, not a violation.
    assert check_control_plane(crowded, 2) == []
    for members in (2, 4):
        even = check_control_plane(plan_control_plane(prod, etcd_members=members), 4)
        assert (even[0].rule, even[0].field) == ("HA-ETCD-SPREAD", "etcd_members")


def test_storage_needs_two_replicas_in_distinct_domains() -> None:
    lab = example("lab.yaml")
    assert [str(v) for v in check_storage(plan_storage(lab, 1))] == [
        "HA-STORAGE-REPLICAS storage.replicas: 1 replica(s); need >= 2"
    ]
    too_many = check_storage(plan_storage(lab, 3))
    assert [v.message for v in too_many] == [
        "1 replica(s) more than there are failure domains; they would fail together"
    ]
    assert check_storage(plan_storage(lab, 2)) == []


def test_pools_must_land_in_two_availability_zones() -> None:
    prod = example("production.yaml")
    assert check_pool_zones(prod, {"zone-a": "us-east-1a", "zone-b": "us-east-1b"}) == []
    collapsed = check_pool_zones(prod, {"zone-a": "us-east-1a", "zone-b": "us-east-1a"})
    assert [(v.rule, v.field) for v in collapsed] == [("HA-POOL-ZONES", "pools[0].domains")]
    assert check_pool_zones(example("lab.yaml"), {"zone-a": "us-east-1a"})[0].rule == "HA-POOL-ZONES"


# --- every rule is exercised ------------------------------------------------------------------------------------------
def _lab_spares_zero(data: dict[str, Any]) -> None:
    data["pools"][0]["spare_fraction"] = 0.0


BREAKERS: dict[str, Callable[[], list[Violation]]] = {
    "HA-POOL-DOMAINS": lambda: check_spec(
        unvalidated(example("lab.yaml"), pools=[example("lab.yaml").pools[0].model_copy(update={"domains": ["rack1"]})])
    ),
    "HA-POOL-SPARES": lambda: check_spec(changed("lab.yaml", _lab_spares_zero)),
    "HA-SLURM-CONTROLLERS": lambda: check_spec(
        unvalidated(
            example("lab.yaml"),
            controllers=example("lab.yaml").controllers.model_copy(
                update={"hosts": example("lab.yaml").controllers.hosts[:1]}
            ),
        )
    ),
    "HA-FABRIC-SPINES": lambda: check_spec(
        changed("lab.yaml", lambda d: d["fabric"].update(spines=1, uplinks_per_leaf=1, ecmp=False))
    ),
    "HA-FABRIC-DUAL-HOMED": lambda: check_spec(
        changed("lab.yaml", lambda d: d["fabric"].update(spines=4, uplinks_per_leaf=4, switch_radix=4))
    ),
    "HA-FABRIC-SPOF": lambda: check_spec(
        changed("lab.yaml", lambda d: d["fabric"].update(spines=1, uplinks_per_leaf=1, ecmp=False))
    ),
    "HA-FABRIC-SIZE": lambda: check_spec(changed("production.yaml", lambda d: d["fabric"].update(switch_radix=8))),
    "HA-IMAGE-DIGEST": lambda: check_spec(
        changed("lab.yaml", lambda d: d.update(images={"agent": "a:1", "controller": CONTROLLER_IMAGE}))
    ),
    "HA-ETCD-SPREAD": lambda: check_control_plane(plan_control_plane(example("lab.yaml"), etcd_members=2), 2),
    "HA-STORAGE-REPLICAS": lambda: check_storage(plan_storage(example("lab.yaml"), 1)),
    "HA-POOL-ZONES": lambda: check_pool_zones(example("lab.yaml"), {"zone-a": "us-east-1a"}),
}


def test_every_rule_has_a_breaking_case() -> None:
    assert set(BREAKERS) == set(RULES)


@pytest.mark.parametrize("rule", sorted(BREAKERS))
def test_each_rule_fires_on_its_breaking_case(rule: str) -> None:
    violations = BREAKERS[rule]()
    assert rule in rules_of(violations)
    assert rules_of(violations) <= set(RULES)
    # The error names the rule first, then the field.
    with pytest.raises(PolicyViolationError) as info:
        from ha_ops.iac.violations import enforce

        enforce(violations, "test")
    assert any(line.startswith(f"{rule} ") for line in info.value.problems)


def test_a_spec_naming_an_undefined_domain_outside_the_pools_is_a_spec_error() -> None:
    lab = example("lab.yaml")
    broken = unvalidated(lab, monitoring=lab.monitoring.model_copy(update={"host": lab.monitoring.host.model_copy(
        update={"domain": "rack9"}
    )}))  # fmt: skip
    with pytest.raises(SpecError) as info:
        check_spec(broken)
    assert not isinstance(info.value, PolicyViolationError)
    assert info.value.problems == ["failure_domains: 'rack9' is not a failure domain of the spec"]


def test_a_listed_pool_is_judged_by_its_nodes_domains_and_marked_spares() -> None:
    existing = example("existing-cluster.yaml")
    assert check_spec(existing) == []
    pool = existing.pools[0]
    unmarked = [n.model_copy(update={"spare": False}) for n in pool.nodes]
    violations = check_spec(unvalidated(existing, pools=[pool.model_copy(update={"nodes": unmarked})]))
    assert [(v.rule, v.field) for v in violations] == [("HA-POOL-SPARES", "pools[0].nodes")]
    assert "holds 0 spare(s) of 6 nodes (marked spare)" in violations[0].message
    one_rack = [n.model_copy(update={"domain": "row-a-r01"}) for n in pool.nodes]
    violations = check_spec(unvalidated(existing, pools=[pool.model_copy(update={"nodes": one_rack})]))
    assert "HA-POOL-DOMAINS" in {v.rule for v in violations}
