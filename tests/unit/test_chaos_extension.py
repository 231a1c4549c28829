"""The Chaos Toolkit extension's surface: the exact activities it offers, experiment loading and planning."""

from __future__ import annotations

from pathlib import Path

import pytest

from ha_ops.chaos import discover
from ha_ops.chaos.runner import load_experiment, plan
from ha_ops.chaos.target import configuration_for
from ha_ops.errors import SpecError

EXPERIMENTS = Path(__file__).resolve().parents[2] / "chaos" / "experiments"


def test_discovered_activities_are_exactly_these() -> None:
    activities = {(a["type"], a["name"]) for a in discover()["activities"]}
    assert activities == {
        *(("action", n) for n in (
            "bandwidth_limit", "chunkserver_loss", "clear_gpu_fault", "driver_rollout", "end_driver_rollout",
            "freeze_service", "gpu_fault", "heal", "hold_fault",
            "kill_remediation_leader", "kill_service", "link_down", "link_up", "monitoring_outage", "node_loss",
            "packet_loss", "partition", "restart_service",
            "silent_link_drop", "slurm_primary_failover", "start_service", "stop_service", "storage_master_loss",
            "thaw_service")),
        *(("probe", n) for n in (
            "agent_verdict", "alert_firing", "alertmanager_alert_active", "capacity_in_service", "controller_phase",
            "controller_took_out", "ecmp_paths",
            "gpu_capacity_in_service", "job_ran_exactly_once", "job_runs", "job_state", "monitoring_outage_seen",
            "node_state", "nodes_in_service",
            "prometheus_query", "reachable", "remediation_leader", "rollout_fleet_as_before", "rollout_phase",
            "remediation_lease_holder", "scheduler_responds",
            "slurm_controller_responds", "slurm_controller_status", "slurm_node_state", "slurm_nodes_in_service",
            "storage_data_intact", "storage_health", "storage_healthy")),
    }  # fmt: skip


def test_chaos_toolkit_discovers_the_extension_by_its_package_name() -> None:
    from chaoslib.discovery.discover import discover as chaos_discover

    found = chaos_discover("ha-ops", download_and_install=False)  # what `chaos discover ha-ops` calls
    assert {a["name"] for a in found["activities"]} == {a["name"] for a in discover()["activities"]}


@pytest.mark.parametrize("name", sorted(p.name for p in EXPERIMENTS.glob("*.yaml")))
def test_shipped_experiments_are_valid_and_point_at_the_cluster_they_are_given(name: str) -> None:
    experiment = load_experiment(EXPERIMENTS / name, configuration_for(target="lab:mylab"), {"node": "gpu9"})
    assert experiment["configuration"]["ha_ops_target"] == "lab:mylab"
    assert experiment["configuration"]["node"] == "gpu9"
    assert plan(experiment)
    over_ssh = load_experiment(EXPERIMENTS / name, configuration_for(inventory=Path("hosts.yml")))
    assert "ha_ops_target" not in over_ssh["configuration"]
    assert over_ssh["configuration"]["ha_ops_inventory"] == str(Path("hosts.yml").resolve())


def test_every_activity_takes_its_cluster_from_the_configuration() -> None:
    """No activity names a lab: the cluster comes from the experiment's configuration (chaoslib passes it)."""
    import inspect

    from ha_ops.chaos import actions, probes

    for module in (actions, probes):
        for name in module.__all__:
            parameters = inspect.signature(getattr(module, name)).parameters
            assert "lab" not in parameters, f"{module.__name__}.{name}"
            assert name == "hold_fault" or "configuration" in parameters, f"{module.__name__}.{name}"
    for path in EXPERIMENTS.glob("*.yaml"):
        assert "${lab}" not in path.read_text(), path.name


def test_an_invalid_experiment_is_refused_naming_the_problem(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("title: no method\ndescription: x\n")
    with pytest.raises(SpecError) as info:
        load_experiment(bad)
    assert "method" in " ".join(info.value.problems).lower()
    listing = tmp_path / "list.yaml"
    listing.write_text("- a\n- b\n")
    with pytest.raises(SpecError, match="mapping"):
        load_experiment(listing)


def test_a_probe_with_a_time_limit_returns_as_soon_as_its_condition_holds_and_false_when_it_never_does() -> None:
    from ha_ops.chaos.probes import _within

    answers = iter([False, False, True])
    assert _within(5.0, lambda: next(answers)) is True
    assert _within(0.3, lambda: False) is False
    assert _within(0.0, lambda: True) is True and _within(0.0, lambda: False) is False


def test_a_probe_without_a_time_limit_raises_its_error_and_with_one_retries_through_errors() -> None:
    from ha_ops.chaos.probes import _within

    def broken() -> bool:
        raise OSError("agent not answering")

    with pytest.raises(OSError, match="agent not answering"):
        _within(0.0, broken)
    calls = iter([OSError("not yet"), True])

    def flaky() -> bool:
        answer = next(calls)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert _within(5.0, flaky) is True


def test_a_hold_lasts_its_time_unless_the_run_ends_it_early_and_the_signal_never_outlives_the_run() -> None:
    import threading
    import time

    from ha_ops.chaos import hold
    from ha_ops.chaos.actions import hold_fault

    held, early = hold.wait(0.2)
    assert held >= 0.2 and early is False
    with hold.endable():
        threading.Timer(0.1, hold.end_early).start()
        started = time.monotonic()
        said = hold_fault(30)
        assert time.monotonic() - started < 5 and "ended early" in said
    assert hold.wait(0.05)[1] is False  # the next run holds again
