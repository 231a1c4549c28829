"""Transport to a real node over SSH (paramiko). Host keys are always verified against known_hosts: an
unknown or changed key is an error, never accepted silently."""

from __future__ import annotations

import contextlib
import shlex
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import paramiko

from ha_ops.errors import CommandFailed, CommandTimeout, HostKeyError, TransportError
from ha_ops.util.proc import CommandResult


class SSHTransport:
    def __init__(
        self,
        name: str,
        host: str,
        *,
        user: str = "root",
        port: int = 22,
        key_file: Path | None = None,
        known_hosts: Path | None = None,
        connect_timeout: float = 10.0,
        sock_factory: Callable[[], socket.socket] | None = None,
        become: bool = False,
    ) -> None:
        self.name = name
        self.host = host
        self.user = user
        self.port = port
        self.key_file = key_file
        self.known_hosts = known_hosts
        self.connect_timeout = connect_timeout
        self._sock_factory = sock_factory
        self.become = become  # commands through `sudo -n`: a login that is not root, with sudo rights
        self._client: paramiko.SSHClient | None = None
        self._lock = threading.Lock()  # a game day's watcher and its experiment share one connection per node

    def _connect(self) -> paramiko.SSHClient:
        with self._lock:
            return self._connect_locked()

    def _connect_locked(self) -> paramiko.SSHClient:
        if self._client is not None and self._client.get_transport() and self._client.get_transport().is_active():
            return self._client
        client = paramiko.SSHClient()
        if self.known_hosts is not None:
            path = self.known_hosts.expanduser()
            try:
                client.load_host_keys(str(path))
            except OSError as exc:
                raise HostKeyError(f"{self.name}: cannot read known_hosts {path}: {exc.strerror}") from None
        else:
            client.load_system_host_keys()
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        try:
            client.connect(
                self.host,
                port=self.port,
                username=self.user,
                key_filename=str(self.key_file) if self.key_file else None,
                timeout=self.connect_timeout,
                banner_timeout=self.connect_timeout,
                auth_timeout=self.connect_timeout,
                sock=self._sock_factory() if self._sock_factory else None,
                allow_agent=False,
                look_for_keys=self.key_file is None,
            )
        except paramiko.BadHostKeyException:
            client.close()
            raise HostKeyError(
                f"{self.name}: the host key of {self.host} differs from the one in known_hosts (refused: a changed "
                "key may be a different machine)"
            ) from None
        except paramiko.SSHException as exc:
            client.close()
            if "not found in known_hosts" in str(exc):
                raise HostKeyError(
                    f"{self.name}: {self.host} is not in known_hosts {self.known_hosts or '(the system ones)'} "
                    "(refused: add its verified key first, e.g. from the node's console or your provisioning)"
                ) from None
            raise TransportError(f"{self.name}: ssh to {self.user}@{self.host}:{self.port} failed: {exc}") from exc
        except OSError as exc:
            client.close()
            raise TransportError(f"{self.name}: cannot reach {self.host}:{self.port}: {exc}") from exc
        self._client = client
        return client

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float = 30.0,
        check: bool = True,
        input: str | None = None,
        env: Mapping[str, str] | None = None,
        privileged: bool = True,
    ) -> CommandResult:
        """`privileged=False`: as the login user even where commands go through sudo (sudo resets the session's
        environment, SSH_CONNECTION among it)."""
        args = [str(a) for a in argv]
        command = " ".join(shlex.quote(a) for a in args)
        if env:
            # sshd drops most client environment by default: set it in the remote shell instead.
            command = "env " + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()) + " " + command
        if self.become and privileged:
            command = "sudo -n -- " + command
        client = self._connect()
        try:
            stdin, stdout, stderr = client.exec_command(command, timeout=timeout)
            if input is not None:
                stdin.write(input)
            stdin.channel.shutdown_write()
            # Read stderr beside stdout: a command that fills the stderr window would otherwise stall.
            err_box: list[bytes] = []

            def read_stderr() -> None:
                # (a timeout or a closed session: stdout's read below says which, and raises it)
                with contextlib.suppress(OSError, paramiko.SSHException):
                    err_box.append(stderr.read())

            reader = threading.Thread(target=read_stderr, daemon=True)
            reader.start()
            out = stdout.read().decode(errors="replace")
            reader.join(timeout)
            err = b"".join(err_box).decode(errors="replace")
            code = stdout.channel.recv_exit_status()
        except TimeoutError as exc:
            raise CommandTimeout(args, timeout, self.name) from exc
        except paramiko.SSHException as exc:
            raise TransportError(f"{self.name}: {exc}") from exc
        result = CommandResult(args, code, out, err)
        if check and code != 0:
            raise CommandFailed(args, code, out, err, self.name)
        return result

    def open_channel(self, host: str, port: int, timeout: float = 10.0) -> paramiko.Channel:
        """A TCP connection from the node to host:port (host as the node sees it: itself, or a peer on its side of
        the network), carried over this SSH session, as `ssh -L` does."""
        transport = self._connect().get_transport()
        assert transport is not None
        try:
            return transport.open_channel("direct-tcpip", (host, port), ("127.0.0.1", 0), timeout=timeout)
        except (paramiko.SSHException, OSError) as exc:
            raise TransportError(f"{self.name}: cannot open {host}:{port} through ssh: {exc}") from None

    def read_file(self, path: str, timeout: float = 10.0) -> str:
        return self.run(["cat", path], timeout=timeout).stdout

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
