"""Audit entries shipped to a central sink over syslog-over-TLS (ha_ops.remediation.audit_sink), against a real TLS
collector on 127.0.0.1 that requires the controller's certificate and parses RFC 5425 frames as rsyslog does; and
`ha-ops audit verify --shipped`: the copy stands alone when the local log is gone, and names what was cut or
changed locally."""

from __future__ import annotations

import contextlib
import json
import re
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ha_ops.remediation.audit import AuditLog
from ha_ops.remediation.audit_sink import AuditShipper, AuditSinkConfig, compare, frame, shipped_entries
from ha_ops.security.pki import CertificateAuthority
from ha_ops.security.tls import ReloadingContext, TlsFiles
from tests.unit.cli_helpers import run_main

KEY = b"k" * 32
FRAME = re.compile(rb"(\d+) ")


class Collector:
    """A syslog-over-TLS receiver: mutual TLS with the CA's certificates, octet-counted frames, messages kept."""

    def __init__(self, files: TlsFiles, port: int = 0) -> None:
        self.context = ReloadingContext(files, server=True).get()
        self.listener = socket.create_server(("127.0.0.1", port))
        self.port = self.listener.getsockname()[1]
        self.messages: list[bytes] = []
        self.peers: list[str] = []
        self._threads: list[threading.Thread] = []
        self._conns: list[ssl.SSLSocket] = []
        self._accept = threading.Thread(target=self._serve, daemon=True)
        self._accept.start()

    def _serve(self) -> None:
        while True:
            try:
                raw, _ = self.listener.accept()
            except OSError:
                return
            thread = threading.Thread(target=self._read, args=(raw,), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _read(self, raw: socket.socket) -> None:
        try:
            conn = self.context.wrap_socket(raw, server_side=True)
        except (ssl.SSLError, OSError):
            raw.close()
            return
        self._conns.append(conn)
        self.peers.append(dict(x[0] for x in conn.getpeercert()["subject"])["commonName"])
        buffer = b""
        try:
            while chunk := conn.recv(65536):
                buffer += chunk
                while (m := FRAME.match(buffer)) and len(buffer) >= m.end() + int(m.group(1)):
                    end = m.end() + int(m.group(1))
                    self.messages.append(buffer[m.end() : end])
                    buffer = buffer[end:]
        except (ssl.SSLError, OSError):
            return
        finally:
            conn.close()

    def lines(self) -> list[str]:
        """Each message's MSG part (after `<PRI>1 TS HOST APP - - - `), as a collector writes it to its file."""
        return [m.decode().split(" ", 7)[7] for m in self.messages]

    def close(self) -> None:
        # shutdown first: a close alone leaves the thread blocked in accept() holding the port
        for sock in (self.listener, *self._conns):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        for thread in (self._accept, *self._threads):
            thread.join(5)


@pytest.fixture
def certs(tmp_path: Path) -> dict[str, TlsFiles]:
    ca = CertificateAuthority(tmp_path / "ca")
    ca.ensure("test CA")

    def files(name: str, server: tuple[str, ...] = ()) -> TlsFiles:
        paths = ca.issue(name, name, groups=("ha-ops:controllers",), server_names=server)
        return TlsFiles(ca_file=ca.paths.cert, cert_file=paths.cert, key_file=paths.key)

    return {"collector": files("collector", ("127.0.0.1",)), "ctl1": files("ctl1"), "ctl2": files("ctl2")}


@pytest.fixture
def collector(certs: dict[str, TlsFiles]) -> Iterator[Collector]:
    server = Collector(certs["collector"])
    yield server
    server.close()


def shipper(certs: dict[str, TlsFiles], port: int, marker: Path, name: str = "ctl1") -> AuditShipper:
    config = AuditSinkConfig(address="127.0.0.1", port=port, tls=certs[name], marker_file=marker, retry_s=0.05)
    return AuditShipper(config, name)


def wait_until(what: str, condition, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def append(log: AuditLog, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        log.append(at=float(i), who="ctl1", what="drain", node=f"n{i}", why=f"reason {i}", intent=f"i{i}")


def test_a_frame_is_an_octet_counted_rfc5424_message() -> None:
    data = frame('{"seq":1}', "ctl1", 0.0)
    length, message = data.split(b" ", 1)
    assert int(length) == len(message)
    assert message == b'<110>1 1970-01-01T00:00:00.000Z ctl1 ha-ops-audit - - - {"seq":1}'


def test_every_entry_reaches_the_sink_as_written_and_the_gap_while_it_was_away_is_filled(
    tmp_path: Path, certs: dict[str, TlsFiles], collector: Collector
) -> None:
    ship = shipper(certs, collector.port, tmp_path / "marker")
    log = AuditLog.at(tmp_path / "state" / "audit.jsonl", key=KEY, sink=ship)
    ship.start()
    try:
        append(log, 5)
        # (the shipper writes its marker after the sink has the entries: wait for both)
        marker = tmp_path / "marker"
        wait_until("5 entries shipped", lambda: len(collector.lines()) == 5 and marker.exists()
                   and marker.read_text().split()[:1] == ["5"])  # fmt: skip
        assert collector.lines() == log.text().splitlines() and collector.peers == ["ctl1"]
        last = json.loads(log.text().splitlines()[-1])
        assert ship.shipped_seq == 5 and (tmp_path / "marker").read_text().split() == ["5", last["hash"]]
        port = collector.port
        collector.close()  # the sink goes away: entries wait, the controller is not held up
        started = time.monotonic()
        append(log, 3, start=5)
        assert time.monotonic() - started < 1.0
        wait_until("a failed send", lambda: ship.failures > 0)
        back = Collector(certs["collector"], port=port)
        try:
            written = log.text().splitlines()
            # All three, in order, at the new collector (with what the broken connection took just before: again)
            wait_until("the waiting entries at the sink", lambda: back.lines()[-3:] == written[5:])
            assert ship.shipped_seq == 8 and set(back.lines()) <= set(written)
            assert ship.pending() == 0 and ship.dropped == 0
        finally:
            back.close()
    finally:
        ship.stop()


def test_a_new_leader_ships_what_its_predecessor_left_unshipped(
    tmp_path: Path, certs: dict[str, TlsFiles], collector: Collector
) -> None:
    path = tmp_path / "state" / "audit.jsonl"
    append(AuditLog.at(path, key=KEY), 4)  # written by a leader that died before shipping them
    second = json.loads(path.read_text().splitlines()[1])
    (tmp_path / "marker2").write_text(f"2 {second['hash']}\n")  # ctl2 shipped up to seq 2 in an earlier term
    ship = shipper(certs, collector.port, tmp_path / "marker2", name="ctl2")
    log = AuditLog.at(path, key=KEY, sink=ship)
    ship.start()
    try:
        assert log.resume(log.head())[0] == []
        append(log, 1, start=4)
        wait_until("entries 3-5 shipped", lambda: len(collector.lines()) == 3)
        assert [json.loads(line)["seq"] for line in collector.lines()] == [3, 4, 5]
        assert collector.peers == ["ctl2"]
    finally:
        ship.stop()


def test_a_log_that_no_longer_holds_what_was_shipped_last_is_shipped_whole(
    tmp_path: Path, certs: dict[str, TlsFiles], collector: Collector
) -> None:
    path = tmp_path / "state" / "audit.jsonl"
    append(AuditLog.at(path, key=KEY), 3)  # a new log, after the one whose seq 3 was shipped was deleted
    (tmp_path / "marker").write_text(f"3 {'f' * 64}\n")
    ship = shipper(certs, collector.port, tmp_path / "marker")
    log = AuditLog.at(path, key=KEY, sink=ship)
    ship.start()
    try:
        log.resume(log.head())
        wait_until("the whole log shipped", lambda: len(collector.lines()) == 3)
        assert collector.lines() == path.read_text().splitlines()
    finally:
        ship.stop()


def test_a_sink_away_for_long_drops_the_oldest_and_counts_them(tmp_path: Path, certs: dict[str, TlsFiles]) -> None:
    unused = socket.create_server(("127.0.0.1", 0))
    port = unused.getsockname()[1]
    unused.close()  # nothing listens there
    config = AuditSinkConfig(address="127.0.0.1", port=port, tls=certs["ctl1"], marker_file=tmp_path / "m",
                             queue_max=3)  # fmt: skip
    ship = AuditShipper(config, "ctl1")
    ship.ship([{"seq": i, "what": "x"} for i in range(1, 6)])
    assert ship.pending() == 3 and ship.dropped == 2


# --- comparing the copies ---------------------------------------------------------------------------------------
def test_duplicates_collapse_and_a_conflicting_one_is_named() -> None:
    a, b = {"seq": 1, "hash": "a"}, {"seq": 2, "hash": "b"}
    entries, problems = shipped_entries("\n".join(json.dumps(e) for e in (a, b, a, b)))
    assert entries == [a, b] and problems == []
    _, problems = shipped_entries("\n".join(json.dumps(e) for e in (a, {"seq": 1, "hash": "z"}, "x")) + "\n{")
    assert problems == ["shipped line 2: seq 1 was shipped before with other content",
                        "shipped line 3: not an audit entry", "shipped line 4: not valid JSON"]  # fmt: skip
    assert compare(json.dumps(a), [a, b]) == ["seq 2: shipped, but not in the local log (removed)"]
    assert compare(json.dumps({**a, "why": "edited"}), [a]) == [
        "seq 1: the local log holds it otherwise than the shipped copy (changed)"
    ]
    assert compare(None, [a, b]) == []


def test_verify_against_the_shipped_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    local = tmp_path / "audit.jsonl"
    append(AuditLog.at(local, key=KEY), 4)
    lines = local.read_text().splitlines()
    shipped = tmp_path / "shipped.jsonl"
    shipped.write_text("\n".join([*lines, lines[1], lines[2]]) + "\n")  # shipped twice after a takeover
    key = tmp_path / "key"
    key.write_bytes(KEY)
    ok = ("--shipped", str(shipped), "--key-file", str(key))
    assert run_main(monkeypatch, "audit", "verify", str(local), *ok) == 0
    assert "4 entries shipped, chain intact; " in capsys.readouterr().out
    # The local log cut and its chain recomputed without the key: both copies' views name it.
    edited = json.loads(lines[2]) | {"why": "nothing happened"}
    local.write_text("\n".join([lines[0], lines[1], json.dumps(edited, sort_keys=True)]) + "\n")
    assert run_main(monkeypatch, "audit", "verify", str(local), *ok, "--json") == 1
    result = json.loads(capsys.readouterr().out)
    assert "seq 3: the local log holds it otherwise than the shipped copy (changed)" in result["problems"]
    assert "seq 4: shipped, but not in the local log (removed)" in result["problems"]
    # The local log deleted: the shipped copy stands alone, its chain (keyed) intact.
    local.unlink()
    assert run_main(monkeypatch, "audit", "verify", str(local), *ok, "--json") == 0
    result = json.loads(capsys.readouterr().out)
    assert result["intact"] and result["shipped_entries"] == 4 and result["local_log_present"] is False
    # An entry rewritten in the shipped copy without the key is named there too.
    shipped.write_text("\n".join([*lines[:3], json.dumps(json.loads(lines[3]) | {"why": "x"}, sort_keys=True)]))
    assert run_main(monkeypatch, "audit", "verify", *ok) == 1
    assert "shipped copy: line 4: content does not match its hash (changed)" in capsys.readouterr().err
