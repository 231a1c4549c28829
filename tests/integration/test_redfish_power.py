"""The Redfish power backend against a real Redfish service: OpenStack's sushy-emulator (its fake driver keeps a
system's power state and, like a real BMC, applies a reset a few seconds after accepting it), on 127.0.0.1 with
HTTP basic authentication."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest

from ha_ops.cluster.power import BmcConfig, RedfishPower
from ha_ops.errors import SpecError, TransportError

pytestmark = [pytest.mark.tools, pytest.mark.timeout(120)]

PASSWORD = "bmc-pass-7"


def _free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as s:
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    binary = shutil.which("sushy-emulator") or str(Path(sys.executable).parent / "sushy-emulator")
    assert Path(binary).exists(), "sushy-emulator is installed by make setup (the dev extra)"
    folder = tmp_path_factory.mktemp("redfish")
    (folder / "htpasswd").write_text(f"admin:{bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()}\n")
    (folder / "emulator.conf").write_text(
        f"SUSHY_EMULATOR_AUTH_FILE = {str(folder / 'htpasswd')!r}\n"
        "SUSHY_EMULATOR_FAKE_SYSTEMS = [{'uuid': '6c9c8f4c-0e55-4f5e-8f43-1b1d3c0e0a01', 'name': 'gpu9',"
        " 'power_state': 'On', 'nics': [{'mac': '52:54:00:00:00:09', 'ip': '127.0.0.9'}]}]\n"
    )
    port = _free_port()
    log = (folder / "emulator.log").open("w")
    proc = subprocess.Popen(
        [binary, "--fake", "-i", "127.0.0.1", "-p", str(port), "--config", str(folder / "emulator.conf")],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, (folder / "emulator.log").read_text()
                assert time.monotonic() < deadline, "sushy-emulator did not listen within 30 s"
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def bmc(url: str, env: str = "HAO_TEST_REDFISH") -> BmcConfig:
    return BmcConfig(kind="redfish", address=url, user="admin", password_env=env, timeout_s=30)


def test_power_off_and_on_through_redfish(emulator: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HAO_TEST_REDFISH", PASSWORD)
    power = RedfishPower("gpu9", bmc(emulator))
    assert power.state() == "on"
    power.act("off")  # returns once the BMC reports the node off
    assert power.state() == "off"
    power.act("cycle")  # off: the cycle switches it on
    deadline = time.monotonic() + 30
    while power.state() != "on":
        assert time.monotonic() < deadline, "the node did not come back on within 30 s"
        time.sleep(0.5)
    assert "ComputerSystem.Reset" in power.describe("off") and PASSWORD not in power.describe("off")
    power.close()


def test_wrong_password_and_missing_credential(emulator: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HAO_TEST_REDFISH", "not-the-password")
    with pytest.raises(TransportError, match=r"gpu9: Redfish at http://127\.0\.0\.1"):
        RedfishPower("gpu9", bmc(emulator)).state()
    monkeypatch.delenv("HAO_TEST_REDFISH_UNSET", raising=False)
    with pytest.raises(SpecError, match="HAO_TEST_REDFISH_UNSET is not set"):
        RedfishPower("gpu9", bmc(emulator, "HAO_TEST_REDFISH_UNSET")).state()
