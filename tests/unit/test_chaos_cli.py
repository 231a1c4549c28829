"""`ha-ops chaos run --inventory` on bad input: each a one-line error naming it, exit 2 (4 for an unreachable host),
and nothing journaled. The hosts are this machine's loopback: a tiny SSH server, or a port nobody listens on."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.cli_helpers import run_main
from tests.unit.test_transport_ssh import Keys, MiniSSHServer, keys, known_hosts_entry, no_thread_left  # noqa: F401

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "examples" / "lab.yaml"
HELD = REPO / "chaos" / "experiments" / "link-down-held.yaml"
NODE_LOSS = REPO / "chaos" / "experiments" / "node-loss.yaml"


@pytest.fixture(autouse=True)
def own_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # the fault journal of these runs
    monkeypatch.delenv("HA_OPS_LAB", raising=False)
    before = list(logging.root.handlers)
    yield
    for handler in logging.root.handlers[:]:  # the CLI's stderr handler writes to this test's captured stream
        if handler not in before:
            logging.root.removeHandler(handler)


def inventory(tmp_path: Path, text: str, name: str = "hosts.ini") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def chaos(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """The exit code and what went to stderr (a dry run's plan goes to stdout)."""
    code = run_main(monkeypatch, "chaos", "run", *args)
    return code, capsys.readouterr().err.strip()


def journal_is_empty(tmp_path: Path) -> bool:
    return not list((tmp_path / "state").rglob("chaos-faults.json")) or all(
        p.read_text().strip() in ("", "[]") for p in (tmp_path / "state").rglob("chaos-faults.json")
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[gpu_nodes\ngpu2 ansible_host=", "does not parse as an Ansible inventory"),
        ("[gpu_nodes]\ngpu2\n", "gpu2: no address (set ansible_host)"),
    ],
)
def test_a_bad_inventory_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    code, said = chaos(
        monkeypatch, capsys, str(HELD), "--inventory", str(inventory(tmp_path, text)), "--spec", str(SPEC)
    )
    assert code == 2 and message in said and len(said.splitlines()) == 1, said
    assert journal_is_empty(tmp_path)


BMC_WITHOUT_CREDENTIAL = (
    "all:\n  hosts:\n    gpu2:\n      ansible_host: 127.0.0.1\n      ha_ops_bmc: {kind: redfish, address: "
    "'https://127.0.0.1:1', user: admin, password_env: HAO_NO_SUCH_BMC_PASSWORD}\n"
)


@pytest.mark.parametrize(
    ("hosts", "name", "experiment", "message"),
    [
        # A target outside the inventory.
        ("[gpu_nodes]\ngpu1 ansible_host=127.0.0.1\n", "hosts.ini", HELD,
         "refusing target 'gpu2': not a host of cluster 'lab' (it has gpu1)"),
        # A BMC whose credential is not there.
        (BMC_WITHOUT_CREDENTIAL, "hosts.yml", NODE_LOSS,
         "gpu2.ha_ops_bmc: password_env: environment variable HAO_NO_SUCH_BMC_PASSWORD is not set"),
        # A capability the host lacks: power without a BMC.
        ("[gpu_nodes]\ngpu2 ansible_host=127.0.0.1\n", "hosts.ini", NODE_LOSS,
         "gpu2 lacks power for 'power off gpu2' (no ha_ops_bmc in the inventory)"),
    ],
)  # fmt: skip
def test_a_fault_that_may_not_go_in_is_named_before_anything_is_journaled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    hosts: str, name: str, experiment: Path, message: str,
) -> None:  # fmt: skip
    monkeypatch.delenv("HAO_NO_SUCH_BMC_PASSWORD", raising=False)
    inv = inventory(tmp_path, hosts, name)
    code, said = chaos(monkeypatch, capsys, str(experiment), "--inventory", str(inv), "--spec", str(SPEC), "--dry-run")
    assert code == 2 and message in said and len(said.splitlines()) == 1, said
    assert journal_is_empty(tmp_path)


def test_an_unknown_host_key_is_bad_input_and_an_unreachable_host_exits_4(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    keys: Keys,  # noqa: F811
) -> None:
    server = MiniSSHServer(keys.host, keys.client)
    try:
        empty = tmp_path / "known_hosts"
        empty.write_text("")
        inv = inventory(tmp_path, f"[gpu_nodes]\ngpu2 ansible_host=127.0.0.1 ansible_port={server.port} "
                        f"ansible_ssh_private_key_file={keys.client_file} ha_ops_known_hosts={empty}\n")  # fmt: skip
        code, said = chaos(monkeypatch, capsys, str(HELD), "--inventory", str(inv), "--spec", str(SPEC))
        assert code == 2 and "gpu2: 127.0.0.1 is not in known_hosts" in said, said
        assert not [e for e in server.log if e.startswith("exec")]  # refused before anything ran
    finally:
        server.close()
    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]  # nothing listens there once closed
    inv = inventory(tmp_path, f"[gpu_nodes]\ngpu2 ansible_host=127.0.0.1 ansible_port={port} "
                    f"ha_ops_known_hosts={tmp_path / 'known_hosts'}\n")  # fmt: skip
    code, said = chaos(monkeypatch, capsys, str(HELD), "--inventory", str(inv), "--spec", str(SPEC))
    assert code == 4 and f"gpu2: cannot reach 127.0.0.1:{port}" in said, said
    assert journal_is_empty(tmp_path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("title: t\ndescription: d\nconfiguration: 5\nmethod: [{type: action, name: a}]\n",
         "configuration: must be a mapping, not int"),
        ("title: t\ndescription: d\nmethod: null\n", "method: must be a list of activities, not NoneType"),
        ("title: t\ndescription: d\nmethod: []\n", "method: an experiment needs at least one activity"),
        ("title: t\ndescription: d\nmethod: [5]\n", "method[0]: an activity is a mapping"),
        ("title: t\ndescription: d\nmethod: [{type: action, name: a, provider: x}]\n",
         "method[0].provider: must be a mapping"),
        ("title: t\ndescription: d\nsteady-state-hypothesis: {title: h, probes: 3}\nmethod: [{type: action}]\n",
         "steady-state-hypothesis.probes: must be a list of probes"),
    ],
)  # fmt: skip
def test_a_malformed_experiment_exits_2_naming_its_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    experiment = tmp_path / "bad.yaml"
    experiment.write_text(text)
    code, said = chaos(monkeypatch, capsys, str(experiment), "--dry-run")
    assert code == 2 and message in said and "Traceback" not in said, said
    assert journal_is_empty(tmp_path)
