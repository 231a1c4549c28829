"""The Chaos Toolkit extension's surface: the exact activities it offers, experiment loading and planning."""

from __future__ import annotations

from pathlib import Path

import pytest

from ha_ops.chaos import discover
from ha_ops.chaos.runner import load_experiment, plan
from ha_ops.errors import SpecError

EXPERIMENTS = Path(__file__).resolve().parents[2] / "chaos" / "experiments"


def test_discovered_activities_are_exactly_these() -> None:
    activities = {(a["type"], a["name"]) for a in discover()["activities"]}
    assert activities == {
        *(("action", n) for n in (
            "bandwidth_limit", "chunkserver_loss", "clear_gpu_fault", "driver_rollout", "end_driver_rollout",
            "freeze_service", "gpu_fault", "heal",
            "kill_remediation_leader", "kill_service", "link_down", "link_up", "monitoring_outage", "node_loss",
            "packet_loss", "partition", "restart_service",
            "silent_link_drop", "slurm_primary_failover", "start_service", "stop_service", "storage_master_loss",
            "thaw_service")),
        *(("probe", n) for n in (
            "agent_verdict", "alert_firing", "alertmanager_alert_active", "controller_phase", "controller_took_out",
            "ecmp_paths",
            "gpu_capacity_in_service", "job_ran_exactly_once", "job_runs", "job_state", "monitoring_outage_seen",
            "prometheus_query", "reachable", "remediation_leader", "rollout_fleet_as_before", "rollout_phase",
            "remediation_lease_holder",
            "slurm_controller_responds", "slurm_controller_status", "slurm_node_state", "slurm_nodes_in_service",
            "storage_data_intact", "storage_health", "storage_healthy")),
    }  # fmt: skip


@pytest.mark.parametrize("name", sorted(p.name for p in EXPERIMENTS.glob("*.yaml")))
def test_shipped_experiments_are_valid_and_point_at_the_lab(name: str) -> None:
    experiment = load_experiment(EXPERIMENTS / name, "mylab", {"node": "gpu9"})
    assert experiment["configuration"]["lab"] == "mylab"
    assert experiment["configuration"]["node"] == "gpu9"
    assert plan(experiment)


def test_an_invalid_experiment_is_refused_naming_the_problem(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("title: no method\ndescription: x\n")
    with pytest.raises(SpecError) as info:
        load_experiment(bad, "lab")
    assert "method" in " ".join(info.value.problems).lower()
    listing = tmp_path / "list.yaml"
    listing.write_text("- a\n- b\n")
    with pytest.raises(SpecError, match="mapping"):
        load_experiment(listing, "lab")
