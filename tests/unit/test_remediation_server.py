"""The controller's HTTP API (ha_ops.remediation.server) on 127.0.0.1 over a controller driven by hand: bad input
is a 400 naming the problem and changes nothing; the standby answers 503 naming the leader."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from ha_ops.health.report import AgentReport, ReportFinding
from ha_ops.remediation.app import Controller, open_controller
from ha_ops.remediation.config import ControllerConfig, Ladder, PoolConfig, Safety
from ha_ops.remediation.model import ControllerState, Intent
from ha_ops.remediation.server import ControllerRoutes, serve
from ha_ops.remediation.store import read_state
from ha_ops.schedulers.slurm import SlurmJob
from ha_ops.util.http_front import Limits


class Clock:
    def __init__(self, now: float = 5000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class StubSlurm:
    def jobs(self) -> list[SlurmJob]:
        return []


class StubExecutor:
    def __init__(self) -> None:
        self.scheduler = StubSlurm()
        self.calls: list[str] = []

    def batch_limit(self, intent: Intent) -> int:
        return 1  # each intent on its own (the real executor's batches: test_remediation_batches.py)

    def before(self, intent: Intent) -> str:
        return "IDLE"

    def run(self, intent: Intent) -> str:
        self.calls.append(intent.kind)
        return "pass" if intent.kind == "validate" else "ok"


def make_controller(state_dir: Path, me: str, clock: Clock) -> Controller:
    config = ControllerConfig(
        id=me,
        state_dir=state_dir,
        pools={"p": PoolConfig(nodes=["n1", "n2", "n3", "n4"], spares=["s1"])},
        safety=Safety(breaker_max_nodes=4, breaker_max_fraction=1.0, min_healthy_fraction=0.0),
        ladder=Ladder(validate_timeout_s=5, probation_s=10, drain_timeout_s=5),
    )
    return open_controller(config, StubExecutor(), clock=clock)  # type: ignore[arg-type]


def report_body(**change: Any) -> dict[str, Any]:
    report = AgentReport(
        node="n1",
        seq=1,
        agent_id="agent",
        sent_at=1.0,
        state="unhealthy",
        action="reset_gpu",
        reason="GPU1 xid: XID 79",
        findings=[ReportFinding(check="xid", severity="critical", action="reset_gpu", message="XID 79", gpu=1)],
    )
    body = report.to_json()
    body.update(change)
    return body


def webhook(version: str = "4", node: str = "n2", status: str = "firing") -> dict[str, Any]:
    return {
        "version": version,
        "status": status,
        "receiver": "ha-ops",
        "alerts": [
            {
                "status": status,
                "labels": {"alertname": "HaOpsGpuNodeUnhealthy", "node": node},
                "annotations": {"summary": "GPU lost"},
            }
        ],
    }


class Api:
    def __init__(self, base: str, state_dir: Path) -> None:
        self.base = base
        self.state_dir = state_dir

    def call(
        self, path: str, body: Any = None, *, raw: bytes | None = None, method: str | None = None
    ) -> tuple[int, Any, str]:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        request = urllib.request.Request(
            self.base + path,
            data=data,
            method=method or ("POST" if data is not None else "GET"),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                status, payload, ctype = response.status, response.read(), response.headers["Content-Type"]
        except urllib.error.HTTPError as exc:
            status, payload, ctype = exc.code, exc.read(), exc.headers["Content-Type"]
        if ctype == "application/json":
            return status, json.loads(payload), ctype
        return status, payload.decode(), ctype

    def raw(self, headers: dict[str, str], body: bytes = b"", path: str = "/v1/reports") -> tuple[int, Any]:
        host, port = self.base.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=5)
        try:
            conn.putrequest("POST", path, skip_accept_encoding=True)
            for key, value in headers.items():
                conn.putheader(key, value)
            conn.endheaders(body or None)
            response = conn.getresponse()
            return response.status, json.loads(response.read())
        finally:
            conn.close()

    def files(self) -> dict[str, bytes]:
        return {name: (self.state_dir / name).read_bytes() for name in ("state.json",)} | {
            "audit.jsonl": (self.state_dir / "audit.jsonl").read_bytes()
            if (self.state_dir / "audit.jsonl").exists()
            else b""
        }


@contextmanager
def serving(controller: Controller) -> Iterator[Api]:
    server = serve(controller, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield Api(f"http://127.0.0.1:{server.server_address[1]}", controller.config.state_dir)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def leader(tmp_path: Path, clock: Clock) -> Controller:
    controller = make_controller(tmp_path / "shared", "ctl1", clock)
    controller.lease_step()
    assert controller.is_leader
    return controller


@pytest.fixture
def api(leader: Controller) -> Iterator[Api]:
    with serving(leader) as api:
        yield api


# --- reports ----------------------------------------------------------------------------------------------------
def test_valid_report(api: Api, leader: Controller) -> None:
    status, body, _ = api.call("/v1/reports", report_body())
    assert status == 200
    assert body == {
        "accepted": True,
        "ignored": "",
        "notes": [],
        "intents": ["drain n1", "spare_in s1", "requeue_jobs n1"],
        "heartbeat_s": 10.0,  # the heartbeat its agents are asked for (remediation/heartbeats.py)
    }
    state = json.loads((api.state_dir / "state.json").read_text())
    assert [i["kind"] for i in state["intents"]] == ["drain", "spare_in", "requeue_jobs"]  # persisted before answering
    status, body, _ = api.call("/v1/reports", report_body(seq=2))
    assert status == 200 and body["intents"] == [] and body["notes"] == ["n1 is already cordoned"]


def test_unknown_node_is_answered_but_ignored(api: Api) -> None:
    before = api.files()
    status, body, _ = api.call("/v1/reports", report_body(node="gpu99"))
    assert status == 200
    assert body["accepted"] is False and "unknown node 'gpu99'" in body["ignored"] and body["intents"] == []
    assert read_state(api.state_dir / "state.json").intents == []
    assert api.files()["state.json"] == before["state.json"]  # nothing changed, nothing written


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        (b"{not json", ["not valid JSON"]),
        (b"\xff\xfe", ["not valid JSON"]),
        (b"[1, 2]", ["not a valid agent report"]),
        (b'"a string"', ["not a valid agent report"]),
        (json.dumps(report_body(schema="someone-else/report")).encode(), ["schema"]),
        (json.dumps(report_body(version=2)).encode(), ["version"]),
        (json.dumps({k: v for k, v in report_body().items() if k != "node"}).encode(), ["node", "Field required"]),
        (json.dumps({k: v for k, v in report_body().items() if k != "seq"}).encode(), ["seq", "Field required"]),
        (json.dumps(report_body(state="on fire")).encode(), ["state"]),
        (json.dumps(report_body(seq=-1)).encode(), ["seq"]),
        (json.dumps(report_body(surprise=1)).encode(), ["surprise", "Extra inputs"]),
        (json.dumps(report_body(node="")).encode(), ["node"]),
    ],
)
def test_bad_report_is_400_and_changes_nothing(api: Api, raw: bytes, words: list[str]) -> None:
    before = api.files()
    status, body, ctype = api.call("/v1/reports", raw=raw)
    assert status == 400 and ctype == "application/json"
    assert all(w in body["error"] for w in words), body
    assert api.files() == before


def test_empty_body_is_400(api: Api) -> None:
    before = api.files()
    status, body, _ = api.call("/v1/reports", raw=b"", method="POST")
    assert status == 400 and "JSON body" in body["error"] and "got 0" in body["error"]
    status, body = api.raw({})  # no Content-Length at all
    assert status == 400 and "JSON body" in body["error"]
    assert api.files() == before


def test_bad_content_length_is_400(api: Api) -> None:
    before = api.files()
    status, body = api.raw({"Content-Length": str(2 << 20)})
    assert status == 400 and "got 2097152" in body["error"]
    status, body = api.raw({"Content-Length": "many"})
    assert status == 400 and "Content-Length" in body["error"]
    assert api.files() == before


# --- alerts -----------------------------------------------------------------------------------------------------
def test_alertmanager_v4_webhook(api: Api, leader: Controller, clock: Clock) -> None:
    status, body, _ = api.call("/v1/alerts", webhook())
    assert status == 200 and body["intents"] == [] and "the leader is new" in body["notes"][0]
    for _ in range(30):  # report_fresh_s, renewing the lease as the lease thread would
        clock.now += 1
        leader.lease_step()
    assert leader.token == 1
    status, body, _ = api.call("/v1/alerts", webhook())
    assert status == 200 and body["intents"] == ["drain n2", "spare_in s1", "requeue_jobs n2"]
    status, body, _ = api.call("/v1/alerts", webhook(node="n3", status="resolved"))
    assert status == 200 and body["intents"] == [] and body["notes"] == ["alert HaOpsGpuNodeUnhealthy resolved"]
    status, body, _ = api.call("/v1/alerts", webhook(node="gpu99"))
    assert status == 200 and body["intents"] == [] and "no known node" in body["notes"][0]


@pytest.mark.parametrize(
    ("hook", "word"),
    [
        ({**webhook(), "version": "3"}, "version"),
        ({k: v for k, v in webhook().items() if k != "alerts"}, "alerts"),
        ({**webhook(), "alerts": [{"status": "maybe", "labels": {}}]}, "status"),
        ({**webhook(), "alerts": [{"status": "firing"}]}, "labels"),
    ],
)
def test_bad_webhook_is_400(api: Api, hook: dict[str, Any], word: str) -> None:
    before = api.files()
    status, body, _ = api.call("/v1/alerts", hook)
    assert status == 400 and "not a valid Alertmanager webhook" in body["error"] and word in body["error"]
    assert api.files() == before


# --- other endpoints --------------------------------------------------------------------------------------------
def test_get_endpoints(api: Api) -> None:
    status, body, _ = api.call("/healthz")
    assert status == 200 and body == {"id": "ctl1", "leader": True}
    status, body, _ = api.call("/v1/state")
    assert status == 200 and body["leader"] and body["leader_name"] == "ctl1" and body["token"] == 1
    assert set(body["state"]["nodes"]) == {"n1", "n2", "n3", "n4", "s1"}
    status, text, ctype = api.call("/metrics")
    assert status == 200 and ctype.startswith("text/plain")
    assert 'ha_ops_controller_leader{id="ctl1"} 1.0' in text
    assert 'ha_ops_controller_breaker_open{id="ctl1"} 0.0' in text


def test_the_health_probe_is_answered_on_the_headers_without_a_worker(leader: Controller) -> None:
    """/healthz is answered on the server's loop (ControllerRoutes.early): a probe is served while every worker
    waits on a commit; the other paths go to the workers."""
    routes = ControllerRoutes(leader)
    probe = routes.early("GET", "/healthz", {}, None)
    assert probe is not None and json.loads(probe.body) == {"id": "ctl1", "leader": True}
    assert routes.early("GET", "/v1/state", {}, None) is None and routes.early("POST", "/v1/reports", {}, None) is None


def test_unknown_paths_are_404(api: Api) -> None:
    status, body, _ = api.call("/nope")
    assert status == 404 and "/nope" in body["error"]
    status, body, _ = api.call("/v1/nope", {"x": 1})
    assert status == 404 and "/v1/nope" in body["error"]


def test_repaired_and_breaker_reset(api: Api) -> None:
    status, body, _ = api.call("/v1/nodes/n1/repaired", {})
    assert status == 200 and "not awaiting repair" in body["ignored"]
    status, body, _ = api.call("/v1/breaker/reset", {})
    assert status == 200 and body["notes"] == ["circuit breaker closed"]


# --- leadership -------------------------------------------------------------------------------------------------
def test_standby_answers_503_naming_the_leader(tmp_path: Path, clock: Clock, leader: Controller) -> None:
    standby = make_controller(tmp_path / "shared", "ctl2", clock)
    standby.lease_step()
    assert not standby.is_leader
    before = (tmp_path / "shared" / "state.json").read_bytes()
    with serving(standby) as api:
        for path, body in (("/v1/reports", report_body()), ("/v1/alerts", webhook()), ("/v1/breaker/reset", {})):
            status, answer, _ = api.call(path, body)
            assert status == 503 and answer == {"error": "standby", "leader": "ctl1"}
        status, answer, _ = api.call("/healthz")
        assert status == 200 and answer == {"id": "ctl2", "leader": False}
        status, answer, _ = api.call("/v1/state")
        assert status == 200 and "state" not in answer and answer["leader_name"] == "ctl1"
        # The refused report still tells the standby that the agent reaches it, not the leader (its view shows it).
        assert answer["views"][0]["id"] == "ctl2" and answer["views"][0]["agents"] == {"n1": clock.now}
        api.call("/v1/reports", report_body(node="nobody"))  # a node not configured does not grow the view
        assert api.call("/v1/state")[1]["views"][0]["agents"] == {"n1": clock.now}
        status, text, _ = api.call("/metrics")
        assert status == 200 and 'ha_ops_controller_leader{id="ctl2"} 0.0' in text
    assert (tmp_path / "shared" / "state.json").read_bytes() == before
    assert standby.executor.calls == []  # type: ignore[attr-defined]


def test_a_deposed_leader_answers_503_and_writes_nothing(
    tmp_path: Path, clock: Clock, leader: Controller, api: Api
) -> None:
    clock.now += 3.0  # the leader froze; ctl2 took over
    other = make_controller(tmp_path / "shared", "ctl2", clock)
    other.lease_step()
    assert other.is_leader and leader.token is not None  # ctl1 has not looked at the lease since
    before = api.files()
    status, body, _ = api.call("/v1/reports", report_body())
    # Its renewal has run out on its own clock: it answers as a standby, naming the holder it reads.
    assert status == 503 and body == {"error": "standby", "leader": "ctl2"}
    assert api.files() == before


# --- hostile callers --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"node": "gpu7;touch /tmp/x;#"}, ["node", "is not a node name"]),
        ({"node": "n1/../n2"}, ["node", "is not a node name"]),
        ({"reason": "x" * 1025}, ["reason", "at most 1024"]),
        ({"seq": 2**62}, ["seq", "less than or equal"]),
        ({"agent_id": "a" * 129}, ["agent_id", "at most 128"]),
        ({"sent_at": "nan"}, ["sent_at"]),
        ({"findings": [{"check": "xid", "severity": "critical", "action": "reset_gpu", "message": "m"}] * 1025},
         ["findings", "at most 1024"]),
        ({"gpus": [{"index": 1000, "state": "healthy"}]}, ["gpus.0.index"]),
    ],
)  # fmt: skip
def test_a_hostile_report_is_400_and_changes_nothing(api: Api, change: dict[str, Any], words: list[str]) -> None:
    before = api.files()
    status, body, _ = api.call("/v1/reports", report_body(**change))
    assert status == 400 and all(w in body["error"] for w in words), body
    assert api.files() == before


def test_a_body_over_the_limit_is_refused_on_its_length_before_it_is_read(api: Api) -> None:
    """A 1 MiB reason used to be read, stored in the state and audited; a report is now at most 256 KiB, judged
    by its Content-Length before a byte of it is read (headers only here: a server that closes a socket with a
    client's unread bytes in it resets the connection, and the client may lose the answer)."""
    before = api.files()
    status, body = api.raw({"Content-Length": str(len(json.dumps(report_body(reason="x" * (1 << 20)))))})
    assert status == 400 and "a JSON body of 1 byte to 262144 bytes is required" in body["error"]
    assert api.files() == before


def test_control_characters_in_a_reason_become_spaces(api: Api) -> None:
    status, _, _ = api.call("/v1/reports", report_body(reason="XID 79\nNodeName=n9 State=IDLE\x00"))
    assert status == 200
    state = json.loads(api.files()["state.json"])  # (n1's record in the journal: node_records.py)
    assert state["journal"]["n1"]["last_report"]["reason"] == "XID 79 NodeName=n9 State=IDLE "


def test_the_state_does_not_show_what_would_let_a_caller_forge_a_report(api: Api) -> None:
    assert api.call("/v1/reports", report_body(state="healthy", action="none", reason="", findings=[]))[0] == 200
    _, body, _ = api.call("/v1/state")
    last = body["state"]["nodes"]["n1"]["last_report"]
    assert last["state"] == "healthy" and "agent_id" not in last and "seq" not in last
    # What probes and tools read from it still parses as the state (the game days' controller_phase does).
    assert ControllerState.model_validate(body["state"]).nodes["n1"].last_report.state == "healthy"  # type: ignore[union-attr]


def test_a_repaired_node_is_named_as_a_node_or_refused(api: Api) -> None:
    status, body, _ = api.call("/v1/nodes/n1;reboot/repaired", {})
    assert status == 400 and "is not a node name" in body["error"]


def test_only_ha_ops_storage_alerts_are_recorded(api: Api, leader: Controller) -> None:
    forged = [{"status": "firing", "labels": {"alertname": f"HaOpsStorage{i}"}} for i in range(50)]
    real = {"status": "firing", "labels": {"alertname": "HaOpsStorageMasterDown"}}
    status, body, _ = api.call("/v1/alerts", {**webhook(), "alerts": [*forged, real]})
    assert status == 200 and body["notes"][-1] == "storage alert HaOpsStorageMasterDown firing"
    assert body["notes"][0] == "ignored: alert 'HaOpsStorage0' is not one of ha-ops' alerts"
    assert list(json.loads(api.files()["state.json"])["storage_alerts"]) == ["HaOpsStorageMasterDown"]


def test_half_sent_requests_are_dropped_at_their_deadline_and_hold_no_worker(tmp_path: Path, clock: Clock) -> None:
    """20 callers that send half a request and wait, and 20 that connect and send nothing: a genuine report is
    answered while all 40 are still connected, no worker thread serves any of them, and each is dropped at the
    whole-request deadline (issue 44: the API served 0 of 8 reports behind 256 such callers)."""
    controller = make_controller(tmp_path / "shared", "ctl1", clock)
    controller.lease_step()
    server = serve(controller, "127.0.0.1", 0, Limits(request_s=3.0))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    threads_before = threading.active_count()
    try:
        port = server.server_address[1]
        silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(20)]
        stalled = []
        for _ in range(20):
            conn = socket.create_connection(("127.0.0.1", port))
            conn.sendall(b"POST /v1/reports HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{")  # and no more
            stalled.append(conn)
        status, body, _ = Api(f"http://127.0.0.1:{port}", controller.config.state_dir).call("/v1/reports",
                                                                                             report_body())  # fmt: skip
        assert status == 200 and body["accepted"] is True
        assert server.open_connections >= 40  # (answered while every one of them still held its connection)
        assert threading.active_count() - threads_before <= 1  # (the one worker that served the report)
        for conn in silent + stalled:
            conn.settimeout(10)
            assert conn.recv(100) == b""  # dropped at the deadline: closed, no answer
            conn.close()
        assert server.open_connections == 0
    finally:
        server.shutdown()
        server.server_close()
