"""The node agent over fake GPUs: drain/resume in a stub Slurm, controller reports, state across restarts; the
report schema; the HTTP poster; and Slurm's node parsing and retries over a stub transport."""

from __future__ import annotations

import json
import logging
import random
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from ha_ops.errors import CommandFailed, CommandTimeout, TransportError
from ha_ops.gpu.fake import FakeBackend, FakeGpus
from ha_ops.gpu.types import GpuEvent, GpuSample
from ha_ops.health.agent import Agent, AgentState
from ha_ops.health.config import AgentConfig
from ha_ops.health.model import Action, HealthState
from ha_ops.health.poster import HttpPoster
from ha_ops.health.report import AgentReport, build_report
from ha_ops.schedulers.slurm import REASON_PREFIX, Slurm, SlurmNode
from ha_ops.util.proc import CommandResult

NODE = "gpu3"


# --- stubs ------------------------------------------------------------------------------------------------------
class StubSlurm:
    """Records calls; node() reports the state this stub holds (drain/resume change it, as Slurm would)."""

    def __init__(self, state: str = "IDLE", reason: str = "") -> None:
        self.state = state
        self.reason = reason
        self.calls: list[tuple[str, ...]] = []

    def node(self, name: str) -> SlurmNode:
        self.calls.append(("node", name))
        return SlurmNode(name, self.state, self.reason)

    def drain(self, name: str, reason: str) -> None:
        self.calls.append(("drain", name, reason))
        self.state = "IDLE+DRAIN"
        self.reason = reason if reason.startswith(REASON_PREFIX) else f"{REASON_PREFIX} {reason}"

    def resume(self, name: str) -> None:
        self.calls.append(("resume", name))
        self.state, self.reason = "IDLE", ""

    def actions(self) -> list[tuple[str, ...]]:
        return [c for c in self.calls if c[0] != "node"]


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def tick(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def gpus(tmp_path: Path) -> FakeGpus:
    return FakeGpus.create(tmp_path / "gpus", NODE, 4)


def config(gpus: FakeGpus, **changes: Any) -> AgentConfig:
    data: dict[str, Any] = {
        "node": NODE,
        "backend": "fake",
        "fake_dir": gpus.directory,
        "metrics": {"port": 0},
        "slurm": {"resume_after_healthy_sweeps": 3},
    }
    data.update(changes)
    return AgentConfig.model_validate(data)


def make_agent(gpus: FakeGpus, scheduler: StubSlurm | None = None, **changes: Any) -> Agent:
    return Agent(config(gpus, **changes), FakeBackend(gpus.directory), slurm=scheduler)  # type: ignore[arg-type]


def sweep(agent: Agent, times: int = 1) -> HealthState:
    """Sweeps as the agent's loop does them: with the events that arrived since the last one."""
    state = HealthState.UNKNOWN
    for _ in range(times):
        state = agent.sweep(agent.backend.wait_events(0)).state
    return state


# --- Slurm drain / resume ---------------------------------------------------------------------------------------
def test_healthy_node_is_left_alone(gpus: FakeGpus) -> None:
    slurm = StubSlurm()
    agent = make_agent(gpus, slurm)
    assert sweep(agent, 3) == HealthState.HEALTHY
    assert slurm.actions() == []
    assert agent.start_metrics() is None  # port 0: no metrics server


def test_unhealthy_drains_exactly_once_naming_gpu_and_fault(gpus: FakeGpus) -> None:
    slurm = StubSlurm()
    agent = make_agent(gpus, slurm)
    sweep(agent)
    gpus.update(2, ecc_volatile_uncorrected=3)
    assert sweep(agent) == HealthState.UNHEALTHY
    calls = len(slurm.calls)
    for _ in range(5):
        assert sweep(agent) == HealthState.UNHEALTHY
    assert len(slurm.calls) == calls  # once drained, the agent does not ask slurmctld again every sweep
    drains = [c for c in slurm.calls if c[0] == "drain"]
    assert len(drains) == 1
    _, node, reason = drains[0]
    assert node == NODE
    assert reason.startswith("ha-ops: agent: GPU2 ecc_uncorrectable:")  # a drain the controller would adopt
    assert "uncorrectable ECC" in reason
    assert agent.state.drained_by_agent
    assert agent.collector.stats.drained_by_agent


def test_an_xid_event_drains(gpus: FakeGpus) -> None:
    slurm = StubSlurm()
    agent = make_agent(gpus, slurm)
    sweep(agent)
    gpus.fall_off_bus(1)
    assert sweep(agent) == HealthState.UNHEALTHY
    [(_, _, reason)] = slurm.actions()
    assert reason.startswith("ha-ops: agent: GPU1 xid: XID 79")
    assert slurm.reason.startswith("ha-ops: agent: GPU1 xid: XID 79")


def test_a_node_drained_by_the_agent_earlier_is_adopted_not_drained_again(gpus: FakeGpus) -> None:
    slurm = StubSlurm("IDLE+DRAIN", "ha-ops: GPU0 xid: XID 48")  # e.g. the state file was lost
    agent = make_agent(gpus, slurm)
    gpus.update(0, ecc_volatile_uncorrected=1)
    sweep(agent, 2)
    assert slurm.actions() == []
    assert agent.state.drained_by_agent
    gpus.clear(0)
    sweep(agent, 3)
    assert slurm.actions() == [("resume", NODE)]


def test_a_node_drained_by_someone_else_is_never_drained_nor_resumed(gpus: FakeGpus) -> None:
    slurm = StubSlurm("IDLE+DRAIN", "operator maintenance")
    agent = make_agent(gpus, slurm)
    gpus.update(1, remapped_rows_failure=True)
    assert sweep(agent, 4) == HealthState.UNHEALTHY
    gpus.clear(1)
    assert sweep(agent, 6) == HealthState.HEALTHY
    assert slurm.actions() == []
    assert slurm.reason == "operator maintenance"
    assert not agent.state.drained_by_agent


def test_resume_only_after_enough_healthy_sweeps(gpus: FakeGpus) -> None:
    slurm = StubSlurm()
    agent = make_agent(gpus, slurm)
    gpus.double_bit_ecc(0)
    assert sweep(agent) == HealthState.UNHEALTHY
    gpus.clear(0)  # readings back to healthy and a reset event: the XID 48 latch ends
    assert sweep(agent, 2) == HealthState.HEALTHY
    assert ("resume", NODE) not in slurm.calls
    assert sweep(agent) == HealthState.HEALTHY
    assert slurm.actions()[-1] == ("resume", NODE)
    assert not agent.state.drained_by_agent
    sweep(agent, 3)
    assert slurm.calls.count(("resume", NODE)) == 1


def test_a_fault_in_between_restarts_the_healthy_count(gpus: FakeGpus) -> None:
    slurm = StubSlurm()
    agent = make_agent(gpus, slurm)
    gpus.update(0, ecc_volatile_uncorrected=1)
    sweep(agent)
    gpus.update(0, ecc_volatile_uncorrected=0)
    sweep(agent, 2)
    gpus.update(0, ecc_volatile_uncorrected=1)
    sweep(agent)
    gpus.update(0, ecc_volatile_uncorrected=0)
    sweep(agent, 2)
    assert ("resume", NODE) not in slurm.calls
    assert len([c for c in slurm.calls if c[0] == "drain"]) == 1
    sweep(agent)
    assert ("resume", NODE) in slurm.calls


def test_degraded_counts_as_healthy_for_resuming(gpus: FakeGpus) -> None:
    slurm = StubSlurm()
    agent = make_agent(gpus, slurm)
    gpus.update(0, temperature_gpu_c=99.0)
    sweep(agent)
    gpus.update(0, temperature_gpu_c=90.0)  # above slowdown only: a warning
    assert sweep(agent, 3) == HealthState.DEGRADED
    assert slurm.actions()[-1] == ("resume", NODE)


def test_no_resume_when_someone_else_took_over_the_drain(gpus: FakeGpus) -> None:
    slurm = StubSlurm()
    agent = make_agent(gpus, slurm)
    gpus.update(0, ecc_volatile_uncorrected=1)
    sweep(agent)
    slurm.reason = "operator: replacing the HGX board"  # an operator re-drained with their own reason
    gpus.update(0, ecc_volatile_uncorrected=0)
    sweep(agent, 5)
    assert ("resume", NODE) not in slurm.calls
    assert not agent.state.drained_by_agent


def test_auto_resume_off_never_resumes(gpus: FakeGpus) -> None:
    slurm = StubSlurm()
    agent = make_agent(gpus, slurm, slurm={"auto_resume": False, "resume_after_healthy_sweeps": 1})
    gpus.update(0, ecc_volatile_uncorrected=1)
    sweep(agent)
    gpus.update(0, ecc_volatile_uncorrected=0)
    sweep(agent, 5)
    assert [c[0] for c in slurm.actions()] == ["drain"]
    assert agent.state.drained_by_agent


def test_slurm_disabled_observes_only(gpus: FakeGpus) -> None:
    slurm = StubSlurm()
    agent = make_agent(gpus, slurm, slurm={"enabled": False})
    gpus.update(0, ecc_volatile_uncorrected=1)
    assert sweep(agent, 2) == HealthState.UNHEALTHY
    assert slurm.calls == []


def test_a_failing_slurm_is_retried_next_sweep(gpus: FakeGpus) -> None:
    class Flaky(StubSlurm):
        fail = True

        def drain(self, name: str, reason: str) -> None:
            if self.fail:
                self.fail = False
                raise CommandTimeout(["scontrol"], 5.0)
            super().drain(name, reason)

    slurm = Flaky()
    agent = make_agent(gpus, slurm)
    gpus.update(3, ecc_volatile_uncorrected=1)
    sweep(agent)
    assert not agent.state.drained_by_agent
    sweep(agent)
    assert agent.state.drained_by_agent
    assert len(slurm.actions()) == 1


# --- unknown and bad input --------------------------------------------------------------------------------------
def test_a_corrupt_gpu_file_is_unknown_and_never_drains(gpus: FakeGpus) -> None:
    slurm = StubSlurm()
    agent = make_agent(gpus, slurm)
    (gpus.directory / "gpu2.json").write_text("{ this is not json")
    gpus.update(1, fail_reads=["temperature_gpu_c"])
    for _ in range(5):
        assert sweep(agent) == HealthState.UNKNOWN
    assert slurm.actions() == []
    assert agent.verdict is not None
    assert "GPU2 temperature_gpu_c" in agent.verdict.unknown
    assert "GPU1 temperature_gpu_c" in agent.verdict.unknown
    assert agent.collector.stats.read_errors > 0


def test_unknown_does_not_resume_a_drained_node(gpus: FakeGpus) -> None:
    slurm = StubSlurm()
    agent = make_agent(gpus, slurm)
    gpus.update(0, ecc_volatile_uncorrected=1)
    sweep(agent)
    gpus.update(0, ecc_volatile_uncorrected=0, fail_reads=["ecc_volatile_uncorrected"])
    assert sweep(agent, 5) == HealthState.UNKNOWN
    assert ("resume", NODE) not in slurm.calls
    assert agent.state.drained_by_agent


def test_events_for_a_gpu_that_does_not_exist_are_ignored(gpus: FakeGpus, caplog: pytest.LogCaptureFixture) -> None:
    slurm = StubSlurm()
    agent = make_agent(gpus, slurm)
    with caplog.at_level(logging.WARNING, logger="ha_ops.health.agent"):
        verdict = agent.sweep([GpuEvent(42, "xid", xid=79, at=time.time()), GpuEvent(-1, "xid", xid=48)])
    assert verdict.state == HealthState.HEALTHY
    assert slurm.actions() == []
    assert not agent.collector.stats.events
    assert any("GPU 42" in r.getMessage() for r in caplog.records)


def test_a_backend_whose_sample_raises_makes_that_gpu_unreadable(gpus: FakeGpus) -> None:
    class Broken(FakeBackend):
        def sample(self, index: int) -> GpuSample:
            if index == 1:
                raise RuntimeError("driver exploded")
            return super().sample(index)

    slurm = StubSlurm()
    agent = Agent(config(gpus), Broken(gpus.directory), slurm=slurm)  # type: ignore[arg-type]
    verdict = agent.sweep()
    assert verdict.state == HealthState.UNKNOWN
    assert {u.split()[0] for u in verdict.unknown} == {"GPU1"}
    assert len(agent.samples) == 4
    assert "driver exploded" in agent.samples[1].errors[0]
    # The agent keeps going: the other GPUs are still judged.
    gpus.update(2, ecc_volatile_uncorrected=1)
    assert agent.sweep().state == HealthState.UNHEALTHY
    assert len(slurm.actions()) == 1


def test_a_backend_that_cannot_count_is_unknown(gpus: FakeGpus) -> None:
    class NoCount(FakeBackend):
        def device_count(self) -> int:
            raise RuntimeError("NVML gone")

    slurm = StubSlurm()
    agent = Agent(config(gpus), NoCount(gpus.directory), slurm=slurm)  # type: ignore[arg-type]
    verdict = agent.sweep()
    assert verdict.state == HealthState.UNKNOWN
    assert verdict.unknown == ("no GPU could be read",)
    assert slurm.actions() == []


# --- state across restarts --------------------------------------------------------------------------------------
def test_state_file_persists_drained_by_agent(gpus: FakeGpus, tmp_path: Path) -> None:
    state_file = tmp_path / "state" / "agent.json"
    slurm = StubSlurm()
    first = make_agent(gpus, slurm, state_file=state_file)
    gpus.update(0, ecc_volatile_uncorrected=1)
    sweep(first)
    saved = json.loads(state_file.read_text())
    assert saved["drained_by_agent"] is True
    assert saved["reason"].startswith("GPU0 ecc_uncorrectable")
    # A restarted agent remembers: it does not drain again and resumes once healthy.
    second = make_agent(gpus, slurm, state_file=state_file)
    assert second.state.drained_by_agent
    assert second.collector.stats.drained_by_agent
    sweep(second)
    assert len([c for c in slurm.calls if c[0] == "drain"]) == 1
    gpus.update(0, ecc_volatile_uncorrected=0)
    sweep(second, 3)
    assert slurm.actions()[-1] == ("resume", NODE)
    assert json.loads(state_file.read_text())["drained_by_agent"] is False
    assert not make_agent(gpus, slurm, state_file=state_file).state.drained_by_agent


@pytest.mark.parametrize("content", ["{ nope", "[]", "null", '"drained"'])
def test_a_corrupt_state_file_starts_clean(tmp_path: Path, caplog: pytest.LogCaptureFixture, content: str) -> None:
    path = tmp_path / "agent.json"
    path.write_text(content)
    with caplog.at_level(logging.WARNING, logger="ha_ops.health.agent"):
        assert AgentState.load(path) == AgentState()
    assert any("unreadable" in r.getMessage() for r in caplog.records)
    assert AgentState.load(None) == AgentState()
    assert AgentState.load(tmp_path / "missing.json") == AgentState()


# --- controller mode --------------------------------------------------------------------------------------------
class Recorder:
    def __init__(self) -> None:
        self.reports: list[AgentReport] = []
        self.fail_next = 0

    def __call__(self, report: AgentReport) -> None:
        if self.fail_next:
            self.fail_next -= 1
            raise ConnectionRefusedError("controller down")
        self.reports.append(report)


def controller_agent(gpus: FakeGpus, slurm: StubSlurm, poster: Recorder, clock: Clock) -> Agent:
    cfg = config(gpus, controller={"urls": ["http://controller.invalid/report"], "heartbeat_s": 30})
    return Agent(cfg, FakeBackend(gpus.directory), slurm=slurm, poster=poster, clock=clock)  # type: ignore[arg-type]


def test_controller_mode_reports_on_change_and_heartbeat_and_never_calls_slurm(gpus: FakeGpus) -> None:
    slurm, poster, clock = StubSlurm(), Recorder(), Clock()
    agent = controller_agent(gpus, slurm, poster, clock)
    sweep(agent)
    assert len(poster.reports) == 1
    first = poster.reports[0]
    assert isinstance(first, AgentReport)
    assert (first.node, first.state, first.seq) == (NODE, HealthState.HEALTHY, 1)
    assert first.driver_version == "550.90.07"
    assert [g.index for g in first.gpus] == [0, 1, 2, 3]
    assert all(g.state == HealthState.HEALTHY and g.uuid for g in first.gpus)
    clock.tick(10)
    sweep(agent)
    assert len(poster.reports) == 1  # nothing changed, heartbeat not due
    clock.tick(25)
    sweep(agent)
    assert len(poster.reports) == 2  # heartbeat
    assert poster.reports[1].state == HealthState.HEALTHY
    clock.tick(1)
    gpus.fall_off_bus(2)
    sweep(agent)
    assert len(poster.reports) == 3  # change
    report = poster.reports[2]
    assert report.state == HealthState.UNHEALTHY
    assert report.action == Action.REBOOT_NODE
    assert report.reason.startswith("GPU2 xid: XID 79")
    assert {g.index: g.state for g in report.gpus}[2] == HealthState.UNHEALTHY
    assert {g.index: g.state for g in report.gpus}[0] == HealthState.HEALTHY
    assert any(f.check == "gpu_lost" and f.gpu == 2 for f in report.findings)
    assert [r.seq for r in poster.reports] == [1, 2, 3]
    assert len({r.agent_id for r in poster.reports}) == 1
    assert slurm.calls == []


def test_an_agent_told_a_longer_heartbeat_beats_at_it_and_still_reports_a_change_at_once(gpus: FakeGpus) -> None:
    """Issue 43: a controller of a large fleet answers `heartbeat_s` 50 (remediation/heartbeats.py)."""

    class Told(Recorder):
        def __call__(self, report: AgentReport) -> dict[str, float]:  # type: ignore[override]
            super().__call__(report)
            return {"heartbeat_s": 50.0}

    slurm, poster, clock = StubSlurm(), Told(), Clock()
    agent = controller_agent(gpus, slurm, poster, clock)  # (its own heartbeat_s: 30)
    sweep(agent)
    clock.tick(35)
    sweep(agent)
    assert len(poster.reports) == 1  # its own 30 s passed, the 50 s it was told not yet
    clock.tick(15)
    sweep(agent)
    assert len(poster.reports) == 2  # 50 s
    clock.tick(1)
    gpus.fall_off_bus(2)
    sweep(agent)
    assert len(poster.reports) == 3 and poster.reports[2].state == HealthState.UNHEALTHY  # a change: at once


def test_a_failed_report_stays_pending_and_is_resent_next_sweep(gpus: FakeGpus) -> None:
    slurm, poster, clock = StubSlurm(), Recorder(), Clock()
    agent = controller_agent(gpus, slurm, poster, clock)
    sweep(agent)
    gpus.update(1, ecc_volatile_uncorrected=1)
    poster.fail_next = 1
    clock.tick(1)
    sweep(agent)  # the change: sending fails
    assert [r.state for r in poster.reports] == [HealthState.HEALTHY]
    clock.tick(1)
    sweep(agent)  # no change, heartbeat not due: still resent
    assert [r.state for r in poster.reports] == [HealthState.HEALTHY, HealthState.UNHEALTHY]
    clock.tick(1)
    sweep(agent)
    assert len(poster.reports) == 2  # and then not again
    assert slurm.calls == []


def test_with_no_controller_accepting_for_the_fallback_time_the_agent_drains_itself_once(gpus: FakeGpus) -> None:
    slurm, poster, clock = StubSlurm(), Recorder(), Clock()
    cfg = config(gpus, controller={"urls": ["http://c.invalid/r"], "heartbeat_s": 30, "fallback_after_s": 5})
    agent = Agent(cfg, FakeBackend(gpus.directory), slurm=slurm, poster=poster, clock=clock)  # type: ignore[arg-type]
    sweep(agent)
    poster.fail_next = 100  # both controllers unreachable from here on
    gpus.fall_off_bus(1)
    for _ in range(4):
        clock.tick(1)
        sweep(agent)
    assert slurm.actions() == []  # 4 s without an accepted report: the controllers may still answer
    for _ in range(4):
        clock.tick(1)
        sweep(agent)
    [(kind, node, reason)] = slurm.actions()  # drained once, not on every sweep
    assert (kind, node) == ("drain", NODE) and reason.startswith("ha-ops: agent: GPU1 xid: XID 79")
    assert agent.state.drained_by_agent
    poster.fail_next = 0
    clock.tick(1)
    sweep(agent)  # a controller accepts again: the drain is its to adopt, never the agent's to resume
    assert poster.reports[-1].state == HealthState.UNHEALTHY and not agent.state.drained_by_agent
    assert [a[0] for a in slurm.actions()] == ["drain"]


def test_a_healthy_node_is_never_drained_by_the_fallback(gpus: FakeGpus) -> None:
    slurm, poster, clock = StubSlurm(), Recorder(), Clock()
    cfg = config(gpus, controller={"urls": ["http://c.invalid/r"], "heartbeat_s": 1, "fallback_after_s": 1})
    agent = Agent(cfg, FakeBackend(gpus.directory), slurm=slurm, poster=poster, clock=clock)  # type: ignore[arg-type]
    poster.fail_next = 100
    for _ in range(5):
        clock.tick(2)
        sweep(agent)
    assert slurm.calls == []


def test_report_round_trips_and_rejects_unknown_keys_and_wrong_schema(gpus: FakeGpus) -> None:
    poster, clock = Recorder(), Clock()
    agent = controller_agent(gpus, StubSlurm(), poster, clock)
    gpus.update(0, ecc_volatile_uncorrected=1, fail_reads=["power_draw_w"])
    gpus.update(3, fail_reads=["temperature_gpu_c"])
    sweep(agent)
    report = poster.reports[0]
    data = report.to_json()
    assert data["schema"] == "ha-ops/agent-report"
    assert data["version"] == 1
    assert "schema_" not in data
    assert AgentReport.model_validate(data) == report
    assert AgentReport.model_validate(json.loads(json.dumps(data))) == report
    assert data["findings"][0]["severity"] == "critical"
    assert data["unknown"] == ["GPU3 temperature_gpu_c"]
    assert {g["index"]: g["state"] for g in data["gpus"]} == {0: "unhealthy", 1: "healthy", 2: "healthy", 3: "unknown"}
    bad_cases: list[dict[str, Any]] = [
        {**data, "surprise": 1},
        {**data, "schema": "ha-ops/other"},
        {**data, "version": 2},
        {**data, "state": "fine"},
        {**data, "node": ""},
        {**data, "findings": [{**data["findings"][0], "extra": True}]},
        {k: v for k, v in data.items() if k != "node"},
    ]
    for bad in bad_cases:
        with pytest.raises(ValidationError):
            AgentReport.model_validate(bad)


# --- the HTTP poster --------------------------------------------------------------------------------------------
@dataclass
class Controller:
    url: str
    bodies: list[bytes]
    status: list[int]


@contextmanager
def serve_controller(status: int = 204) -> Iterator[Controller]:
    """A controller endpoint on 127.0.0.1 that records what it receives and answers `status`."""
    bodies: list[bytes] = []
    answer = [status]

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers["Content-Length"])
            body = self.rfile.read(length)
            if self.headers["Content-Type"] == "application/json":
                bodies.append(body)
            self.send_response(answer[0])
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield Controller(f"http://127.0.0.1:{server.server_address[1]}/v1/reports", bodies, answer)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture
def controller() -> Iterator[Controller]:
    with serve_controller() as c:
        yield c


def unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_http_poster_sends_valid_json(gpus: FakeGpus, controller: Controller) -> None:
    clock = Clock()
    cfg = config(gpus, controller={"urls": [controller.url]})
    poster = HttpPoster([controller.url], timeout=5.0)
    agent = Agent(cfg, FakeBackend(gpus.directory), poster=poster, clock=clock)
    gpus.update(1, temperature_gpu_c=96.0)
    agent.sweep()
    assert len(controller.bodies) == 1
    received = AgentReport.model_validate(json.loads(controller.bodies[0]))
    assert received.node == NODE
    assert received.state == HealthState.UNHEALTHY
    assert received.reason.startswith("GPU1 temperature")
    assert not agent._report_pending


def test_http_poster_raises_when_the_controller_refuses(gpus: FakeGpus, controller: Controller) -> None:
    controller.status[0] = 500
    poster = HttpPoster([controller.url], timeout=5.0)
    clock = Clock()
    agent = Agent(config(gpus), FakeBackend(gpus.directory), poster=poster, clock=clock)
    verdict = agent.sweep()
    assert agent._report_pending  # through the agent: the report stays pending
    report = build_report(NODE, 1, "abc", clock(), verdict, agent.samples, None)
    with pytest.raises(OSError, match="500"):
        poster(report)
    controller.status[0] = 200
    clock.tick(1)
    agent.sweep()
    assert not agent._report_pending
    assert len(controller.bodies) == 3


def test_http_poster_to_nobody_raises(gpus: FakeGpus) -> None:
    poster = HttpPoster([f"http://127.0.0.1:{unused_port()}/"], timeout=1.0)
    agent = Agent(config(gpus), FakeBackend(gpus.directory), poster=poster)
    agent.sweep()  # must not raise
    assert agent._report_pending


def test_http_poster_fails_over_to_the_controller_that_leads(gpus: FakeGpus) -> None:
    with serve_controller(503) as standby, serve_controller(204) as leader:
        poster = HttpPoster([f"http://127.0.0.1:{unused_port()}/", standby.url, leader.url], timeout=2.0)
        agent = Agent(config(gpus), FakeBackend(gpus.directory), poster=poster, clock=Clock())
        verdict = agent.sweep()
        assert not agent._report_pending
        assert len(standby.bodies) == 1 and len(leader.bodies) == 1
        # The leader that accepted is tried first next time.
        poster(build_report(NODE, 2, "abc", 0.0, verdict, agent.samples, None))
        assert len(standby.bodies) == 1 and len(leader.bodies) == 2
        # Leadership moves: the old leader now refuses, the standby accepts.
        leader.status[0], standby.status[0] = 503, 204
        poster(build_report(NODE, 3, "abc", 0.0, verdict, agent.samples, None))
        assert len(standby.bodies) == 2
        assert AgentReport.model_validate(json.loads(standby.bodies[-1])).seq == 3


# --- the loop ---------------------------------------------------------------------------------------------------
def test_run_sweeps_on_an_event_and_stops(gpus: FakeGpus) -> None:
    slurm = StubSlurm()
    cfg = config(gpus, sweep_interval_s=3600, event_poll_s=0.02)
    backend = FakeBackend(gpus.directory)
    agent = Agent(cfg, backend, slurm=slurm)  # type: ignore[arg-type]
    thread = threading.Thread(target=agent.run, daemon=True)  # not the main thread: no signal handlers
    thread.start()
    try:
        deadline = time.monotonic() + 5
        while agent.collector.stats.sweeps < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        gpus.fall_off_bus(0)  # the sweep interval is an hour: only the event can trigger this sweep
        while not slurm.actions() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [c[0] for c in slurm.actions()] == ["drain"]
        assert "XID 79" in slurm.actions()[0][2]
    finally:
        agent.stop()
        thread.join(timeout=5)
    assert not thread.is_alive()


# --- Slurm over a stub transport --------------------------------------------------------------------------------
META = {"plugin": {"type": "openapi/v0.0.38", "name": "Slurm OpenAPI v0.0.38"},
        "Slurm": {"version": {"major": 22, "micro": 8, "minor": 5}, "release": "22.05.8"}}  # fmt: skip
XID_REASON = "ha-ops: GPU5 xid: XID 79: GPU has fallen off the bus (+1 more)"


def node_record(name: str = "gpu3", state: str | list[str] = "idle", flags: tuple[str, ...] = ("DRAIN",),
                reason: str = XID_REASON) -> dict[str, Any]:  # fmt: skip
    """A node as Slurm 22.05's `sinfo --json` describes it (fields trimmed from the lab's)."""
    return {"architecture": "x86_64", "name": name, "hostname": name, "address": "10.77.0.16", "state": state,
            "state_flags": list(flags), "reason": reason, "reason_changed_at": 1796300000,
            "reason_set_by_user": "root", "partitions": ["gpu"], "cpus": 16, "real_memory": 65536, "gres": "gpu:8",
            "slurmd_version": "22.05.8"}  # fmt: skip


def sinfo_json(*records: dict[str, Any]) -> str:
    return json.dumps({"meta": META, "errors": [], "nodes": list(records or [node_record()])}, indent=2)


class StubTransport:
    name = "stub"

    def __init__(self, *results: CommandResult | Exception) -> None:
        self.results = list(results)
        self.calls: list[list[str]] = []

    def run(self, argv: Sequence[str], *, timeout: float = 30.0, check: bool = True, **_: Any) -> CommandResult:
        self.calls.append(list(argv))
        item = self.results.pop(0) if len(self.results) > 1 else self.results[0]
        if isinstance(item, Exception):
            raise item
        return item

    def read_file(self, path: str, timeout: float = 10.0) -> str:
        raise NotImplementedError

    def close(self) -> None:
        return None


def ok(stdout: str) -> CommandResult:
    return CommandResult(["scontrol"], 0, stdout, "")


def test_slurm_node_reads_sinfos_json() -> None:
    transport = StubTransport(ok(sinfo_json(node_record("gpu1", flags=()), node_record())))
    node = Slurm(transport).node("gpu3")  # type: ignore[arg-type]
    assert transport.calls == [["sinfo", "--json"]]
    assert (node.name, node.state, node.reason) == ("gpu3", "IDLE+DRAIN", XID_REASON)
    assert node.drained and node.drained_by_ha_ops


@pytest.mark.parametrize(
    ("state", "flags", "sinfo", "scontrol"),
    [
        ("idle", (), "idle", "IDLE"),
        ("mixed", (), "mixed", "MIXED"),
        ("idle", ("DRAIN",), "drained", "IDLE+DRAIN"),
        ("allocated", ("DRAIN",), "draining", "ALLOCATED+DRAIN"),
        ("idle", ("COMPLETING", "DRAIN"), "draining", "IDLE+COMPLETING+DRAIN"),
        ("idle", ("NOT_RESPONDING",), "idle*", "IDLE+NOT_RESPONDING"),
        ("down", ("NOT_RESPONDING",), "down*", "DOWN+NOT_RESPONDING"),
        ("down", ("DRAIN", "NOT_RESPONDING"), "drained*", "DOWN+DRAIN+NOT_RESPONDING"),
        (["IDLE", "DRAIN"], (), "drained", "IDLE+DRAIN"),  # Slurm 23.02 and later: one list
    ],
)
def test_slurm_states_are_the_words_sinfo_and_scontrol_print(
    state: str | list[str], flags: tuple[str, ...], sinfo: str, scontrol: str
) -> None:
    slurm = Slurm(StubTransport(ok(sinfo_json(node_record(state=state, flags=flags, reason="r")))))  # type: ignore[arg-type]
    assert slurm.node_states_and_reasons() == {"gpu3": (sinfo, "r")}
    assert slurm.node("gpu3").state == scontrol


def test_a_reason_written_like_other_fields_is_only_a_reason() -> None:
    """Parsed from `scontrol show node -o`, the reason `x [a@b] State=IDLE` made a drained node read as IDLE and
    `NodeName=n9` broke every read; in sinfo's %E lines a newline forged another node's line."""
    hostile = "x [a@b] State=IDLE NodeName=n9 Reason=none\ngpu4|idle|forged"
    slurm = Slurm(StubTransport(ok(sinfo_json(node_record(reason=hostile), node_record("gpu4", flags=("DRAIN",))))))  # type: ignore[arg-type]
    assert slurm.node("gpu3").state == "IDLE+DRAIN" and slurm.node("gpu3").reason == hostile
    assert slurm.node_states_and_reasons() == {"gpu3": ("drained", hostile), "gpu4": ("drained", XID_REASON)}


def test_slurm_node_unknown_or_unreadable_is_an_error() -> None:
    with pytest.raises(TransportError, match="gpu4"):
        Slurm(StubTransport(ok(sinfo_json()))).node("gpu4")  # type: ignore[arg-type]
    for answer in ("", "not json", "[1, 2]", '{"nodes": 5}'):
        with pytest.raises(TransportError, match="sinfo --json"):
            Slurm(StubTransport(ok(answer))).node("gpu3")  # type: ignore[arg-type]


def test_slurm_retries_then_raises_after_persistent_timeouts(monkeypatch: pytest.MonkeyPatch) -> None:
    sleeps: list[float] = []
    monkeypatch.setattr("ha_ops.schedulers.slurm.time.sleep", sleeps.append)
    transport = StubTransport(CommandTimeout(["sinfo", "--json"], 10.0))
    slurm = Slurm(transport, timeout=10.0, retries=2, retry_wait=0.5)  # type: ignore[arg-type]
    with pytest.raises(CommandTimeout):
        slurm.node("gpu3")
    assert len(transport.calls) == 3
    assert sleeps == [0.5, 0.5]  # a wait between attempts, none after the last


def test_slurm_retry_succeeds_after_a_transient_failure() -> None:
    transport = StubTransport(
        CommandTimeout(["sinfo"], 10.0), CommandFailed(["sinfo"], 1, "", "Unable to contact slurm controller"),
        ok(sinfo_json()),
    )  # fmt: skip
    node = Slurm(transport, retries=2, retry_wait=0.0).node("gpu3")  # type: ignore[arg-type]
    assert node.drained_by_ha_ops
    assert len(transport.calls) == 3


def test_slurm_drain_and_resume_commands() -> None:
    transport = StubTransport(ok(""))
    slurm = Slurm(transport)  # type: ignore[arg-type]
    slurm.drain("gpu3", "GPU1 temperature: 96 C " + "x" * 300)
    slurm.drain("gpu3", "ha-ops: already prefixed")
    slurm.resume("gpu3")
    first, second, third = transport.calls
    assert first[:4] == ["scontrol", "update", "NodeName=gpu3", "State=DRAIN"]
    reason = first[4].removeprefix("Reason=")
    assert reason.startswith("ha-ops: GPU1 temperature")
    assert len(reason) == 200
    assert second[4] == "Reason=ha-ops: already prefixed"
    assert third == ["scontrol", "update", "NodeName=gpu3", "State=RESUME"]


# --- the node condition on Kubernetes ---------------------------------------------------------------------------


def test_the_node_condition_is_written_on_each_change_and_refreshed_and_a_failed_write_is_tried_again(
    gpus: FakeGpus,
) -> None:
    clock, written, fail = Clock(), [], [0]

    def condition(verdict: Any) -> None:
        if fail[0]:
            fail[0] -= 1
            raise ConnectionRefusedError("API server down")
        written.append(verdict.state)

    cfg = config(gpus, slurm={"enabled": False}, kubernetes={"enabled": True, "refresh_s": 60})
    agent = Agent(cfg, FakeBackend(gpus.directory), clock=clock, condition=condition)  # type: ignore[arg-type]
    sweep(agent, 3)
    assert written == [HealthState.HEALTHY]  # once, not at every sweep
    gpus.fall_off_bus(1)
    fail[0] = 1
    sweep(agent)  # the change's write fails...
    assert written == [HealthState.HEALTHY]
    sweep(agent)  # ...and is made at the next sweep
    assert written == [HealthState.HEALTHY, HealthState.UNHEALTHY]
    clock.tick(61)
    sweep(agent)
    assert written[-1] == HealthState.UNHEALTHY and len(written) == 3  # refreshed


class FixedJitter(random.Random):
    def uniform(self, a: float, b: float) -> float:
        return min(b, 1.5)


@pytest.mark.parametrize("controller_hears", [True, False])
def test_an_unhealthy_condition_waits_its_jitter_after_an_accepted_report_and_not_otherwise(
    gpus: FakeGpus, controller_hears: bool
) -> None:
    """The report first; then, if a controller accepted it (its cordon is on the way), the condition after a random
    0-unhealthy_jitter_s (here 1.5 s), so that a rack's agents do not all write to the API server with the cordons.
    With no controller to hear it, the condition is the only word: written at once. Healthy again: at once."""
    clock, events = Clock(), []

    def poster(report: Any) -> None:
        if not controller_hears:
            raise ConnectionRefusedError("no controller")
        events.append(("report", report.state))

    cfg = config(gpus, slurm={"enabled": False}, kubernetes={"enabled": True, "unhealthy_jitter_s": 2.0})
    agent = Agent(cfg, FakeBackend(gpus.directory), poster=poster, clock=clock,  # type: ignore[arg-type]
                  condition=lambda verdict: events.append(("condition", verdict.state)), rng=FixedJitter())  # fmt: skip
    sweep(agent)
    events.clear()
    gpus.fall_off_bus(1)
    sweep(agent)
    if not controller_hears:
        assert events == [("condition", HealthState.UNHEALTHY)]
        return
    assert events == [("report", HealthState.UNHEALTHY)]  # the condition waits
    clock.tick(1.0)
    sweep(agent)
    assert ("condition", HealthState.UNHEALTHY) not in events
    clock.tick(0.6)
    sweep(agent)
    assert events[-1] == ("condition", HealthState.UNHEALTHY)
    gpus.clear()
    sweep(agent)
    assert events[-2:] == [("report", HealthState.HEALTHY), ("condition", HealthState.HEALTHY)]


def test_the_agents_healthz_follows_its_own_sweeps(gpus: FakeGpus, monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent's /healthz as the kubelet probes it (issue 44, finding 11): wired to the agent's own sweeps, not
    only to the server: 200 once it sweeps, 503 after the stall time without one, 200 again after the next."""
    import socket
    import urllib.error
    import urllib.request

    import ha_ops.health.agent as agent_module

    monkeypatch.setattr(agent_module, "MIN_STALL_S", 0.5)  # (a minute in a real agent)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    agent = make_agent(gpus, metrics={"address": "127.0.0.1", "port": port}, sweep_interval_s=0.01)

    def healthz() -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as answer:
                return int(answer.status)
        except urllib.error.HTTPError as exc:
            return exc.code

    server = agent.start_metrics()
    try:
        sweep(agent)
        assert healthz() == 200
        time.sleep(1.0)  # no sweep for twice the stall time
        assert healthz() == 503
        sweep(agent)
        assert healthz() == 200
    finally:
        server.shutdown()  # type: ignore[union-attr]
        server.server_close()  # type: ignore[union-attr]
