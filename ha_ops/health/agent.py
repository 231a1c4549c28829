"""The node agent: NVML events plus a periodic sweep -> checks -> verdict -> metrics, and on a change either a
Slurm drain/resume or a report to the remediation controller.

Reporting to controllers, the agent still does not depend on that one path: when no controller has accepted a report
for `fallback_after_s` (both down, or cut off from this node) an unhealthy node is drained in Slurm by the agent, as
local defence in depth. It never resumes such a drain itself: the controller adopts it and returns the node through
its repair ladder.

The agent never drains because of its own trouble: a reading it cannot take makes the GPU "unknown", and
"unknown" neither drains nor resumes. It only resumes nodes it drained itself (reason prefix `ha-ops:`).
"""

from __future__ import annotations

import json
import logging
import math
import random
import signal
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ha_ops.gpu.backend import GpuBackend
from ha_ops.gpu.types import GpuEvent, GpuSample
from ha_ops.health.checks import EventLedger, evaluate, stable_reason
from ha_ops.health.config import MAX_HEARTBEAT_S, AgentConfig
from ha_ops.health.exporter import AgentCollector
from ha_ops.health.model import HealthState, Verdict
from ha_ops.health.report import AgentReport, build_report
from ha_ops.health.serving import serve, sweeping
from ha_ops.schedulers.base import AGENT_REASON_PREFIX
from ha_ops.schedulers.slurm import Slurm
from ha_ops.util.atomic import write_atomic

# The kubelet's liveness probe (/healthz) fails once no sweep has ended for this many intervals, or a minute.
STALL_SWEEPS = 10
MIN_STALL_S = 60.0

log = logging.getLogger(__name__)

# Sends a report to the controllers; returns the accepting one's answer (a mapping; anything else is ignored).
Poster = Callable[[AgentReport], object]
# Writes the node's condition from a verdict (on Kubernetes: GpuHealthy); raises when it cannot.
ConditionWriter = Callable[[Verdict], None]


@dataclass
class AgentState:
    """What must survive an agent restart: whether this agent drained the node."""

    drained_by_agent: bool = False
    reason: str = ""

    @classmethod
    def load(cls, path: Path | None) -> AgentState:
        if path is None or not path.exists():
            return cls()
        try:
            data = json.loads(path.read_text())
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
            return cls(bool(data.get("drained_by_agent")), str(data.get("reason", "")))
        except (OSError, ValueError) as exc:
            log.warning("agent state %s unreadable (%s); starting without it", path, exc)
            return cls()

    def save(self, path: Path | None) -> None:
        if path is not None:
            write_atomic(path, json.dumps({"drained_by_agent": self.drained_by_agent, "reason": self.reason}))


class Agent:
    def __init__(
        self,
        config: AgentConfig,
        backend: GpuBackend,
        slurm: Slurm | None = None,
        poster: Poster | None = None,
        clock: Callable[[], float] = time.time,
        condition: ConditionWriter | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config
        self.backend = backend
        self.slurm = slurm if config.slurm.enabled else None
        self.poster = poster
        self.clock = clock
        self.condition = condition
        self._condition_written_at: float | None = None  # None: to write (never written, or the last write failed)
        self._condition_due: float | None = None  # a write waiting for its time (unhealthy_jitter_s)
        self._rng = rng or random.Random()
        self.ledger = EventLedger()
        self.previous: dict[int, GpuSample] = {}
        self.collector = AgentCollector(config.node)
        self.verdict: Verdict | None = None
        self.samples: list[GpuSample] = []
        self.state = AgentState.load(config.state_file)
        self.collector.stats.drained_by_agent = self.state.drained_by_agent
        self.healthy_streak = 0
        self.agent_id = uuid.uuid4().hex[:12]
        self.seq = 0
        self._last_report_at = 0.0
        # The controller asks a large fleet to beat less often (remediation/heartbeats.py); never more often.
        self._heartbeat_s = config.controller.heartbeat_s
        self._report_pending = False
        self._unaccepted_since: float | None = None  # the first report no controller accepted, since the last one did
        self._pending: list[GpuEvent] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._keep_events_s = max(config.thresholds.app_xid_window_s, config.thresholds.warning_xid_hold_s)

    # --- one sweep ------------------------------------------------------------------------------------------
    def read_samples(self) -> list[GpuSample]:
        try:
            count = self.backend.device_count()
        except Exception as exc:
            log.error("cannot count GPUs: %s", exc)
            return []
        samples = []
        for index in range(count):
            try:
                samples.append(self.backend.sample(index))
            except Exception as exc:  # a backend bug or an NVML failure must not stop the agent
                log.error("GPU %d: read failed: %s", index, exc)
                samples.append(GpuSample.unreadable(index, f"read failed: {exc}", time.time()))
        return samples

    @staticmethod
    def _valid_events(events: list[GpuEvent], count: int) -> list[GpuEvent]:
        valid = [e for e in events if 0 <= e.gpu < count]
        for event in events:
            if not 0 <= event.gpu < count:
                log.warning("ignoring an event for GPU %d: this node has %d GPUs (%s)", event.gpu, count, event)
        return valid

    def sweep(self, events: list[GpuEvent] | None = None) -> Verdict:
        started = time.perf_counter()
        now = self.clock()
        samples = self.read_samples()
        events = self._valid_events(events or [], len(samples))
        counts = self.collector.stats.events
        for event in events:
            counts[(event.gpu, event.kind, event.xid)] += 1
        # Logged once per GPU and XID while the ledger holds it: a storm of 800,000 identical XIDs is one line (the
        # count is in the finding and the metric), not 800,000.
        new = self.ledger.record(events, now, self._keep_events_s)
        for event in new:
            log.info("event: GPU%d %s %s %s", event.gpu, event.kind, event.xid or "", event.detail)
        if len(events) > len(new):
            log.debug("%d repeated event(s) counted, not logged", len(events) - len(new))
        verdict = evaluate(samples, self.previous, self.ledger, now, self.config.thresholds)
        if not samples:
            verdict = Verdict(HealthState.UNKNOWN, verdict.action, verdict.findings, ("no GPU could be read",))
        self.previous = {s.index: s for s in samples}
        self.samples = samples
        stats = self.collector.stats
        stats.sweeps += 1
        stats.read_errors += sum(len(s.errors) for s in samples if not s.lost)
        for finding in verdict.findings:
            stats.findings[(finding.check, str(finding.severity))] += 1
        # (Event counts in the reason are no change: an XID storm must not send a report per sweep.)
        changed = self.verdict is None or (verdict.state, stable_reason(verdict.reason)) != (
            self.verdict.state,
            stable_reason(self.verdict.reason),
        )
        if changed:
            log.info("verdict: %s (%s) %s", verdict.state, verdict.action, verdict.reason)
        self.verdict = verdict
        self._act(verdict, changed, now)
        stats.observe_sweep(time.perf_counter() - started)
        stats.drained_by_agent = self.state.drained_by_agent
        self.collector.update(samples, verdict)
        return verdict

    # --- acting on the verdict ------------------------------------------------------------------------------
    def _act(self, verdict: Verdict, changed: bool, now: float) -> None:
        # The report first: it is what takes the node out of service. The node's condition follows: when a rack
        # fails at once, the API server is busy, and the cordons must not queue behind the conditions.
        if self.poster is not None:
            self._report(verdict, changed, now)
        elif self.slurm is not None:
            self._slurm(verdict)
        if self.condition is not None:
            self._write_condition(verdict, changed, now)

    def _write_condition(self, verdict: Verdict, changed: bool, now: float) -> None:
        written, cfg = self._condition_written_at, self.config.kubernetes
        if changed:
            # A fault a controller has heard of (its report accepted): the controller's cordon goes to the API
            # server first, and the condition after a random wait, so that a rack's agents do not all write at once.
            heard = self.poster is not None and not self._report_pending
            wait = cfg.unhealthy_jitter_s if verdict.state == HealthState.UNHEALTHY and heard else 0.0
            self._condition_due = now + (self._rng.uniform(0.0, wait) if wait > 0 else 0.0)
        elif written is None or now - written >= cfg.refresh_s:
            self._condition_due = now if self._condition_due is None else min(self._condition_due, now)
        if self._condition_due is None or now < self._condition_due:
            return
        try:
            assert self.condition is not None
            self.condition(verdict)
            self._condition_written_at, self._condition_due = now, None
        except Exception as exc:  # the API unreachable: the controller still hears the report; try next sweep
            self._condition_written_at = None
            log.warning("node condition not written: %s", exc)

    def _report(self, verdict: Verdict, changed: bool, now: float) -> None:
        due = now - self._last_report_at >= self._heartbeat_s
        if not (changed or due or self._report_pending):
            return
        self.seq += 1
        driver = None
        try:
            driver = self.backend.driver_version()
        except Exception as exc:
            log.debug("driver version unreadable: %s", exc)
        report = build_report(self.config.node, self.seq, self.agent_id, now, verdict, self.samples, driver)
        try:
            assert self.poster is not None
            answer = self.poster(report)
            self._heartbeat_s = told_heartbeat(answer, self.config.controller.heartbeat_s)
            self._last_report_at = now
            self._report_pending = False
            self._unaccepted_since = None
            if self.state.drained_by_agent:
                log.warning("a controller accepts reports again: it adopts the drain this agent made")
                self.state = AgentState(False, "")
                self.state.save(self.config.state_file)
        except Exception as exc:
            # Kept pending: the next sweep sends the then-current verdict.
            self._report_pending = True
            log.warning("report to the controller failed: %s", exc)
            if self._unaccepted_since is None:
                self._unaccepted_since = now
            self._fall_back(verdict, now)

    def _fall_back(self, verdict: Verdict, now: float) -> None:
        after = self.config.controller.fallback_after_s
        if after is None or self.slurm is None or self._unaccepted_since is None:
            return
        if verdict.state == HealthState.UNHEALTHY and now - self._unaccepted_since >= after:
            if not self.state.drained_by_agent:
                log.error("no controller accepted a report for %.0f s: draining in Slurm myself", after)
            self._slurm(verdict)

    def _slurm(self, verdict: Verdict) -> None:
        assert self.slurm is not None
        node = self.config.node
        try:
            if verdict.state == HealthState.UNHEALTHY:
                self.healthy_streak = 0
                if self.state.drained_by_agent:
                    return
                current = self.slurm.node(node)
                if current.drained and not current.drained_by_ha_ops:
                    log.info("%s is already drained by someone else (%s); leaving it", node, current.reason)
                    return
                if not current.drained:
                    self.slurm.drain(node, f"{AGENT_REASON_PREFIX} {verdict.reason}")
                    log.warning("drained %s: %s", node, verdict.reason)
                self.state = AgentState(True, verdict.reason)
                self.state.save(self.config.state_file)
            elif verdict.state in (HealthState.HEALTHY, HealthState.DEGRADED):
                self.healthy_streak += 1
                cfg = self.config.slurm
                if (
                    self.state.drained_by_agent
                    and cfg.auto_resume
                    and self.healthy_streak >= cfg.resume_after_healthy_sweeps
                ):
                    current = self.slurm.node(node)
                    if current.drained_by_ha_ops:
                        self.slurm.resume(node)
                        log.warning("resumed %s: healthy for %d sweeps", node, self.healthy_streak)
                    self.state = AgentState(False, "")
                    self.state.save(self.config.state_file)
            else:
                # Unknown: the agent cannot tell; it neither drains nor resumes.
                self.healthy_streak = 0
        except Exception as exc:
            log.error("Slurm action for %s failed (will retry next sweep): %s", node, exc)

    # --- the loop -------------------------------------------------------------------------------------------
    def _event_loop(self) -> None:
        while not self._stop.is_set():
            try:
                events = self.backend.wait_events(self.config.event_poll_s)
            except Exception as exc:
                log.error("event wait failed: %s; the sweep still runs", exc)
                self._stop.wait(1.0)
                continue
            if events:
                with self._lock:
                    self._pending.extend(events)
                self._wake.set()

    def _take_events(self) -> list[GpuEvent]:
        with self._lock:
            events, self._pending = self._pending, []
        return events

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def start_metrics(self) -> object | None:
        """Metrics and /healthz (health/serving.py): alive while a sweep ended within ten sweep intervals, and never
        under a minute, so that one slow NVML read is not a restart."""
        if self.config.metrics.port == 0:
            return None
        from prometheus_client import CollectorRegistry  # only the long-running agent serves

        registry = CollectorRegistry()
        registry.register(self.collector)
        stall_s = max(MIN_STALL_S, STALL_SWEEPS * self.config.sweep_interval_s)
        alive = sweeping(lambda: self.collector.stats.last_sweep_at, time.monotonic(), stall_s)
        return serve(self.config.metrics.address, self.config.metrics.port, registry, alive)

    def run(self, max_sweeps: int | None = None) -> None:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: self.stop())
        reporting = self.config.controller
        if reporting.urls and reporting.tls is None:
            log.warning("reporting to the controllers over plain HTTP (insecure: true): they cannot tell this "
                        "agent's reports from anyone's")  # fmt: skip
        server = self.start_metrics()
        events = threading.Thread(target=self._event_loop, name="gpu-events", daemon=True)
        events.start()
        interval = self.config.sweep_interval_s
        next_sweep = time.monotonic()
        sweeps = 0
        try:
            while not self._stop.is_set():
                self._wake.wait(max(0.0, next_sweep - time.monotonic()))
                self._wake.clear()
                if self._stop.is_set():
                    break
                try:
                    self.sweep(self._take_events())
                except Exception:
                    log.exception("sweep failed; the agent keeps running")
                sweeps += 1
                if max_sweeps is not None and sweeps >= max_sweeps:
                    break
                if time.monotonic() >= next_sweep:
                    next_sweep = time.monotonic() + interval
        finally:
            self._stop.set()
            events.join(timeout=2 * self.config.event_poll_s + 1)
            if server is not None:
                server.shutdown()  # type: ignore[attr-defined]
            self.backend.close()


def told_heartbeat(answer: object, own_s: float) -> float:
    """The heartbeat a controller's answer asks for: never under the agent's own, never over MAX_HEARTBEAT_S; the
    agent's own where the answer says none (an older controller)."""
    told = answer.get("heartbeat_s") if isinstance(answer, dict) else None
    if isinstance(told, bool) or not isinstance(told, int | float) or not math.isfinite(told):
        return own_s
    return min(MAX_HEARTBEAT_S, max(own_s, float(told)))
