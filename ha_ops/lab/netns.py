"""Network namespaces and links through iproute2, and sockets opened inside a namespace."""

from __future__ import annotations

import ctypes
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path

from ha_ops.errors import TransportError
from ha_ops.util.proc import CommandResult, run

NETNS_DIR = Path("/run/netns")
CLONE_NEWNET = 0x40000000


def ip(*args: str, netns: str | None = None, check: bool = True, timeout: float = 10.0) -> CommandResult:
    argv = ["ip"] + (["-n", netns] if netns else []) + list(args)
    return run(argv, check=check, timeout=timeout)


def exists(name: str) -> bool:
    return (NETNS_DIR / name).exists()


def list_with_prefix(prefix: str) -> list[str]:
    if not NETNS_DIR.is_dir():
        return []
    return sorted(p.name for p in NETNS_DIR.iterdir() if p.name.startswith(prefix))


def create(name: str) -> None:
    if not exists(name):
        ip("netns", "add", name)
    ip("link", "set", "lo", "up", netns=name)


def delete(name: str) -> None:
    if exists(name):
        ip("netns", "delete", name, check=False)


def pids_in(name: str) -> list[int]:
    """PIDs of processes whose network namespace is `name` (what `ip netns pids` reports)."""
    result = ip("netns", "pids", name, check=False)
    return [int(p) for p in result.stdout.split() if p.isdigit()]


def sysctl(netns: str, key: str, value: str) -> None:
    run(["nsenter", f"--net={NETNS_DIR / netns}", "sysctl", "-q", "-w", f"{key}={value}"], timeout=5)


_libc = ctypes.CDLL("libc.so.6", use_errno=True)


def _socket_in(netns: str, make: Callable[[], socket.socket], timeout: float) -> socket.socket:
    """A socket made inside `netns`: a socket keeps the namespace it was created in, wherever it is used.

    setns() changes only the calling thread, so the switch happens in a short-lived thread of its own.
    """
    box: dict[str, object] = {}

    def work() -> None:
        fd = os.open(NETNS_DIR / netns, os.O_RDONLY)
        try:
            if _libc.setns(fd, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), f"setns({netns})")
            box["sock"] = make()
        except Exception as exc:
            box["error"] = exc
        finally:
            os.close(fd)

    thread = threading.Thread(target=work, name=f"netns-{netns}")
    thread.start()
    thread.join(timeout + 1)
    if "sock" in box:
        return box["sock"]  # type: ignore[return-value]
    raise TransportError(str(box.get("error", "timed out")))


def connect_in(netns: str, address: tuple[str, int], timeout: float = 5.0) -> socket.socket:
    """A TCP socket connected from inside `netns`."""
    try:
        return _socket_in(netns, lambda: socket.create_connection(address, timeout=timeout), timeout)
    except TransportError as exc:
        raise TransportError(f"cannot connect to {address[0]}:{address[1]} from namespace {netns}: {exc}") from None


def listen_in(netns: str, address: tuple[str, int]) -> socket.socket:
    """A listening TCP socket inside `netns` (its connections are accepted by a process in another namespace)."""

    def make() -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
        return sock

    try:
        return _socket_in(netns, make, 5.0)
    except TransportError as exc:
        raise TransportError(f"cannot listen on {address[0]}:{address[1]} in namespace {netns}: {exc}") from None
