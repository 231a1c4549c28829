"""The systemctl a lab node offers over SSH: the commands ha-ops' SSH path sends, on the lab's services."""

from __future__ import annotations

import pytest

from ha_ops.cluster import commands
from ha_ops.cluster.ops import ServiceOp
from ha_ops.lab.systemctl import Call, Usage, parse, run


class Node:
    def __init__(self) -> None:
        self.state = {"slurmd": "running", "agent": "running"}
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


@pytest.mark.parametrize("action", ["start", "stop", "restart", "kill", "freeze", "thaw"])
def test_every_command_the_ssh_path_sends_means_the_same_on_a_lab_node(action: str) -> None:
    (command,) = commands.service(ServiceOp(host="gpu1", unit="slurmd", action=action))  # type: ignore[arg-type]
    call = parse(list(command.argv[1:]))
    assert call == Call(action, "slurmd")
    node = Node()
    assert run(node, call) == (0, "")
    assert node.calls == [f"{action} slurmd"]


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


@pytest.mark.parametrize(
    "argv",
    [
        [],
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
