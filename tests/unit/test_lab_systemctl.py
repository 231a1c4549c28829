"""The systemctl a lab node offers over SSH: the commands ha-ops' SSH path sends, on the lab's services."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import pytest

from ha_ops.cluster import commands
from ha_ops.cluster.ops import ServiceOp
from ha_ops.lab.systemctl import Call, Supervisor, Usage, answer, install_shim, parse, run


class Node:
    def __init__(self) -> None:
        self.state = {"slurmd": "running", "agent": "running", "mfsmaster": "running"}
        self.masked: set[str] = set()
        self.calls: list[str] = []

    def services(self) -> list[str]:
        return list(self.state)

    def is_running(self, service: str) -> bool:
        return self.state[service] == "running"

    def _set(self, verb: str, service: str, state: str) -> None:
        self.calls.append(f"{verb} {service}")
        self.state[service] = state

    def start(self, service: str) -> int:
        self._set("start", service, "running")
        return 1

    def stop(self, service: str) -> None:
        self._set("stop", service, "dead")

    def restart(self, service: str) -> int:
        self._set("restart", service, "running")
        return 1

    def kill(self, service: str) -> None:
        self._set("kill", service, "dead")

    def freeze(self, service: str) -> None:
        self._set("freeze", service, "frozen")

    def thaw(self, service: str) -> None:
        self._set("thaw", service, "running")

    def is_masked(self, service: str) -> bool:
        return service in self.masked

    def mask(self, service: str, now: bool = False) -> None:
        self.masked.add(service)
        if now:
            self.stop(service)

    def unmask(self, service: str) -> None:
        self.masked.discard(service)

    def restore_storage_master(self) -> None:
        self.calls.append("mfsmaster -a")


@pytest.mark.parametrize("action", ["start", "stop", "restart", "kill", "freeze", "thaw"])
def test_every_command_the_ssh_path_sends_means_the_same_on_a_lab_node(action: str) -> None:
    (command,) = commands.service(ServiceOp(host="gpu1", unit="slurmd", action=action))  # type: ignore[arg-type]
    call = parse(list(command.argv[1:]))
    assert call == Call(action, "slurmd")
    node = Node()
    assert run(node, call) == (0, "")
    assert node.calls == [f"{action} slurmd"]


def test_a_hosts_unit_names_mean_the_labs_services() -> None:
    (command,) = commands.service(ServiceOp(host="gpu1", unit="agent", action="freeze"))  # sent as ha-ops-agent
    assert parse(list(command.argv[1:])) == Call("freeze", "agent")
    assert parse(["is-active", "moosefs-chunkserver.service"]) == Call("is-active", "chunkserver")


def test_questions_about_units() -> None:
    node = Node()
    loaded = commands.service_loaded("slurmd")
    assert run(node, parse(list(loaded.argv[1:]))) == (0, "loaded")
    assert run(node, parse(["show", "--property=LoadState", "--value", "slurmctld.service"])) == (0, "not-found")
    active = commands.service_active("agent")
    assert run(node, parse(list(active.argv[1:]))) == (0, "")
    node.freeze("agent")
    assert run(node, parse(["is-active", "agent"])) == (3, "inactive")  # frozen counts as not running here
    assert run(node, parse(["start", "slurmctld"]))[0] == 5


def test_a_masked_unit_is_never_started_until_unmasked() -> None:
    node = Node()
    assert run(node, parse(["mask", "--now", "moosefs-master"])) == (0, "")
    assert node.calls == ["stop mfsmaster"] and node.state["mfsmaster"] == "dead"
    assert run(node, parse(list(commands.service_enabled("mfsmaster").argv[1:]))) == (1, "masked")
    refused = answer(node, ["start", "moosefs-master.service"])
    assert refused["code"] == 1 and refused["stderr"] == (
        "Failed to start moosefs-master.service: Unit moosefs-master.service is masked.\n"
    )
    assert answer(node, ["restart", "moosefs-master"])["code"] == 1 and node.calls == ["stop mfsmaster"]
    assert run(node, parse(["unmask", "moosefs-master"])) == (0, "")
    assert run(node, parse(["is-enabled", "moosefs-master"])) == (0, "enabled")
    assert run(node, parse(["start", "moosefs-master"])) == (0, "") and node.state["mfsmaster"] == "running"
    assert run(node, parse(["is-enabled", "nosuch"]))[0] == 1


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["stop", "--now", "slurmd"],
        ["enable", "slurmd"],
        ["kill", "--signal=SIGUSR1", "slurmd"],
        ["start", "a", "b"],
        ["--now", "start", "x"],
        ["show", "slurmd"],
    ],
)
def test_what_the_shim_does_not_do_is_refused(argv: list[str]) -> None:
    with pytest.raises(Usage):
        parse(argv)


def test_the_shim_a_node_runs_talks_to_the_supervisor_and_exits_as_systemctl_does(tmp_path: Path) -> None:
    # The node's real script, run as a login on the node would, against a supervisor on a real Unix socket.
    node = Node()
    sock = tmp_path / "supervisor.sock"
    server = Supervisor(sock, {"gpu1": node}.__getitem__)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        shim = install_shim(tmp_path / "gpu1", sock, "gpu1") / "systemctl"

        def systemctl(*argv: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([str(shim), *argv], capture_output=True, text=True, timeout=20, check=False)

        active = systemctl("is-active", "slurmd.service")
        assert (active.returncode, active.stdout) == (0, "active\n")
        assert systemctl("kill", "--signal=SIGSTOP", "slurmd").returncode == 0 and node.calls == ["freeze slurmd"]
        missing = systemctl("restart", "nosuch")
        assert missing.returncode == 5 and "Unit nosuch.service not found" in missing.stderr and not missing.stdout
        bad = systemctl("enable", "slurmd")
        assert bad.returncode == 1 and "supported on a lab node" in bad.stderr

        mfsmaster = shim.parent / "mfsmaster"  # the same script under another name: the metalogger's promotion
        promoted = subprocess.run([str(mfsmaster), "-a"], capture_output=True, text=True, timeout=20, check=False)
        assert promoted.returncode == 0 and node.calls[-1] == "mfsmaster -a", promoted.stderr
        plain = subprocess.run([str(mfsmaster), "start"], capture_output=True, text=True, timeout=20, check=False)
        assert plain.returncode == 1 and "mfsmaster -a" in plain.stderr and node.calls[-1] == "mfsmaster -a"
    finally:
        server.shutdown()
        server.server_close()
    down = subprocess.run([str(shim), "is-active", "slurmd"], capture_output=True, text=True, timeout=20, check=False)
    assert down.returncode == 1 and "supervisor at" in down.stderr and "does not answer" in down.stderr


def test_a_failing_service_action_is_told_as_a_failed_job() -> None:
    node = Node()

    def start(service: str) -> int:
        raise RuntimeError("no such binary")

    node.start = start  # type: ignore[method-assign]
    reply = answer(node, ["start", "slurmd"])
    assert reply == {"code": 1, "stdout": "", "stderr": "Job for slurmd.service failed: no such binary\n"}
