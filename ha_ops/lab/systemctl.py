"""What `systemctl` means on a lab node, which has no init system: the subset of systemctl that ha-ops' SSH path
runs (ha_ops.cluster.commands) carried out on the lab's supervised services, so that a command sent over SSH to a
lab node is the command a real host runs. Exit codes follow systemctl's (3: inactive, 5: no such unit)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

# The signals `systemctl kill` may send on a lab node, by name or number, and what each does to a service.
SIGNALS = {
    **dict.fromkeys(("SIGKILL", "KILL", "9"), "kill"),
    **dict.fromkeys(("SIGSTOP", "STOP", "19"), "freeze"),
    **dict.fromkeys(("SIGCONT", "CONT", "18"), "thaw"),
    **dict.fromkeys(("SIGTERM", "TERM", "15"), "stop"),
}
VERBS = ("start", "stop", "restart", "kill", "is-active", "show")


class Usage(ValueError):
    """What the shim does not understand (systemctl's own exit code for bad usage: 1)."""


@dataclass(frozen=True)
class Call:
    verb: str  # start, stop, restart, kill, freeze, thaw, is-active, load-state
    unit: str
    quiet: bool = False


def parse(argv: list[str]) -> Call:
    """`start U`, `stop U`, `restart U`, `kill [--signal=S | -s S] U`, `is-active [--quiet] U`,
    `show --property=LoadState --value U`; a `.service` suffix is dropped."""
    args = list(argv)
    signal, quiet, prop, value = "SIGTERM", False, None, False
    rest = []
    while args:
        arg = args.pop(0)
        if arg.startswith("--signal="):
            signal = arg.split("=", 1)[1]
        elif arg in ("-s", "--signal"):
            if not args:
                raise Usage(f"{arg} needs a signal")
            signal = args.pop(0)
        elif arg in ("-q", "--quiet"):
            quiet = True
        elif arg.startswith("--property="):
            prop = arg.split("=", 1)[1]
        elif arg == "--value":
            value = True
        elif arg.startswith("-"):
            raise Usage(f"option {arg} is not supported on a lab node")
        else:
            rest.append(arg)
    if len(rest) != 2 or rest[0] not in VERBS:
        raise Usage(f"supported on a lab node: {', '.join(VERBS)} with one unit; got {' '.join(argv) or 'nothing'}")
    verb, unit = rest[0], rest[1].removesuffix(".service")
    if verb == "kill":
        if signal not in SIGNALS:
            raise Usage(f"signal {signal} is not supported on a lab node ({', '.join(sorted(SIGNALS))})")
        return Call(SIGNALS[signal], unit)
    if verb == "show":
        if prop != "LoadState" or not value:
            raise Usage("show is supported as: show --property=LoadState --value UNIT")
        return Call("load-state", unit)
    return Call(verb, unit, quiet)


class Services(Protocol):
    def services(self) -> list[str]: ...

    def is_running(self, service: str) -> bool: ...

    def start(self, service: str) -> int: ...

    def stop(self, service: str) -> None: ...

    def restart(self, service: str) -> int: ...

    def kill(self, service: str) -> None: ...

    def freeze(self, service: str) -> None: ...

    def thaw(self, service: str) -> None: ...


def run(node: Services, call: Call) -> tuple[int, str]:
    """Carry the call out on the node's services; systemctl's exit code and what it prints."""
    known = call.unit in node.services()
    if call.verb == "load-state":
        return 0, "loaded" if known else "not-found"
    if call.verb == "is-active":
        active = known and node.is_running(call.unit)
        return (0 if active else 3), ("" if call.quiet else "active" if active else "inactive")
    if not known:
        return 5, f"Failed to {call.verb} {call.unit}.service: Unit {call.unit}.service not found."
    getattr(node, call.verb)(call.unit)
    return 0, ""
