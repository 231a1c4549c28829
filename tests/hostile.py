"""A hostile GPU node (or several) against the controllers' API (issue 44), as a process of its own: it holds
`half_open` TCP connections that never start TLS, `slow_handshakes` connections trickling a real ClientHello one byte
every TRICKLE_S, and `slow_bodies` connections with agent certificates trickling a report one byte at a time; each is
opened again when the server drops it (a half-open one is seen dropped by a read that finds its end). Connections go
out from the `--source` addresses in turn (many: a flood from many nodes, each under the server's per-address cap),
and slow bodies present the `--cert`/`--key` pairs in turn (several: under the per-certificate cap). It prints,
every round, a JSON line of how many of each it holds and has opened in all. Used by tests/bench/api_abuse.py (on
127.0.0.1) and by the lab test of a hostile node (tests/integration/test_remediation.py, run inside the node's
network namespace).

    python -m tests.hostile --host H --port P --ca CA --cert CRT --key KEY [--cert CRT --key KEY ...]
                            [--source ADDRESS ...] [--half-open N] [--slow-handshakes N] [--slow-bodies N] [--seconds S]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import resource
import socket
import ssl
import sys
import time
from pathlib import Path

TRICKLE_S = 5.0
KINDS = ("half-open", "slow handshake", "slow body")


def client_hello(context: ssl.SSLContext, host: str) -> bytes:
    """The first flight of a real TLS client (a ClientHello), to trickle."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=host)
    with contextlib.suppress(ssl.SSLWantReadError):  # (it waits for the server's answer: the hello is out)
        tls.do_handshake()
    return outgoing.read()


def attack(host: str, port: int, contexts: list[ssl.SSLContext], wanted: dict[str, int], seconds: float,
           sources: list[str] | None = None) -> None:  # fmt: skip
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # (thousands of sockets)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    hello = client_hello(contexts[0], host)
    body_head = (b"POST /v1/reports HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 100000\r\n\r\n")  # fmt: skip
    held: dict[str, list[list]] = {kind: [] for kind in KINDS}  # [socket, bytes sent]
    opened = dict.fromkeys(KINDS, 0)
    next_source = itertools.cycle(sources or [None])  # (each in turn)
    next_context = itertools.cycle(contexts)

    def connect(kind: str) -> list | None:
        try:
            source = next(next_source)
            sock = socket.create_connection((host, port), timeout=1.0, source_address=(source, 0) if source else None)
            if kind == "slow body":
                sock = next(next_context).wrap_socket(sock, server_hostname=host)
                sock.sendall(body_head)
            opened[kind] += 1
            return [sock, 0]
        except (OSError, ssl.SSLError):
            return None

    def still_open(sock: socket.socket) -> bool:
        """A half-open connection the server closed reads its end (b""); one it holds has nothing to read."""
        try:
            return sock.recv(1, socket.MSG_DONTWAIT | socket.MSG_PEEK) != b""
        except BlockingIOError:
            return True
        except OSError:
            return False

    end = time.time() + seconds
    while time.time() < end:
        for entry in held["half-open"]:
            if not still_open(entry[0]):
                entry[0].close()
                entry[0] = None  # dropped: opened again below
        for kind, entries in held.items():
            entries[:] = [e for e in entries if e[0] is not None]
            while len(entries) < wanted.get(kind, 0) and time.time() < end:
                entry = connect(kind)
                if entry is None:
                    break
                entries.append(entry)
        for kind in ("slow handshake", "slow body"):
            for entry in held[kind]:
                sock, sent = entry
                try:
                    sock.send(hello[sent % len(hello) : sent % len(hello) + 1] if kind == "slow handshake" else b"{")
                    entry[1] += 1
                except (OSError, ssl.SSLError):
                    sock.close()
                    entry[0] = None  # dropped: opened again next round
        print(json.dumps({k: len([e for e in v if e[0] is not None]) for k, v in held.items()} | {"opened": opened}),
              flush=True)  # fmt: skip
        time.sleep(TRICKLE_S)
    for entries in held.values():
        for entry in entries:
            if entry[0] is not None:
                entry[0].close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--source", action="append", default=[], help="an address to connect from (repeat: in turn)")
    parser.add_argument("--ca", type=Path, required=True)
    parser.add_argument("--cert", type=Path, action="append", required=True, help="repeat with --key: in turn")
    parser.add_argument("--key", type=Path, action="append", required=True)
    parser.add_argument("--half-open", type=int, default=5000)
    parser.add_argument("--slow-handshakes", type=int, default=500)
    parser.add_argument("--slow-bodies", type=int, default=256)
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args(argv)
    if len(args.cert) != len(args.key):
        parser.error("--cert and --key: give them in pairs")
    contexts = []
    for cert, key in zip(args.cert, args.key, strict=True):
        context = ssl.create_default_context(cafile=str(args.ca))
        context.load_cert_chain(str(cert), str(key))
        contexts.append(context)
    wanted = {"half-open": args.half_open, "slow handshake": args.slow_handshakes, "slow body": args.slow_bodies}
    attack(args.host, args.port, contexts, wanted, args.seconds, args.source)


if __name__ == "__main__":
    sys.exit(main())
