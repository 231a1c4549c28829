"""SSHTransport against a tiny in-process paramiko server on 127.0.0.1: host keys are verified, never accepted.

The server accepts publickey auth for one generated client key and answers `exec` requests for `echo hi` and
`cat`; anything else exits 127. Every socket and thread it opens is closed before the test ends.
"""

from __future__ import annotations

import queue
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import paramiko
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ha_ops.errors import CommandFailed, HostKeyError, TransportError
from ha_ops.transport.ssh import SSHTransport

pytestmark = pytest.mark.timeout(60)

STEP_TIMEOUT = 5.0  # every wait on either side is bounded by this


def new_key(path: Path) -> paramiko.Ed25519Key:
    """A fresh ed25519 key, written to `path` in OpenSSH format (as ssh-keygen would) and loaded by paramiko."""
    pem = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    )
    path.write_bytes(pem)
    path.chmod(0o600)
    return paramiko.Ed25519Key.from_private_key_file(str(path))


class _Handler(paramiko.ServerInterface):
    def __init__(self, client_key: paramiko.PKey, log: list[str], requests: queue.Queue) -> None:
        self.client_key = client_key
        self.log = log
        self.requests = requests

    def check_channel_request(self, kind: str, chanid: int) -> int:
        if kind == "session":
            return paramiko.OPEN_SUCCEEDED
        return paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def get_allowed_auths(self, username: str) -> str:
        return "publickey"

    def check_auth_none(self, username: str) -> int:
        self.log.append(f"auth none {username}")
        return paramiko.AUTH_FAILED

    def check_auth_password(self, username: str, password: str) -> int:
        self.log.append(f"auth password {username}")
        return paramiko.AUTH_FAILED

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        self.log.append(f"auth publickey {username}")
        if username == "root" and key.get_base64() == self.client_key.get_base64():
            return paramiko.AUTH_SUCCESSFUL
        return paramiko.AUTH_FAILED

    def check_channel_exec_request(self, channel: paramiko.Channel, command: bytes) -> bool:
        self.log.append(f"exec {command.decode()}")
        self.requests.put((channel, command))
        return True


class MiniSSHServer:
    """One connection at a time, on a random port of 127.0.0.1, served from one thread."""

    handler: type[_Handler] = _Handler

    def __init__(self, host_key: paramiko.PKey, client_key: paramiko.PKey) -> None:
        self.host_key = host_key
        self.client_key = client_key
        self.log: list[str] = []
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self.port = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, name="mini-sshd", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    conn, _ = self._listener.accept()
                except TimeoutError:
                    continue
                self._serve_connection(conn)
        except BaseException as exc:  # reported by close(), so a server bug fails the test
            self.errors.append(exc)
        finally:
            self._listener.close()

    def _serve_connection(self, conn: socket.socket) -> None:
        conn.settimeout(None)
        transport = paramiko.Transport(conn)
        try:
            transport.add_server_key(self.host_key)
            requests: queue.Queue = queue.Queue()
            try:
                transport.start_server(server=self.handler(self.client_key, self.log, requests))
            except (paramiko.SSHException, EOFError, OSError):
                self.log.append("negotiation failed")  # the client hung up, e.g. after refusing our host key
                return
            while transport.is_active() and not self._stop.is_set():
                try:
                    request = requests.get(timeout=0.05)
                except queue.Empty:
                    continue
                self.serve_request(transport, request)
        finally:
            transport.close()
            conn.close()

    def serve_request(self, transport: paramiko.Transport, request: tuple) -> None:
        """One request the handler queued: here an exec (channel, command)."""
        self._answer(*request)

    @staticmethod
    def _answer(channel: paramiko.Channel, command: bytes) -> None:
        # Read stdin to its EOF first: the client sends EOF only after it has the exec reply, so the answer can
        # never overtake the reply.
        channel.settimeout(STEP_TIMEOUT)
        stdin = b""
        while chunk := channel.recv(4096):
            stdin += chunk
        if command == b"echo hi":
            channel.sendall(b"hi\n")
            code = 0
        elif command == b"cat":
            channel.sendall(stdin)
            code = 0
        else:
            channel.sendall_stderr(b"sh: 1: " + command + b": not found\n")
            code = 127
        channel.send_exit_status(code)
        channel.shutdown_write()
        channel.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(STEP_TIMEOUT * 2)
        assert not self._thread.is_alive(), "the test SSH server did not stop"
        if self.errors:
            raise self.errors[0]


@dataclass
class Keys:
    host: paramiko.Ed25519Key
    client: paramiko.Ed25519Key
    client_file: Path


@pytest.fixture
def keys(tmp_path: Path) -> Keys:
    host = new_key(tmp_path / "ssh_host_ed25519_key")
    client_file = tmp_path / "id_ed25519"
    return Keys(host, new_key(client_file), client_file)


@pytest.fixture
def server(keys: Keys) -> Iterator[MiniSSHServer]:
    srv = MiniSSHServer(keys.host, keys.client)
    try:
        yield srv
    finally:
        srv.close()


@pytest.fixture(autouse=True)
def no_thread_left() -> Iterator[None]:
    """Every test ends with the server's and paramiko's threads gone (the fixtures close them)."""
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + STEP_TIMEOUT
    while (left := [t for t in threading.enumerate() if t not in before and t.is_alive()]) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.01)
    assert not left, f"threads left running: {[t.name for t in left]}"


def known_hosts_entry(port: int, key: paramiko.PKey) -> str:
    return f"[127.0.0.1]:{port} {key.get_name()} {key.get_base64()}\n"


@pytest.fixture
def transports() -> Iterator[list[SSHTransport]]:
    made: list[SSHTransport] = []
    yield made
    for t in made:
        t.close()


def connect(
    transports: list[SSHTransport], server: MiniSSHServer, keys: Keys, known_hosts: Path, name: str = "node-a"
) -> SSHTransport:
    t = SSHTransport(
        name,
        "127.0.0.1",
        port=server.port,
        key_file=keys.client_file,
        known_hosts=known_hosts,
        connect_timeout=STEP_TIMEOUT,
    )
    transports.append(t)
    return t


def test_unknown_host_key_is_refused(
    tmp_path: Path, keys: Keys, server: MiniSSHServer, transports: list[SSHTransport]
) -> None:
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("")
    t = connect(transports, server, keys, known_hosts, name="gpu7")
    with pytest.raises(HostKeyError) as info:
        t.run(["echo", "hi"], timeout=STEP_TIMEOUT)
    message = str(info.value)
    assert "gpu7" in message
    assert "127.0.0.1" in message
    assert "not in known_hosts" in message
    assert info.value.exit_code == 2
    # Refused before logging in: the client key was never offered and nothing ran.
    assert not [e for e in server.log if e.startswith(("auth", "exec"))], server.log
    # Never accepted on first use: known_hosts is left as it was and a second try is refused again.
    assert known_hosts.read_text() == ""
    with pytest.raises(TransportError):
        t.run(["echo", "hi"], timeout=STEP_TIMEOUT)


def test_changed_host_key_is_refused(
    tmp_path: Path, keys: Keys, server: MiniSSHServer, transports: list[SSHTransport]
) -> None:
    other = new_key(tmp_path / "other_host_key")
    assert other.get_base64() != keys.host.get_base64()
    known_hosts = tmp_path / "known_hosts"
    entry = known_hosts_entry(server.port, other)
    known_hosts.write_text(entry)
    t = connect(transports, server, keys, known_hosts, name="gpu8")
    with pytest.raises(HostKeyError) as info:
        t.run(["echo", "hi"], timeout=STEP_TIMEOUT)
    message = str(info.value)
    assert "gpu8" in message
    assert "127.0.0.1" in message
    assert "differs" in message
    assert info.value.exit_code == 2  # bad input (a wrong known_hosts), not an unreachable host (4)
    assert not [e for e in server.log if e.startswith(("auth", "exec"))], server.log
    assert known_hosts.read_text() == entry


def test_key_of_another_port_does_not_vouch(
    tmp_path: Path, keys: Keys, server: MiniSSHServer, transports: list[SSHTransport]
) -> None:
    """The right key, recorded for another port of the same address, is not this server's key."""
    known_hosts = tmp_path / "known_hosts"
    other_port = server.port + 1 if server.port < 65535 else server.port - 1
    known_hosts.write_text(known_hosts_entry(other_port, keys.host))
    t = connect(transports, server, keys, known_hosts)
    with pytest.raises(TransportError):
        t.run(["echo", "hi"], timeout=STEP_TIMEOUT)
    assert not [e for e in server.log if e.startswith("exec")], server.log


def test_known_host_key_runs_commands(
    tmp_path: Path, keys: Keys, server: MiniSSHServer, transports: list[SSHTransport]
) -> None:
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(known_hosts_entry(server.port, keys.host))
    t = connect(transports, server, keys, known_hosts)
    started = time.monotonic()
    result = t.run(["echo", "hi"], timeout=STEP_TIMEOUT)
    assert result.stdout == "hi\n"
    assert result.stderr == ""
    assert result.returncode == 0
    assert result.ok
    assert result.argv == ["echo", "hi"]
    assert "auth publickey root" in server.log
    assert "exec echo hi" in server.log

    # The same connection serves further commands: input reaches the remote stdin, failures carry the code.
    assert t.run(["cat"], input="from stdin\n", timeout=STEP_TIMEOUT).stdout == "from stdin\n"
    with pytest.raises(CommandFailed) as info:
        t.run(["no-such-command", "--flag"], timeout=STEP_TIMEOUT)
    assert info.value.returncode == 127
    assert "not found" in info.value.stderr
    assert "node-a" in str(info.value)
    unchecked = t.run(["no-such-command"], check=False, timeout=STEP_TIMEOUT)
    assert unchecked.returncode == 127
    assert not unchecked.ok
    assert time.monotonic() - started < 4 * STEP_TIMEOUT
    t.close()
    assert t._client is None


def test_wrong_client_key_is_an_error(
    tmp_path: Path, keys: Keys, server: MiniSSHServer, transports: list[SSHTransport]
) -> None:
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(known_hosts_entry(server.port, keys.host))
    stranger = tmp_path / "stranger_key"
    new_key(stranger)
    t = SSHTransport(
        "node-b", "127.0.0.1", port=server.port, key_file=stranger, known_hosts=known_hosts, connect_timeout=5
    )
    transports.append(t)
    with pytest.raises(TransportError) as info:
        t.run(["echo", "hi"], timeout=STEP_TIMEOUT)
    assert "node-b" in str(info.value)
    assert not [e for e in server.log if e.startswith("exec")], server.log


def test_unreachable_port_is_an_error(tmp_path: Path, keys: Keys, transports: list[SSHTransport]) -> None:
    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]
    # Nothing listens there now.
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("")
    t = SSHTransport("node-c", "127.0.0.1", port=port, key_file=keys.client_file, known_hosts=known_hosts)
    transports.append(t)
    with pytest.raises(TransportError) as info:
        t.run(["true"], timeout=STEP_TIMEOUT)
    assert f"127.0.0.1:{port}" in str(info.value)
