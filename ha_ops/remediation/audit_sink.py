"""The audit log shipped, entry by entry, to a central append-only sink: syslog over TLS (RFC 5425: octet-counted
RFC 5424 messages), which rsyslog, syslog-ng and most SIEM collectors receive. A copy there outlives a local log
that is deleted, cut or rewritten, and `ha-ops audit verify --shipped` checks one against the other.

The leader ships what it appends; at the start of its term it first ships what the log holds past the last entry
this controller shipped (its marker, on its own disk): entries its predecessor appended but had not shipped when it
died. So an entry may reach the sink twice, never not at all while the log holds it; `compare` takes each seq once
when both copies agree. Sending never blocks the controller: entries wait in a bounded queue while the sink is
away, and the oldest are dropped (and counted) only past `queue_max`."""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import select
import socket
import ssl
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import Field

from ha_ops.remediation.audit import readable_entries
from ha_ops.security.tls import ReloadingContext, TlsFiles
from ha_ops.util.atomic import write_atomic
from ha_ops.util.models import ConfigModel

log = logging.getLogger(__name__)

APP = "ha-ops-audit"  # the syslog APP-NAME a collector selects the entries by
RESEND_ON_RECONNECT = 100  # entries sent again on a new connection (the old one may have lost them)
FACILITY_LOG_AUDIT = 13
SEVERITY_INFO = 6


class AuditSinkConfig(ConfigModel):
    address: str = Field(min_length=1, max_length=253, description="The collector's address (syslog over TLS).")
    port: int = Field(6514, ge=1, le=65535, description="Its port (6514: syslog over TLS, RFC 5425).")
    tls: TlsFiles = Field(description="This controller's certificate (its CN names it to the collector) and the CA.")
    marker_file: Path = Field(
        description="On this controller's own disk: the seq of the last entry it shipped, so that a new term ships "
        "what its predecessor left unshipped without sending the whole log again."
    )
    queue_max: int = Field(100_000, ge=1, description="Entries held while the sink is away; past it the oldest go.")
    retry_s: float = Field(1.0, gt=0, description="The pause between attempts to reach the sink.")
    timeout_s: float = Field(5.0, gt=0)


def frame(line: str, host: str, at: float) -> bytes:
    """One entry as an octet-counted RFC 5424 message: `LEN <PRI>1 TIMESTAMP HOST APP - - - MSG`."""
    stamp = datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    message = f"<{FACILITY_LOG_AUDIT * 8 + SEVERITY_INFO}>1 {stamp} {host} {APP} - - - {line}".encode()
    return f"{len(message)} ".encode() + message


class AuditShipper:
    """Ships audit lines to the sink from a thread of its own (`start`), in order, at least once."""

    def __init__(self, config: AuditSinkConfig, host: str) -> None:
        self.config, self.host = config, host
        self._context = ReloadingContext(config.tls, server=False)
        self._queue: collections.deque[tuple[int, str, str]] = collections.deque()
        self._cond = threading.Condition()
        self._stop = False
        self._sock: ssl.SSLSocket | None = None
        self.shipped_seq, self._shipped_hash = self._read_marker()
        self._recent: collections.deque[tuple[int, str, str]] = collections.deque(maxlen=RESEND_ON_RECONNECT)
        self.dropped = 0
        self.failures = 0

    def _read_marker(self) -> tuple[int, str]:
        """(seq, hash) of the last entry shipped; (0, "") when none was, or the marker cannot be read."""
        try:
            seq, digest = self.config.marker_file.read_text().split()
            return max(0, int(seq)), digest
        except (OSError, ValueError):
            return 0, ""

    def ship(self, entries: list[dict[str, Any]]) -> None:
        """Queue entries (as written to the log) past the last one shipped."""
        with self._cond:
            for entry in entries:
                seq = int(entry["seq"])
                if seq > self.shipped_seq and (not self._queue or seq > self._queue[-1][0]):
                    self._queue.append((seq, json.dumps(entry, sort_keys=True), str(entry.get("hash", ""))))
            while len(self._queue) > self.config.queue_max:
                self._queue.popleft()
                self.dropped += 1
            self._cond.notify()

    def catch_up(self, entries: list[dict[str, Any]]) -> None:
        """At the start of a term: the log's entries this controller has not shipped yet, and every later one."""
        with self._cond:
            self._queue.clear()  # (re-queued from the log, in order)
            shipped = next((e for e in entries if e.get("seq") == self.shipped_seq), None)
            if self.shipped_seq and (shipped is None or shipped.get("hash") != self._shipped_hash):
                # The log no longer holds the entry shipped last: it was replaced or cut. All of it goes, and the
                # sink then holds both versions, which `audit verify --shipped` names.
                log.error("audit: the log no longer holds seq %d as shipped; shipping it whole", self.shipped_seq)
                self.shipped_seq, self._shipped_hash = 0, ""
        self.ship(entries)

    def start(self) -> None:
        threading.Thread(target=self._loop, name="audit-ship", daemon=True).start()

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify()

    def pending(self) -> int:
        with self._cond:
            return len(self._queue)

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stop:
                    self._cond.wait()
                if self._stop:
                    break
                batch = list(self._queue)[:500]
            try:
                self._send(batch)
            except (OSError, ssl.SSLError) as exc:
                self.failures += 1
                log.warning("audit: the sink %s:%d is not reached (%s); %d entries wait", self.config.address,
                            self.config.port, exc, self.pending())  # fmt: skip
                self._close()
                time.sleep(self.config.retry_s)
                continue
            last, _, digest = batch[-1]
            with self._cond:
                while self._queue and self._queue[0][0] <= last:
                    self._queue.popleft()
                self.shipped_seq, self._shipped_hash = last, digest
                self._recent.extend(batch)
            try:
                write_atomic(self.config.marker_file, f"{last} {digest}\n")
            except OSError as exc:  # only a later term ships more again; this thread goes on
                log.warning("audit: cannot write the shipped marker %s: %s", self.config.marker_file, exc)
        self._close()

    def _send(self, batch: list[tuple[int, str, str]]) -> None:
        if self._sock is not None and _closed_by_peer(self._sock):
            self._close()
        resend: list[tuple[int, str, str]] = []
        if self._sock is None:
            raw = socket.create_connection((self.config.address, self.config.port), timeout=self.config.timeout_s)
            try:
                self._sock = self._context.get().wrap_socket(raw, server_hostname=self.config.address)
            except BaseException:
                raw.close()
                raise
            # Syslog over TCP has no acknowledgements: what the last connection took just before it broke may never
            # have reached the collector. Its last entries go again (a duplicate is harmless; `compare` merges it).
            resend = [item for item in self._recent if item[0] < batch[0][0]]
        now = time.time()
        self._sock.sendall(b"".join(frame(line, self.host, now) for _, line, _ in [*resend, *batch]))

    def _close(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
            self._sock = None


def _closed_by_peer(sock: ssl.SSLSocket) -> bool:
    """A collector never writes to us: a readable connection is one it closed (or reset). Asked before each send, as
    rsyslog's omfwd does, since a send into a closed connection succeeds once and loses its data."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    if not readable:
        return False
    # Readable may also be TLS 1.3's session tickets, which the TLS layer takes without any data for us.
    timeout = sock.gettimeout()
    sock.setblocking(False)
    try:
        return sock.recv(4096) == b""
    except (ssl.SSLWantReadError, BlockingIOError):
        return False
    except OSError:
        return True
    finally:
        sock.settimeout(timeout)


def shipped_entries(text: str) -> tuple[list[dict[str, Any]], list[str]]:
    """The sink's copy (one entry a line, each seq possibly more than once) as one entry per seq in order, and the
    problems: a seq shipped twice with different content, a line that is not an entry."""
    by_seq: dict[int, dict[str, Any]] = {}
    problems = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError):
            problems.append(f"shipped line {number}: not valid JSON")
            continue
        if not isinstance(entry, dict) or not isinstance(entry.get("seq"), int) or isinstance(entry["seq"], bool):
            problems.append(f"shipped line {number}: not an audit entry")
            continue
        seen = by_seq.setdefault(entry["seq"], entry)
        if seen != entry:
            problems.append(f"shipped line {number}: seq {entry['seq']} was shipped before with other content")
    return [by_seq[s] for s in sorted(by_seq)], problems


def compare(local_text: str | None, shipped: list[dict[str, Any]]) -> list[str]:
    """Where the local log departs from the shipped copy: an entry the sink holds that the local log lacks or holds
    otherwise. None for the local text: the local log is gone, and the shipped copy stands alone."""
    if local_text is None:
        return []
    local: dict[int, dict[str, Any]] = {}
    for entry in readable_entries(local_text):
        local.setdefault(entry["seq"], entry)
    problems = []
    for entry in shipped:
        mine = local.get(entry["seq"])
        if mine is None:
            problems.append(f"seq {entry['seq']}: shipped, but not in the local log (removed)")
        elif mine != entry:
            problems.append(f"seq {entry['seq']}: the local log holds it otherwise than the shipped copy (changed)")
    return problems
