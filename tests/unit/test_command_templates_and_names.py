"""Node names are data, never shell: command templates are checked when a configuration loads and filled with
shell-quoted values (ha_ops.util.command_template), and every node name from outside meets one rule
(ha_ops.util.names)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from ha_ops.health.config import AgentConfig
from ha_ops.remediation.config import ControllerConfig, NodeAccess, SlurmFence
from ha_ops.remediation.nodeops import SshNodeOps
from ha_ops.storage.failover import FailoverConfig
from ha_ops.util.command_template import fill, placeholders
from ha_ops.util.names import node_name_problem

HOSTILE = "gpu7;touch {marker};#"


@pytest.mark.parametrize("name", ["gpu1", "ip-10-0-1-7.ec2.internal", "node-01.rack2", "a", "9gpu"])
def test_node_names_of_real_clusters_are_accepted(name: str) -> None:
    assert node_name_problem(name) is None


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("", "may not be empty"),
        ("gpu7;touch /tmp/x;#", "is not a node name"),
        ("gpu 7", "is not a node name"),
        ("GPU7", "is not a node name"),
        ("gpu7\n", "is not a node name"),
        ("-gpu7", "is not a node name"),
        ("gpu7.", "is not a node name"),
        ("../etc", "is not a node name"),
        ("$(reboot)", "is not a node name"),
        ("a" * 254, "at most 253 characters"),
    ],
)
def test_anything_else_is_refused_saying_why(name: str, words: str) -> None:
    problem = node_name_problem(name)
    assert problem is not None and words in problem


def test_configurations_refuse_bad_node_names_naming_the_field(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match=r"node\n.*may not be empty"):
        AgentConfig(node="")  # it passed check-config before, and then every sweep failed
    with pytest.raises(ValidationError, match=r"pools\.p\.nodes\.1\n.*is not a node name"):
        ControllerConfig.model_validate(
            {"id": "c", "state_dir": tmp_path, "pools": {"p": {"nodes": ["n1", "n2;reboot"]}}}
        )
    with pytest.raises(ValidationError, match=r"access\.addresses\.Gpu1\.\[key\]"):
        ControllerConfig.model_validate(
            {"id": "c", "state_dir": tmp_path, "access": {"addresses": {"Gpu1": "10.0.0.1"}}}
        )


@pytest.mark.parametrize(
    ("model", "field", "template", "words"),
    [
        (NodeAccess, "reset_gpu_command", "nvidia-smi -r -i {gpus}", "unknown placeholder(s) {gpus}; it may use "
         "{gpu}, {node}"),
        (NodeAccess, "reboot_command", "ssh {host} reboot", "unknown placeholder(s) {host}; it may use {node}"),
        (NodeAccess, "validate_command", "echo {node!r}", "not a plain {name} placeholder"),
        (NodeAccess, "power_cycle_command", "ipmitool -H {node-bmc}", "not a plain {name} placeholder"),
        (NodeAccess, "reboot_command", "echo {", "not a command template"),
        (SlurmFence, "power_off_command", "off {0}", "not a plain {name} placeholder"),
    ],
)  # fmt: skip
def test_command_templates_are_checked_when_the_config_loads(
    model: type, field: str, template: str, words: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        model(**{field: template})
    assert caught.value.errors()[0]["loc"] == (field,) and words in str(caught.value)


def test_the_storage_watchers_power_off_is_checked_too(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match=r"power_off_command\n.*unknown placeholder\(s\) \{host\}"):
        FailoverConfig(id="w", master_host="m", master_address="10.0.0.5", peers=["10.0.0.6:9422"],
                       fence_command="true", promote_command="true", state_dir=tmp_path,
                       power_off_command="off {host}")  # fmt: skip


def test_literal_braces_and_known_placeholders_pass() -> None:
    assert placeholders("awk '{{print $1}}' /x; nvidia-smi -r -i {gpu} # on {node}") == ["gpu", "node"]
    assert NodeAccess(reset_gpu_command="nvidia-smi -r -i {gpu}").reset_gpu_command == "nvidia-smi -r -i {gpu}"


def test_a_filled_value_stays_one_word() -> None:
    assert fill("ipmitool -H {node}-bmc", node="gpu1") == "ipmitool -H gpu1-bmc"
    assert fill("ipmitool -H {node}-bmc", node="gpu7;touch /tmp/x;#") == "ipmitool -H 'gpu7;touch /tmp/x;#'-bmc"


def test_a_hostile_node_name_runs_no_second_command(tmp_path: Path) -> None:
    """The power cycle runs on the controller's own host through `sh -c`, as it does in production: a node name
    that reached it (from an older state, a typo'd config before names were checked) is one argument."""
    marker = tmp_path / "injected"
    ops = SshNodeOps(NodeAccess(power_cycle_command=f"echo cycling {{node}} > {tmp_path / 'out'}"))
    result = ops.run_here(fill(ops.access.power_cycle_command or "", node=HOSTILE.format(marker=marker)))
    assert result.ok
    assert not marker.exists()
    assert (tmp_path / "out").read_text() == f"cycling {HOSTILE.format(marker=marker)}\n"


def test_the_cli_refuses_a_repaired_node_that_is_no_node_name(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.unit.cli_helpers import run_main

    code = run_main(monkeypatch, "controller", "repaired", "gpu1/../breaker/reset", "--url", "http://127.0.0.1:9")
    said = capsys.readouterr().err
    assert code == 2 and "NODE: 'gpu1/../breaker/reset' is not a node name" in said, said
