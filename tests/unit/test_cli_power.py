"""`ha-ops power` against a real Redfish endpoint (the lab's BMC server, its machines a dictionary), with the BMC
taken from an inventory as an operator writes it: state, off, cycle, a dry run that sends nothing, and bad input."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from ha_ops.cli.main import app
from ha_ops.errors import SpecError
from ha_ops.lab.bmc import Bmc, DictMachines

runner = CliRunner()


@pytest.fixture
def site(tmp_path: Path) -> Iterator[tuple[Path, DictMachines, list[tuple[str, str]]]]:
    resets: list[tuple[str, str]] = []
    machines = DictMachines({"gpu1": True, "gpu2": True}, on_reset=lambda n, r: resets.append((n, r)))
    server = Bmc(machines, "admin", "s3cret").start()
    (tmp_path / "bmc-password").write_text("s3cret\n")
    bmc = {"kind": "redfish", "address": server.url, "user": "admin", "password_file": str(tmp_path / "bmc-password"),
           "timeout_s": 5}  # fmt: skip
    hosts = {
        "gpu1": {"ansible_host": "10.0.0.11", "ha_ops_bmc": {**bmc, "system": "/redfish/v1/Systems/gpu1"}},
        "gpu2": {"ansible_host": "10.0.0.12", "ha_ops_bmc": {**bmc, "system": "/redfish/v1/Systems/gpu2",
                                                             "password_file": str(tmp_path / "missing")}},
        "ctl1": {"ansible_host": "10.0.0.2"},
    }  # fmt: skip
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    try:
        yield inventory, machines, resets
    finally:
        server.stop()


def power(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["power", *args], catch_exceptions=False)
    return result.exit_code, result.output


def test_off_and_cycle_return_once_the_bmc_reports_them(site) -> None:  # type: ignore[no-untyped-def]
    inventory, machines, resets = site
    assert power("status", "gpu1", "-i", str(inventory), "--json") == (0, json.dumps({"node": "gpu1", "power": "on"},
                                                                                     indent=2) + "\n")  # fmt: skip
    code, out = power("off", "gpu1", "-i", str(inventory))
    assert code == 0 and "the BMC reports off" in out and machines.on["gpu1"] is False
    code, out = power("cycle", "gpu1", "-i", str(inventory), "--json")
    assert code == 0 and json.loads(out) == {"node": "gpu1", "action": "cycle", "power": "on"}
    assert resets == [("gpu1", "ForceOff"), ("gpu1", "On")]  # a cycle of a node that is off switches it on


def test_a_dry_run_sends_nothing(site) -> None:  # type: ignore[no-untyped-def]
    inventory, machines, resets = site
    code, out = power("off", "gpu1", "-i", str(inventory), "--dry-run")
    assert code == 0 and out.startswith("dry run: ") and "ForceOff" in out and "s3cret" not in out
    assert resets == [] and machines.on["gpu1"] is True


@pytest.mark.parametrize(
    ("node", "why"),
    [("ctl1", "ctl1: no ha_ops_bmc"), ("gpu2", "password_file: cannot read"), ("gpu9", "'gpu9' is not a host")],
)
def test_bad_input_is_refused_before_the_bmc_is_asked(site, node: str, why: str) -> None:  # type: ignore[no-untyped-def]
    inventory, _, resets = site
    with pytest.raises(SpecError, match=why):  # main() turns it into one line and exit 2
        power("off", node, "-i", str(inventory))
    assert resets == []
