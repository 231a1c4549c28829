"""The lab's Redfish BMC, driven by the Redfish power backend (sushy) as a real BMC would be: power state, resets,
basic authentication, and what it refuses. The machines here are a dictionary; in the lab they are the lab's nodes."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from ha_ops.cluster.power import BmcConfig, RedfishPower
from ha_ops.errors import SpecError, TransportError
from ha_ops.lab.bmc import Bmc, DictMachines


@pytest.fixture
def bmc() -> Iterator[tuple[Bmc, DictMachines, list[tuple[str, str]]]]:
    resets: list[tuple[str, str]] = []
    machines = DictMachines({"gpu1": True, "gpu2": True}, on_reset=lambda n, r: resets.append((n, r)))
    server = Bmc(machines, "admin", "lab-secret").start()
    try:
        yield server, machines, resets
    finally:
        server.stop()


def power(url: str, system: str | None = "/redfish/v1/Systems/gpu1") -> RedfishPower:
    return RedfishPower("gpu1", BmcConfig(kind="redfish", address=url, user="admin", password_env="HAO_LAB_BMC",
                                          system=system, timeout_s=5))  # fmt: skip


def test_power_off_and_cycle_through_redfish(bmc, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    server, machines, resets = bmc
    monkeypatch.setenv("HAO_LAB_BMC", "lab-secret")
    backend = power(server.url)
    assert backend.state() == "on"
    backend.act("off")
    assert machines.on == {"gpu1": False, "gpu2": True} and backend.state() == "off"
    backend.act("cycle")  # off: switched on
    backend.act("cycle")  # on: power-cycled
    assert resets == [("gpu1", "ForceOff"), ("gpu1", "On"), ("gpu1", "PowerCycle")]
    assert machines.on["gpu1"] is True
    assert server.open_sessions == 1
    backend.close()
    assert server.open_sessions == 0  # logged out: a real BMC has only a few session slots


def test_credentials_and_systems_are_checked(bmc, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    server, _, resets = bmc
    monkeypatch.setenv("HAO_LAB_BMC", "wrong")
    with pytest.raises(TransportError, match="gpu1: Redfish at"):
        power(server.url).state()
    monkeypatch.setenv("HAO_LAB_BMC", "lab-secret")
    with pytest.raises(TransportError, match="gpu1: Redfish at"):
        power(server.url, "/redfish/v1/Systems/gpu9").state()
    with pytest.raises(SpecError, match="has 2 systems; name one"):
        power(server.url, None).state()
    assert resets == []
    assert server.open_sessions == 0  # each refused client logged out of the session it had opened


def test_the_raw_protocol(bmc) -> None:  # type: ignore[no-untyped-def]
    server, _, resets = bmc
    with urllib.request.urlopen(server.url + "/redfish/v1/", timeout=5) as answer:  # the root needs no login
        assert json.loads(answer.read())["Systems"] == {"@odata.id": "/redfish/v1/Systems"}
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(server.url + "/redfish/v1/Systems", timeout=5)
    assert info.value.code == 401
    auth = {"Authorization": "Basic " + base64.b64encode(b"admin:lab-secret").decode()}
    action = server.url + "/redfish/v1/Systems/gpu2/Actions/ComputerSystem.Reset"
    body = json.dumps({"ResetType": "Explode"}).encode()
    bad = urllib.request.Request(action, data=body, headers=auth, method="POST")
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(bad, timeout=5)
    assert info.value.code == 400 and b"ResetType 'Explode'" in info.value.read()
    assert resets == []


def test_clients_log_in_with_a_session_as_on_a_real_bmc(bmc, monkeypatch, caplog) -> None:  # type: ignore[no-untyped-def]
    server, _, _ = bmc
    monkeypatch.setenv("HAO_LAB_BMC", "lab-secret")
    backend = power(server.url)
    assert backend.state() == "on"
    backend.close()
    assert "Falling back" not in caplog.text and "failed" not in caplog.text  # sushy's session login, no fallback
    login = json.dumps({"UserName": "admin", "Password": "lab-secret"}).encode()
    request = urllib.request.Request(server.url + "/redfish/v1/SessionService/Sessions", data=login, method="POST")
    with urllib.request.urlopen(request, timeout=5) as answer:
        token, location = answer.headers["X-Auth-Token"], answer.headers["Location"]
    system = urllib.request.Request(server.url + "/redfish/v1/Systems/gpu1", headers={"X-Auth-Token": token})
    with urllib.request.urlopen(system, timeout=5) as answer:
        assert json.loads(answer.read())["PowerState"] == "On"
    gone = urllib.request.Request(server.url + location, headers={"X-Auth-Token": token}, method="DELETE")
    with urllib.request.urlopen(gone, timeout=5) as answer:
        assert answer.status == 204
    with pytest.raises(urllib.error.HTTPError) as info:  # the session ended: its token no longer works
        urllib.request.urlopen(urllib.request.Request(server.url + "/redfish/v1/Systems",
                                                      headers={"X-Auth-Token": token}), timeout=5)  # fmt: skip
    assert info.value.code == 401
    info.value.close()
    wrong = json.dumps({"UserName": "admin", "Password": "guess"}).encode()
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(urllib.request.Request(server.url + "/redfish/v1/SessionService/Sessions",
                                                      data=wrong, method="POST"), timeout=5)  # fmt: skip
    assert info.value.code == 401
    info.value.close()
