"""TLS over a byte stream that is not a socket: a paramiko Channel that an SSH server opened to a service on its
side (the operator's mutual TLS to the controllers' API, carried through the cluster's SSH as `ssh -L` would carry
it). The standard library's ssl engine does the TLS through memory BIOs; this only moves their bytes to and from
the stream, so certificates, verification and the host name check are exactly those of a socket's TLS."""

from __future__ import annotations

import io
import ssl
from typing import Any

CHUNK = 65536


class TlsStream:
    """The client side of a TLS session over `raw` (an object with sendall, recv, settimeout and close), with the
    socket methods http.client uses: sendall, recv, makefile('rb'), settimeout, close."""

    def __init__(self, raw: Any, context: ssl.SSLContext, server_hostname: str) -> None:
        self._raw = raw
        self._incoming, self._outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_hostname=server_hostname)
        self._pump(self._tls.do_handshake)

    def _flush(self) -> None:
        data = self._outgoing.read()
        if data:
            self._raw.sendall(data)

    def _pump(self, operation: Any, *args: Any) -> Any:
        """Run one TLS operation, sending what it wrote and feeding it what the stream brings until it completes."""
        while True:
            try:
                result = operation(*args)
            except ssl.SSLWantReadError:
                self._flush()
                data = self._raw.recv(CHUNK)
                if data:
                    self._incoming.write(data)
                else:
                    self._incoming.write_eof()
                continue
            self._flush()
            return result

    def sendall(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[self._pump(self._tls.write, view) :]

    def recv(self, size: int) -> bytes:
        try:
            return self._pump(self._tls.read, size)
        except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
            # The peer's close, with or without its close_notify (a socket's TLS suppresses that "ragged" EOF too;
            # http.client still checks the body against its Content-Length).
            return b""

    def getpeercert(self) -> dict[str, Any] | None:
        return self._tls.getpeercert()

    def makefile(self, mode: str = "rb", *args: Any, **kwargs: Any) -> io.BufferedReader:
        if mode not in ("r", "rb"):
            raise ValueError(f"TlsStream.makefile: only reading is supported, not {mode!r}")
        return io.BufferedReader(_Reader(self))

    def settimeout(self, timeout: float | None) -> None:
        self._raw.settimeout(timeout)

    def close(self) -> None:
        self._raw.close()


class _Reader(io.RawIOBase):
    def __init__(self, stream: TlsStream) -> None:
        self._stream = stream

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._stream.recv(len(buffer))
        buffer[: len(data)] = data
        return len(data)
