"""BMC configuration, credentials by reference, and IPMI's command lines (Redfish against an emulator is in
tests/integration/test_redfish_power.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from ha_ops.cluster.power import BmcConfig, IpmiPower, backend, parse_ipmi_status, password
from ha_ops.errors import SpecError, TransportError

SECRET = "s3cret-never-shown"


def ipmi(tmp_path: Path) -> BmcConfig:
    secret = tmp_path / "bmc-password"
    secret.write_text(SECRET + "\n")
    return BmcConfig(kind="ipmi", address="10.9.0.7", user="admin", password_file=secret, timeout_s=5)


def test_a_bmc_takes_exactly_one_credential_reference() -> None:
    with pytest.raises(ValidationError, match="exactly one of password_file and password_env"):
        BmcConfig(kind="redfish", address="https://bmc1", user="admin")
    with pytest.raises(ValidationError, match="exactly one"):
        BmcConfig(kind="redfish", address="https://bmc1", user="admin", password_env="A", password_file=Path("/x"))
    with pytest.raises(ValidationError, match="password"):
        BmcConfig(kind="redfish", address="https://bmc1", user="admin", password="inline")  # type: ignore[call-arg]


def test_a_missing_credential_names_the_host_and_the_reference(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HAO_TEST_BMC", raising=False)
    by_env = BmcConfig(kind="redfish", address="https://bmc1", user="admin", password_env="HAO_TEST_BMC")
    with pytest.raises(SpecError, match=r"gpu3.ha_ops_bmc: password_env: environment variable HAO_TEST_BMC") as info:
        password(by_env, "gpu3")
    assert info.value.exit_code == 2
    monkeypatch.setenv("HAO_TEST_BMC", SECRET)
    assert password(by_env, "gpu3") == SECRET
    by_file = BmcConfig(kind="ipmi", address="b", user="admin", password_file=tmp_path / "absent")
    with pytest.raises(SpecError, match="password_file: cannot read"):
        password(by_file, "gpu3")
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(SpecError, match="is empty"):
        password(by_file.model_copy(update={"password_file": tmp_path / "empty"}), "gpu3")


def test_ipmi_command_lines_keep_the_password_off_them(tmp_path: Path) -> None:
    power = backend("gpu3", ipmi(tmp_path))
    assert isinstance(power, IpmiPower)
    assert power.argv("off") == ["ipmitool", "-I", "lanplus", "-H", "10.9.0.7", "-U", "admin", "-E", "-N", "2",
                                 "-R", "2", "chassis", "power", "off"]  # fmt: skip
    described = power.describe("cycle")
    assert described.endswith("chassis power cycle")
    assert SECRET not in described and str(tmp_path / "bmc-password") in described


def test_ipmi_status_parsing() -> None:
    assert parse_ipmi_status("Chassis Power is on\n") == "on"
    assert parse_ipmi_status("Chassis Power is off") == "off"
    assert parse_ipmi_status("Error: Unable to establish IPMI v2 / RMCP+ session") == "unknown"


def test_ipmi_runs_ipmitool_with_the_password_in_its_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stand-in ipmitool on PATH records what it was given and keeps a power state: the BMC itself is not what
    this checks, only what ha-ops hands ipmitool and how it reads the answers."""
    state, calls = tmp_path / "state", tmp_path / "calls"
    state.write_text("on")
    tool = tmp_path / "bin" / "ipmitool"
    tool.parent.mkdir()
    tool.write_text(
        "#!/bin/sh\n"
        f'echo "$* pw=$IPMI_PASSWORD" >> {calls}\n'
        "verb=$(eval echo \\${$#})\n"
        f'case $verb in status) echo "Chassis Power is $(cat {state})";;'
        f' off) echo off > {state}; echo "Chassis Power Control: Down/Off";;'
        f' on) echo on > {state}; echo "Chassis Power Control: Up/On";;'
        ' *) echo "bad $verb" >&2; exit 1;; esac\n'
    )
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tool.parent}{os.pathsep}{os.environ['PATH']}")
    power = backend("gpu3", ipmi(tmp_path))
    assert power.state() == "on"
    power.act("off")
    assert power.state() == "off"
    power.act("cycle")  # a node that is off is switched on: the cycle's second half
    assert state.read_text().strip() == "on"
    lines = calls.read_text().splitlines()
    assert all(line.endswith(f"pw={SECRET}") for line in lines)
    assert any("chassis power off" in line for line in lines) and any("chassis power on" in line for line in lines)
    state.write_text("broken")
    tool.write_text("#!/bin/sh\necho 'Error: Unable to establish IPMI v2 / RMCP+ session' >&2\nexit 1\n")
    with pytest.raises(TransportError, match=r"gpu3: ipmitool chassis power status at 10\.9\.0\.7: Error: Unable"):
        power.state()
