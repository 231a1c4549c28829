"""Input that parsed but meant nothing is refused, naming its field (issue 44, finding 8: the fuzz campaign's garbage
accepted). Each case is one the campaign found accepted before."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from ha_ops.errors import SpecError
from ha_ops.health.config import ControllerReporting
from ha_ops.health.report import AgentReport
from ha_ops.remediation.config import ControllerConfig
from ha_ops.rollout.plan import FleetNode, plan_rollout
from ha_ops.rollout.policy import build_policy
from ha_ops.spec import parse_spec
from ha_ops.util.names import base_url_problem
from tests.unit.test_spec import lab_data, put


@pytest.mark.parametrize(
    "url",
    ["not a url", "ctl1:8800", "ftp://ctl1:8800", "https://", "http://ctl1:99999", "http://ctl1:0",
     "http://user:pw@ctl1:8800", "http://ctl1:8800/?q=1", "http://ctl1:8800/#x", "http://ctl1:8800\n", ""],
)  # fmt: skip
def test_controller_urls_that_are_not_urls_are_refused(url: str) -> None:
    assert base_url_problem(url) is not None
    with pytest.raises(ValidationError, match=r"urls\.0\n"):
        ControllerReporting(urls=[url])


def test_real_controller_urls_pass_and_tls_wants_https(tmp_path: Path) -> None:
    for url in ("http://10.77.0.10:8800", "https://ctl1.example:8800/", "http://[::1]:8800"):
        assert base_url_problem(url) is None, url
    tls = {"ca_file": tmp_path / "ca", "cert_file": tmp_path / "c", "key_file": tmp_path / "k"}
    with pytest.raises(ValidationError, match="with tls every URL is https://"):
        ControllerReporting.model_validate({"urls": ["https://a:1", "http://b:2"], "tls": tls})


def controller(tmp_path: Path, **fields: Any) -> ControllerConfig:
    return ControllerConfig.model_validate({"id": "c", "state_dir": tmp_path, **fields})


@pytest.mark.parametrize(
    ("pools", "named"),
    [
        ({"p": {"nodes": ["n1", "n2", "n1"]}}, "pools.p.nodes: n1 is listed twice (also in pools.p.nodes)"),
        ({"p": {"nodes": ["n1"], "spares": ["n1"]}}, "pools.p.spares: n1 is listed twice (also in pools.p.nodes)"),
        ({"p": {"nodes": ["n1"]}, "q": {"nodes": ["n1"]}}, "pools.q.nodes: n1 is listed twice (also in pools.p.nodes)"),
    ],
)
def test_a_node_listed_twice_in_the_pools_is_refused(tmp_path: Path, pools: dict[str, Any], named: str) -> None:
    with pytest.raises(ValidationError) as refused:
        controller(tmp_path, pools=pools)
    assert named in str(refused.value)


@pytest.mark.parametrize(
    "lease", [{"lease_renew_s": 1e308}, {"lease_renew_s": 3.0}, {"lease_margin_s": 3.0}, {"lease_ttl_s": 1e9}]
)
def test_lease_timings_a_leader_could_not_keep_are_refused(tmp_path: Path, lease: dict[str, float]) -> None:
    with pytest.raises(ValidationError, match="lease_"):
        controller(tmp_path, pools={"p": {"nodes": ["n1"]}}, **lease)
    controller(tmp_path, pools={"p": {"nodes": ["n1"]}}, lease_ttl_s=10, lease_renew_s=3, lease_margin_s=2)


def test_a_canary_bigger_than_the_cluster_is_refused() -> None:
    nodes = [FleetNode(f"n{i}", domain="r1", driver_version="550.1") for i in range(4)]
    with pytest.raises(SpecError) as refused:
        plan_rollout(nodes, build_policy({"canary": "99999999999999999999"}), "570.1")
    assert refused.value.problems == [
        "canary: 99999999999999999999 is more nodes than the cluster's 4 (a canary is a few)"
    ]
    assert len(plan_rollout(nodes, build_policy({"canary": "4"}), "570.1").waves[0].nodes) == 4


def test_gpu_indices_are_0_to_255() -> None:
    base = {"node": "n1", "seq": 1, "agent_id": "a", "sent_at": 0.0, "state": "unhealthy", "action": "drain",
            "reason": "x"}  # fmt: skip
    finding = {"check": "xid", "severity": "critical", "action": "drain", "message": "XID 79"}
    AgentReport.model_validate(
        base | {"findings": [finding | {"gpu": 255}], "gpus": [{"index": 255, "state": "healthy"}]}
    )
    with pytest.raises(ValidationError, match=r"findings\.0\.gpu"):
        AgentReport.model_validate(base | {"findings": [finding | {"gpu": 256}]})
    with pytest.raises(ValidationError, match=r"gpus\.0\.index"):
        AgentReport.model_validate(base | {"gpus": [{"index": 256, "state": "healthy"}]})


@pytest.mark.parametrize("value", ["rack\n1", "rack\t1", "rack\x001", "rack\x7f"])
def test_a_spec_string_with_a_control_character_is_refused(value: str) -> None:
    data = lab_data()
    put(("failure_domains", 0, "rack"), value)(data)
    with pytest.raises(SpecError) as refused:
        parse_spec(data)
    assert refused.value.problems == [f"failure_domains[0].rack: control characters ({value[4]!r}) are not allowed"]


@pytest.mark.parametrize(
    ("pause", "named"),
    [
        ({"after": float("nan")}, "pauses.after: must be a number of seconds from 0 to 86400"),
        ({"after": float("inf")}, "pauses.after: must be a number of seconds from 0 to 86400"),
        ({"before": -5}, "pauses.before: must be a number of seconds from 0 to 86400"),
        ({"during": 1}, "pauses.during: a pause is `before` or `after` an activity"),
        ({"after": "soon"}, "pauses.after: a ${variable}, or a number of seconds"),
    ],
)
def test_an_experiments_pause_that_is_no_number_of_seconds_is_refused(
    tmp_path: Path, pause: dict[str, Any], named: str
) -> None:
    from ha_ops.chaos.runner import load_experiment
    from tests.labkit import REPO

    experiment = yaml.safe_load((REPO / "chaos/experiments/gpu-xid79.yaml").read_text())
    activity = next(a for a in experiment["method"] if "pauses" in a)
    activity["pauses"] = pause
    path = tmp_path / "experiment.json"
    path.write_text(json.dumps(experiment))  # (NaN and Infinity as Python's JSON writes them, which it reads too)
    with pytest.raises(SpecError) as refused:
        load_experiment(path, cluster={"ha_ops_target": "lab:fuzz"})
    assert any(named in problem for problem in refused.value.problems), refused.value.problems


@pytest.mark.parametrize(
    ("run", "why"),
    [
        ("{0}", "{0} names no placeholder"),
        ("echo {}", "{} names no placeholder"),
        ("echo {spec.__class__}", "a placeholder is a plain name"),
        ("echo {ssh[0]}", "a placeholder is a plain name"),
        ("echo {nope}", "{nope} is not a placeholder"),
        ("echo {spec!r}", "{spec!r}: a placeholder takes no conversion"),
        ("{ssh} reboot", "{ssh} names a host: {ssh:HOST}"),
        ("awk '{print $1}'", "a literal brace is written {{ or }}"),
        ("echo {", "not a command template"),
    ],
)
def test_a_runbook_command_that_cannot_be_filled_is_refused_when_it_loads(tmp_path: Path, run: str, why: str) -> None:
    from ha_ops.runbooks.placeholders import template_problem
    from ha_ops.runbooks.verify import load_runbook
    from tests.labkit import REPO

    problem = template_problem(run)
    assert problem is not None and why in problem, problem
    text = (REPO / "runbooks/gpu-failure.md").read_text().replace("../chaos/", f"{REPO}/chaos/")
    head, _, rest = text.partition("    run: ")
    path = tmp_path / "runbook.md"
    path.write_text(head + "    run: " + json.dumps(run) + "\n    was: " + rest)
    with pytest.raises(SpecError) as refused:
        load_runbook(path)
    assert any(why in p for p in refused.value.problems), refused.value.problems
    for fine in ("{ssh:ctl1} systemctl start slurmctld", "{ha_ops} controller status {target}", "awk '{{print $1}}'"):
        assert template_problem(fine) is None, fine


@pytest.mark.parametrize(
    ("arguments", "why"),
    [({"nod": "gpu1"}, "missing a required argument: 'node'"),
     ({"node": "gpu1", "colour": "red"}, "unexpected keyword argument 'colour'"),
     ({}, "missing a required argument: 'node'")],
)  # fmt: skip
def test_probe_arguments_the_probe_cannot_take_are_refused_when_the_plan_loads(
    tmp_path: Path, arguments: dict[str, Any], why: str
) -> None:
    """Before: the probe's TypeError at run time read as "not yet", and the check waited out its time for nothing."""
    from ha_ops.chaos.plan import load_plan
    from tests.labkit import REPO

    plan = yaml.safe_load((REPO / "chaos/gamedays/gpu.yaml").read_text())
    fault = plan["faults"][0]
    fault["experiment"] = str(REPO / "chaos" / fault["experiment"].removeprefix("../"))
    fault["detect"] = {"probe": "controller_phase", "arguments": arguments, "equals": "healthy", "negate": True}
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan))
    with pytest.raises(SpecError) as refused:
        load_plan(path)
    assert any(p.startswith("faults[0].detect") and why in p for p in refused.value.problems), refused.value.problems


# Found by the fuzz's oracles (tests/unit/fuzz_oracles.py): more of finding 8's kinds, accepted until then.


@pytest.mark.parametrize(
    ("fields", "named"),
    [({"peers": ["ctl2:8800"]}, r"peers\.0\n"),
     ({"monitoring": {"prometheus_url": "10.0.0.9:9090"}}, r"monitoring\.prometheus_url\n"),
     ({"monitoring": {"prometheus_url": "http://m:9090", "alertmanager_url": "m:9093 "}},
      r"monitoring\.alertmanager_url\n")],
)  # fmt: skip
def test_the_controllers_peer_and_monitoring_urls_are_urls(tmp_path: Path, fields: dict[str, Any], named: str) -> None:
    with pytest.raises(ValidationError, match=named):
        controller(tmp_path, pools={"p": {"nodes": ["n1"]}}, **fields)
    monitoring = {"prometheus_url": "http://m:9090/prometheus", "alertmanager_url": "http://m:9093"}
    controller(tmp_path, pools={"p": {"nodes": ["n1"]}}, peers=["https://ctl2:8800"], monitoring=monitoring)


@pytest.mark.parametrize(
    ("path", "value", "named"),
    [(("pools", 0, "cpus_per_node"), 2**63, "pools[0].cpus_per_node: "),
     (("pools", 0, "memory_mb"), 2**63, "pools[0].memory_mb: "),
     (("remediation", "breaker_window_s"), 1e308, "remediation.breaker_window_s: ")],
)  # fmt: skip
def test_a_spec_number_no_machine_or_window_has_is_refused(
    path: tuple[str | int, ...], value: float, named: str
) -> None:
    data = lab_data()
    put(path, value)(data)
    with pytest.raises(SpecError) as refused:
        parse_spec(data)
    assert [p for p in refused.value.problems if p.startswith(named)], refused.value.problems


@pytest.mark.parametrize(
    ("fields", "why"),
    [({"master_host": "gpu7;touch /tmp/x;#"}, "master_host\n  Value error, 'gpu7;touch /tmp/x;#' is not a host"),
     ({"master_address": "10.0.0.5\n"}, "master_address\n  Value error, '10.0.0.5\\n' is not a host"),
     ({"peers": ["cs1:99999"]}, "peers.0\n  Value error, 'cs1:99999': port 99999 does not exist"),
     ({"peers": ["cs1", "cs2", "cs1:9422"]}, "peers\n  Value error, cs1:9422 is listed twice (also as cs1)")],
)  # fmt: skip
def test_a_storage_watchers_hosts_are_one_word_and_its_peers_each_count_once(
    tmp_path: Path, fields: dict[str, Any], why: str
) -> None:
    from ha_ops.storage.failover import FailoverConfig

    base = {"id": "w", "master_host": "mfs-m", "master_address": "10.0.0.5", "peers": ["cs1", "cs2:9422", "cs3"],
            "fence_command": "true", "promote_command": "true", "state_dir": tmp_path}  # fmt: skip
    FailoverConfig.model_validate(base)
    with pytest.raises(ValidationError) as refused:
        FailoverConfig.model_validate(base | fields)
    assert why in str(refused.value), str(refused.value)


def test_waits_of_1e308_seconds_are_refused_in_plans_runbooks_rollouts_and_game_day_reports() -> None:
    from ha_ops.chaos.plan import GameDayPlan
    from ha_ops.plan.gameday_input import times_from_report
    from ha_ops.plan.presets import PRESETS
    from ha_ops.runbooks.verify import Check, ManualStep

    condition = {"probe": "slurm_nodes_in_service"}
    fault = {"name": "f", "experiment": "x.yaml", "detect": condition, "recover": condition}
    for plan, named in (({"pause_between_s": 1e308}, r"pause_between_s\n"),
                        ({"faults": [fault | {"timeout_s": 1e308}]}, r"faults\.0\.timeout_s\n")):  # fmt: skip
        with pytest.raises(ValidationError, match=named):
            GameDayPlan.model_validate({"name": "g", "faults": [fault]} | plan)
    with pytest.raises(ValidationError, match=r"within_s\n"):
        Check.model_validate(condition | {"claim": "c", "within_s": 1e308})
    with pytest.raises(ValidationError, match=r"timeout_s\n"):
        ManualStep.model_validate({"step": "s", "run": "{ha_ops} controller status", "timeout_s": 1e308})
    for policy in ({"drain": {"timeout_s": 1e308}}, {"soak_s": 1e308}, {"burn_in_timeout_s": 1e308}):
        with pytest.raises(SpecError) as refused:
            build_policy(policy)
        assert refused.value.problems[0].startswith(next(iter(policy)) + ("." if "drain" in policy else ":"))
    # Two faults of 1e308 s summed to infinity in the simulator's means.
    faults = [{"name": f"GPU XID 79 on gpu{i}", "time_to_detect_s": 1.0, "time_to_recover_s": 1e308} for i in (1, 2)]
    with pytest.raises(SpecError, match=r"faults\.0\.time_to_recover_s: Input should be less than or equal"):
        times_from_report({"gameday": "g", "faults": faults}, PRESETS["nhc-5min"])
