"""Power through a node's BMC: Redfish (through sushy, the client OpenStack Ironic drives real BMCs with) or IPMI
(ipmitool, which every BMC vendor ships and tests against). BMC credentials are references to a file or an
environment variable, read when needed and never logged, printed or put on a command line."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Literal, Protocol

from pydantic import Field, model_validator

from ha_ops.cluster.ops import PowerAction
from ha_ops.errors import HaOpsError, SpecError, TransportError
from ha_ops.util.models import ConfigModel
from ha_ops.util.proc import run

log = logging.getLogger(__name__)

PowerState = Literal["on", "off", "unknown"]


class BmcConfig(ConfigModel):
    """A node's BMC, from the inventory's `ha_ops_bmc` host variable."""

    kind: Literal["redfish", "ipmi"]
    address: str = Field(description="Redfish: its base URL (https://bmc1); IPMI: its host name or address.")
    user: str
    password_file: Path | None = None
    password_env: str | None = None
    system: str | None = Field(None, description="Redfish: the ComputerSystem's path (default: the only one).")
    verify: bool | Path = Field(True, description="Redfish over https: verify the certificate (or this CA file).")
    timeout_s: float = Field(20.0, gt=0)

    @model_validator(mode="after")
    def _one_credential(self) -> BmcConfig:
        if (self.password_file is None) == (self.password_env is None):
            raise ValueError("give exactly one of password_file and password_env (never the password itself)")
        return self


def password(bmc: BmcConfig, host: str) -> str:
    """The BMC password from its reference; SpecError naming the host and the reference when it is not there."""
    if bmc.password_env is not None:
        value = os.environ.get(bmc.password_env)
        if not value:
            raise SpecError(f"{host}.ha_ops_bmc", [f"password_env: environment variable {bmc.password_env} is not set"])
        return value
    assert bmc.password_file is not None
    try:
        value = bmc.password_file.expanduser().read_text().strip()
    except OSError as exc:
        raise SpecError(
            f"{host}.ha_ops_bmc", [f"password_file: cannot read {bmc.password_file}: {exc.strerror}"]
        ) from None
    if not value:
        raise SpecError(f"{host}.ha_ops_bmc", [f"password_file: {bmc.password_file} is empty"])
    return value


class PowerBackend(Protocol):
    host: str

    def state(self) -> PowerState: ...

    def act(self, action: PowerAction) -> None:
        """Do it, and return once the BMC reports the result (off, or on again) or raise TransportError."""
        ...

    def describe(self, action: PowerAction) -> str:
        """What `act` sends, for --dry-run (no credentials)."""
        ...

    def close(self) -> None:
        """Let go of the BMC's connection, if one is held."""
        ...


def backend(host: str, bmc: BmcConfig) -> PowerBackend:
    return RedfishPower(host, bmc) if bmc.kind == "redfish" else IpmiPower(host, bmc)


def _wait_state(backend: PowerBackend, wanted: PowerState, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    seen = backend.state()
    while seen != wanted:
        if time.monotonic() >= deadline:
            raise TransportError(
                f"{backend.host}: the BMC still reports power {seen} {timeout:g} s after asking for {wanted}"
            )
        time.sleep(0.5)
        seen = backend.state()


class RedfishPower:
    # Reset types in the order tried for each action: BMCs offer different subsets (AllowableValues says which).
    RESETS: dict[PowerAction, tuple[str, ...]] = {
        "off": ("ForceOff",),
        "on": ("On", "ForceOn"),
        "cycle": ("PowerCycle", "ForceRestart"),
    }

    def __init__(self, host: str, bmc: BmcConfig) -> None:
        self.host = host
        self.bmc = bmc
        self._system = None
        self._connector = None
        self._auth = None

    def close(self) -> None:
        """Log out of the BMC's session and close the connection. BMCs have few session slots, and a session left
        to sushy's finaliser is deleted from whichever thread the garbage collector happens to run in."""
        _logout(self._auth, self._connector)
        self._system = self._connector = self._auth = None

    def _connect(self):  # -> sushy.resources.system.system.System
        if self._system is not None:
            return self._system
        import sushy
        from sushy import exceptions
        from sushy.auth import SessionOrBasicAuth
        from sushy.connector import Connector

        # Our own connector and authentication, so that the session is logged out and the connection closed when
        # we are done or the BMC refuses us (sushy keeps both open until its objects are collected).
        connector = Connector(
            self.bmc.address,
            verify=str(self.bmc.verify) if isinstance(self.bmc.verify, Path) else self.bmc.verify,
            server_side_retries=2,
            server_side_retries_delay=1,
            default_request_timeout=int(self.bmc.timeout_s),
            connect_timeout=int(self.bmc.timeout_s),
        )
        auth = SessionOrBasicAuth(username=self.bmc.user, password=password(self.bmc, self.host))
        try:
            root = sushy.Sushy(self.bmc.address, auth=auth, connector=connector)
            if self.bmc.system:
                system = root.get_system(self.bmc.system)
            else:
                members = root.get_system_collection().get_members()
                if len(members) != 1:
                    raise SpecError(f"{self.host}.ha_ops_bmc", [
                        f"system: the BMC at {self.bmc.address} has {len(members)} systems; name one"])  # fmt: skip
                system = members[0]
        except exceptions.SushyError as exc:
            _logout(auth, connector)
            raise TransportError(f"{self.host}: Redfish at {self.bmc.address}: {_first_line(exc)}") from None
        except BaseException:
            _logout(auth, connector)
            raise
        self._system, self._connector, self._auth = system, connector, auth
        return system

    def state(self) -> PowerState:
        from sushy import exceptions

        system = self._connect()
        try:
            system.refresh(force=True)
        except exceptions.SushyError as exc:
            raise TransportError(f"{self.host}: Redfish at {self.bmc.address}: {_first_line(exc)}") from None
        value = getattr(system.power_state, "value", system.power_state)
        return "on" if value == "On" else "off" if value == "Off" else "unknown"

    def _reset(self, action: PowerAction) -> str:
        allowed = {getattr(v, "value", v) for v in self._connect().get_allowed_reset_system_values()}
        for reset in self.RESETS[action]:
            if reset in allowed:
                return reset
        raise TransportError(f"{self.host}: the BMC allows no reset for power {action} (it allows {sorted(allowed)})")

    def act(self, action: PowerAction) -> None:
        import sushy
        from sushy import exceptions

        if action == "cycle" and self.state() == "off":
            action = "on"  # a BMC refuses to cycle a node that is off; switching it on is the cycle's second half
        reset = self._reset(action)
        try:
            self._connect().reset_system(sushy.ResetType(reset))
        except exceptions.SushyError as exc:
            raise TransportError(f"{self.host}: Redfish {reset} at {self.bmc.address}: {_first_line(exc)}") from None
        if action != "cycle":
            _wait_state(self, "off" if action == "off" else "on", self.bmc.timeout_s)

    def describe(self, action: PowerAction) -> str:
        system = self.bmc.system or "<its one system>"
        resets = "|".join(self.RESETS[action])
        return f"Redfish {self.bmc.address}: POST {system}/Actions/ComputerSystem.Reset ResetType={resets}"


def _logout(auth, connector) -> None:  # (sushy.auth.AuthBase | None, sushy.connector.Connector | None)
    from sushy import exceptions

    if auth is not None:
        try:
            auth.close()  # DELETE of the session, when one was made
        except exceptions.SushyError as exc:
            log.warning("Redfish: the BMC's session was not logged out: %s", _first_line(exc))
            auth.reset_session_attrs()  # so that sushy's finaliser does not try again
    if connector is not None:
        connector.close()


class IpmiPower:
    """ipmitool over lanplus; the password goes through IPMI_PASSWORD (`-E`), never the command line."""

    def __init__(self, host: str, bmc: BmcConfig) -> None:
        self.host = host
        self.bmc = bmc

    def close(self) -> None:
        return None  # each call is its own ipmitool process

    def argv(self, verb: str) -> list[str]:
        return ["ipmitool", "-I", "lanplus", "-H", self.bmc.address, "-U", self.bmc.user, "-E", "-N", "2", "-R", "2",
                "chassis", "power", verb]  # fmt: skip

    def _ipmitool(self, verb: str) -> str:
        env = {**os.environ, "IPMI_PASSWORD": password(self.bmc, self.host)}
        try:
            result = run(self.argv(verb), env=env, timeout=self.bmc.timeout_s, check=False, where="this machine")
        except FileNotFoundError:
            raise HaOpsError("IPMI power needs ipmitool on this machine (apt install ipmitool)") from None
        if not result.ok:
            raise TransportError(f"{self.host}: ipmitool chassis power {verb} at {self.bmc.address}: "
                                 f"{(result.stderr or result.stdout).strip()[-300:]}")  # fmt: skip
        return result.stdout

    def state(self) -> PowerState:
        return parse_ipmi_status(self._ipmitool("status"))

    def act(self, action: PowerAction) -> None:
        if action == "cycle" and self.state() == "off":
            action = "on"
        self._ipmitool(action)
        if action != "cycle":
            _wait_state(self, "off" if action == "off" else "on", self.bmc.timeout_s)

    def describe(self, action: PowerAction) -> str:
        return (
            "IPMI_PASSWORD=<from "
            + (f"${self.bmc.password_env}" if self.bmc.password_env else str(self.bmc.password_file))
            + "> "
            + " ".join(self.argv(action))
        )


def parse_ipmi_status(text: str) -> PowerState:
    """`Chassis Power is on` / `Chassis Power is off`."""
    last = text.strip().lower()
    if last.endswith(" on"):
        return "on"
    if last.endswith(" off"):
        return "off"
    return "unknown"


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
