"""The agent's /healthz (issue 44, finding 11: the agent had no probes): alive while it sweeps, 503 once no sweep has
ended within the stall time, over a real HTTP server; every other path is still the metrics."""

from __future__ import annotations

import urllib.error
import urllib.request

from prometheus_client import CollectorRegistry

from ha_ops.health.exporter import AgentCollector
from ha_ops.health.serving import serve, sweeping


def fetch(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_alive_from_the_start_until_no_sweep_ends_within_the_stall_time() -> None:
    now = [100.0]
    last: list[float | None] = [None]
    alive = sweeping(lambda: last[0], started=100.0, stall_s=60.0, clock=lambda: now[0])
    assert alive()  # just started, no sweep yet
    now[0] = 161.0
    assert not alive()  # a minute and more without a first sweep
    last[0] = 160.0
    assert alive()
    now[0] = 219.0
    assert alive()
    now[0] = 221.0
    assert not alive()  # the last sweep ended 61 s ago


def test_healthz_and_metrics_are_served_on_the_agents_port() -> None:
    collector = AgentCollector("gpu1")
    registry = CollectorRegistry()
    registry.register(collector)
    state = {"alive": True}
    server = serve("127.0.0.1", 0, registry, lambda: state["alive"])
    try:
        port = server.server_address[1]
        assert fetch(port, "/healthz") == (200, "sweeping\n")
        state["alive"] = False
        status, body = fetch(port, "/healthz")
        assert status == 503 and "no sweep" in body
        status, body = fetch(port, "/metrics")
        assert status == 200 and "ha_ops_agent_sweeps_total" in body
    finally:
        server.shutdown()
        server.server_close()


def test_a_sweep_marks_the_agent_alive() -> None:
    collector = AgentCollector("gpu1")
    assert collector.stats.last_sweep_at is None
    collector.stats.observe_sweep(0.01)
    assert collector.stats.last_sweep_at is not None
