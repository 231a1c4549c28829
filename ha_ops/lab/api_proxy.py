"""The `kubernetes` Service's address on the lab's kubelet nodes: what kube-proxy (or a load balancer in front of
the control plane) gives a real cluster's nodes and pods.

The lab's API server listens on loopback in the root namespace, which no node namespace can reach. This process
runs in the root namespace, opens a listening socket inside each kubelet node's namespace on the Service's virtual
IP (10.96.0.1:443, added to the node's loopback), and relays each connection to the API server byte for byte. TLS
is end to end: the API server's certificate names the Service IP, so kubelets and in-cluster clients verify it as
on any cluster.

    python -m ha_ops.lab.api_proxy --target 127.0.0.1:16443 --listen NETNS=10.96.0.1:443 [--listen ...]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket

from ha_ops.lab.netns import listen_in

CHUNK = 64 * 1024


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            writer.close()


def _handler(target: tuple[str, int]):
    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*target)
        except OSError:
            writer.close()  # the API server is down: the client sees a refused connection, as it would
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    return relay


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


async def serve(target: tuple[str, int], listeners: list[socket.socket]) -> None:
    servers = [await asyncio.start_server(_handler(target), sock=sock) for sock in listeners]
    await asyncio.gather(*(server.serve_forever() for server in servers))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", required=True, type=_address, help="the API server, HOST:PORT")
    parser.add_argument("--listen", action="append", required=True, help="NETNS=HOST:PORT, once per node")
    args = parser.parse_args()
    listeners = []
    for spec in args.listen:
        netns, _, address = spec.partition("=")
        listeners.append(listen_in(netns, _address(address)))
    asyncio.run(serve(args.target, listeners))


if __name__ == "__main__":
    main()
