"""What `systemctl` means on a lab node, which has no init system: the subset of systemctl that ha-ops' SSH path
and the runbooks run (ha_ops.cluster.commands) carried out on the lab's supervised services, so that a command sent
over SSH to a lab node is the command a real host runs. Exit codes follow systemctl's (3: inactive, 5: no such unit).
Beside it `mfsmaster -a`, a metalogger's promotion, starts the node's MooseFS master as a lab service.

Each node's `systemctl` (and `mfsmaster`) is a small script (SHIM) that hands its arguments over a Unix socket to
the lab's supervisor: a lab service in this machine's namespaces, where the lab's processes are managed (a node's own
mount namespace hides /run/netns). The socket is root's alone (mode 0600)."""

from __future__ import annotations

import json
import os
import socketserver
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ha_ops.cluster.commands import UNITS
from ha_ops.lab.context import LabContext, ServiceDef

# The signals `systemctl kill` may send on a lab node, by name or number, and what each does to a service.
SIGNALS = {
    **dict.fromkeys(("SIGKILL", "KILL", "9"), "kill"),
    **dict.fromkeys(("SIGSTOP", "STOP", "19"), "freeze"),
    **dict.fromkeys(("SIGCONT", "CONT", "18"), "thaw"),
    **dict.fromkeys(("SIGTERM", "TERM", "15"), "stop"),
}
VERBS = ("start", "stop", "restart", "kill", "is-active", "show", "mask", "unmask", "is-enabled")
SERVICE_OF_UNIT = {unit: service for service, unit in UNITS.items()}


class Usage(ValueError):
    """What the shim does not understand (systemctl's own exit code for bad usage: 1)."""


@dataclass(frozen=True)
class Call:
    verb: str  # start, stop, restart, kill, freeze, thaw, is-active, load-state, mask, unmask, is-enabled
    unit: str
    quiet: bool = False
    now: bool = False  # mask --now: stop it too

    @property
    def unit_file(self) -> str:
        """The host's name of the unit, as systemctl's messages give it."""
        return f"{UNITS.get(self.unit, self.unit)}.service"


def parse(argv: list[str]) -> Call:
    """`start U`, `stop U`, `restart U`, `kill [--signal=S | -s S] U`, `is-active [--quiet] U`,
    `show --property=LoadState --value U`, `mask [--now] U`, `unmask U`, `is-enabled [--quiet] U`; a `.service`
    suffix is dropped."""
    args = list(argv)
    signal, quiet, prop, value, now = "SIGTERM", False, None, False, False
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
        elif arg == "--now":
            now = True
        elif arg.startswith("-"):
            raise Usage(f"option {arg} is not supported on a lab node")
        else:
            rest.append(arg)
    if len(rest) != 2 or rest[0] not in VERBS:
        raise Usage(f"supported on a lab node: {', '.join(VERBS)} with one unit; got {' '.join(argv) or 'nothing'}")
    verb, unit = rest[0], rest[1].removesuffix(".service")
    unit = SERVICE_OF_UNIT.get(unit, unit)  # a host's unit name (ha-ops-agent) is the lab's service (agent)
    if verb == "kill":
        if signal not in SIGNALS:
            raise Usage(f"signal {signal} is not supported on a lab node ({', '.join(sorted(SIGNALS))})")
        return Call(SIGNALS[signal], unit)
    if verb == "show":
        if prop != "LoadState" or not value:
            raise Usage("show is supported as: show --property=LoadState --value UNIT")
        return Call("load-state", unit)
    if now and verb != "mask":
        raise Usage("--now is supported with mask only")
    return Call(verb, unit, quiet, now)


class Services(Protocol):
    def services(self) -> list[str]: ...

    def is_running(self, service: str) -> bool: ...

    def start(self, service: str) -> int: ...

    def stop(self, service: str) -> None: ...

    def restart(self, service: str) -> int: ...

    def kill(self, service: str) -> None: ...

    def freeze(self, service: str) -> None: ...

    def thaw(self, service: str) -> None: ...

    def is_masked(self, service: str) -> bool: ...

    def mask(self, service: str, now: bool = False) -> None: ...

    def unmask(self, service: str) -> None: ...

    def restore_storage_master(self) -> None: ...


def run(node: Services, call: Call) -> tuple[int, str]:
    """Carry the call out on the node's services; systemctl's exit code and what it prints."""
    known = call.unit in node.services()
    if call.verb == "load-state":
        return 0, "loaded" if known else "not-found"
    if call.verb == "is-active":
        active = known and node.is_running(call.unit)
        return (0 if active else 3), ("" if call.quiet else "active" if active else "inactive")
    if not known:
        if call.verb == "is-enabled":
            return 1, f"Failed to get unit file state for {call.unit_file}: No such file or directory"
        return 5, f"Failed to {call.verb} {call.unit_file}: Unit {call.unit_file} not found."
    if call.verb == "is-enabled":
        masked = node.is_masked(call.unit)
        return (1 if masked else 0), ("" if call.quiet else "masked" if masked else "enabled")
    if call.verb in ("start", "restart") and node.is_masked(call.unit):
        return 1, f"Failed to {call.verb} {call.unit_file}: Unit {call.unit_file} is masked."
    if call.verb == "mask":
        node.mask(call.unit, now=call.now)
    else:
        getattr(node, call.verb)(call.unit)
    return 0, ""


def answer(node: Services, argv: list[str]) -> dict[str, object]:
    """systemctl's exit code and output for one command line: what the node's shim prints and exits with."""
    try:
        call = parse(argv)
    except Usage as exc:
        return {"code": 1, "stdout": "", "stderr": f"systemctl (ha-ops lab): {exc}\n"}
    try:
        code, text = run(node, call)
    except Exception as exc:  # the supervisor's failure, told the way systemctl tells a failed job
        return {"code": 1, "stdout": "", "stderr": f"Job for {call.unit}.service failed: {exc}\n"}
    text = f"{text}\n" if text else ""
    to_stdout = code == 0 or call.verb in ("is-active", "is-enabled")
    return {"code": code, "stdout": text if to_stdout else "", "stderr": "" if to_stdout else text}


def answer_mfsmaster(node: Services, argv: list[str]) -> dict[str, object]:
    """`mfsmaster -a [start]` on the metalogger's node: a MooseFS master started from the metalogger's metadata and
    change logs (what promoting a metalogger runs on a real host), as a lab service of the node."""
    if [a for a in argv if a != "start"] != ["-a"]:
        return {"code": 1, "stdout": "", "stderr": "mfsmaster (ha-ops lab): supported on a lab node: mfsmaster -a\n"}
    try:
        node.restore_storage_master()
    except Exception as exc:
        return {"code": 1, "stdout": "", "stderr": f"mfsmaster (ha-ops lab): {exc}\n"}
    return {"code": 0, "stdout": "metadata restored from the metalogger's files; master started\n", "stderr": ""}


PROGRAMS = {"systemctl": answer, "mfsmaster": answer_mfsmaster}


class _Handler(socketserver.StreamRequestHandler):
    nodes: Callable[[str], Services]

    def handle(self) -> None:
        try:
            request = json.loads(self.rfile.readline())
            program = PROGRAMS[str(request.get("program", "systemctl"))]
            reply = program(self.nodes(str(request["node"])), [str(a) for a in request["args"]])
        except Exception as exc:
            reply = {"code": 1, "stdout": "", "stderr": f"systemctl (ha-ops lab): {exc}\n"}
        self.wfile.write(json.dumps(reply).encode() + b"\n")


class Supervisor(socketserver.ThreadingUnixStreamServer):
    """What the nodes' `systemctl` talks to: a Unix socket in the lab's folder (which every node sees), served
    from this machine's namespaces, where the lab's processes are managed."""

    daemon_threads = True

    def __init__(self, path: Path, nodes: Callable[[str], Services]) -> None:
        path.unlink(missing_ok=True)
        handler = type("Handler", (_Handler,), {"nodes": staticmethod(nodes)})
        previous = os.umask(0o177)  # created 0600: no moment in which another user could connect
        try:
            super().__init__(str(path), handler)
        finally:
            os.umask(previous)


SHIM = """#!{python} -IS
# ha-ops lab: this node has no init system. Its services are the lab's: this asks the lab's supervisor
# (ha_ops.lab.systemctl) to do what systemctl (or mfsmaster -a) would, and prints and exits as it does.
import json, os, socket, sys

program = os.path.basename(sys.argv[0])
try:
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(120)
    s.connect({socket!r})
    s.sendall(json.dumps({{"node": {node!r}, "program": program, "args": sys.argv[1:]}}).encode() + b"\\n")
    data = b""
    while not data.endswith(b"\\n"):
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    reply = json.loads(data)
except (OSError, ValueError) as exc:
    sys.stderr.write("%s (ha-ops lab): the lab's supervisor at {socket} does not answer: %s\\n" % (program, exc))
    sys.exit(1)
sys.stdout.write(reply["stdout"])
sys.stderr.write(reply["stderr"])
sys.exit(reply["code"])
"""


def install_shim(node_dir: Path, socket_path: Path, node: str) -> Path:
    """Write the node's `systemctl` and `mfsmaster` into a folder the node mounts over /usr/local/sbin (first on a
    login's PATH; the lab's own services run /usr/sbin/mfsmaster by its full path)."""
    folder = node_dir / "sbin"
    folder.mkdir(parents=True, exist_ok=True)
    for program in PROGRAMS:
        script = folder / program
        script.write_text(SHIM.format(python=sys.executable, socket=str(socket_path), node=node))
        script.chmod(0o755)
    return folder


def socket_path(ctx: LabContext) -> Path:
    return ctx.paths.root / "supervisor.sock"


def supervisor_service(ctx: LabContext) -> ServiceDef:
    argv = [sys.executable, "-m", "ha_ops", "lab", "supervisor", "--name", ctx.name, "--socket", str(socket_path(ctx))]
    return ServiceDef("host", "supervisor", argv, ctx.paths.host_logs / "supervisor.log")
