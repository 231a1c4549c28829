"""The agent on every lab GPU node, against its fake GPUs, draining and resuming in the real Slurm."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from ha_ops.gpu.types import GpuEvent
from ha_ops.lab import monitoring
from ha_ops.lab.cluster import Lab
from ha_ops.lab.http import http_get
from ha_ops.schedulers.slurm import Slurm
from ha_ops.util.wait import wait_for

pytestmark = pytest.mark.lab


def agent_metrics(lab: Lab, node: str) -> str:
    address = lab.ctx.layout.node(node).address
    status, body = http_get(lab.ctx.netns(node), f"http://{address}:{lab.spec.monitoring.agent_port}/metrics")
    assert status == 200
    return body.decode()


def metric(text: str, name: str, **labels: str) -> float | None:
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


@pytest.fixture(scope="module", autouse=True)
def agents_drain_themselves(lab: Lab) -> Iterator[None]:
    """These tests are about the agent alone: controllers stopped, agents drain in Slurm themselves."""
    lab.use_controllers(False)
    yield
    lab.use_controllers(True)


@pytest.fixture
def slurm(lab: Lab) -> Slurm:
    return Slurm(lab.transport("gpu1"))


@pytest.fixture(autouse=True)
def healthy_fleet(lab: Lab, slurm: Slurm) -> Iterator[None]:
    yield
    for node in ("gpu1", "gpu2", "gpu3", "gpu4"):
        lab.node(node).gpus().clear()
    for node in ("gpu1", "gpu2", "gpu3", "gpu4"):
        wait_for(f"{node} back in service", lambda n=node: not slurm.node(n).drained, timeout=15, interval=0.1)
    # A resumed node shows idle* until slurmctld has pinged it again.
    wait_for("every GPU node idle and responding", lambda: not lab.slurm_problems(), timeout=20, interval=0.2)


def test_xid79_drains_the_node_naming_gpu_and_fault_and_the_metric_shows_it(lab: Lab, slurm: Slurm) -> None:
    lab.node("gpu3").gpus().fall_off_bus(5)
    node = wait_for("gpu3 drained", lambda: (n := slurm.node("gpu3")).drained and n, timeout=5, interval=0.05)
    # The sweep may read the GPU gone before the XID 79 event arrives (seen in CI): the same fault either way.
    assert node.reason.startswith(("ha-ops: agent: GPU5 xid: XID 79", "ha-ops: agent: GPU5 gpu_lost")), node.reason
    assert "fallen off the bus" in node.reason
    text = agent_metrics(lab, "gpu3")
    assert metric(text, "ha_ops_node_health", state="unhealthy") == 1.0
    assert metric(text, "ha_ops_gpu_lost", gpu="5") == 1.0
    assert metric(text, "ha_ops_gpu_health", gpu="5", state="unhealthy") == 1.0
    # Prometheus scrapes it (1 s interval) and the alert rule fires.
    query = "/api/v1/query?query=ha_ops_node_health%7Bstate%3D%22unhealthy%22%7D"

    def prometheus_sees_it() -> bool:
        _, body = monitoring.request(lab.ctx, "prometheus", query)
        results = json.loads(body)["data"]["result"]
        return any(r["metric"]["node"] == "gpu3" and r["value"][1] == "1" for r in results)

    wait_for("Prometheus sees gpu3 unhealthy", prometheus_sees_it, timeout=10, interval=0.2)
    # Others untouched.
    assert not slurm.node("gpu2").drained


def test_one_application_xid_does_not_drain(lab: Lab, slurm: Slurm) -> None:
    gpus = lab.node("gpu2").gpus()
    gpus.inject_xid(1, 13)
    wait_for(
        "the event counted", lambda: metric(agent_metrics(lab, "gpu2"), "ha_ops_gpu_events_total", xid="13"), timeout=5
    )
    time.sleep(1.5)  # three sweeps: a drain would have happened by now
    assert not slurm.node("gpu2").drained
    assert metric(agent_metrics(lab, "gpu2"), "ha_ops_node_health", state="healthy") == 1.0


def test_repeated_application_xids_on_one_gpu_drain(lab: Lab, slurm: Slurm) -> None:
    gpus = lab.node("gpu2").gpus()
    for _ in range(3):
        gpus.inject_xid(6, 31)
    node = wait_for("gpu2 drained", lambda: (n := slurm.node("gpu2")).drained and n, timeout=5, interval=0.05)
    assert "GPU6 xid_repeated: XID 31 x3" in node.reason


def test_temperature_above_slowdown_is_a_finding_and_clearing_it_is_healthy_again(lab: Lab, slurm: Slurm) -> None:
    gpus = lab.node("gpu4").gpus()
    gpus.overheat(2, 91.0)

    def finding() -> float | None:
        return metric(agent_metrics(lab, "gpu4"), "ha_ops_current_findings", check="temperature", severity="warning")

    assert wait_for("temperature finding", finding, timeout=5, interval=0.1) == 1.0
    assert metric(agent_metrics(lab, "gpu4"), "ha_ops_node_health", state="degraded") == 1.0
    assert not slurm.node("gpu4").drained  # a warning watches, it does not drain
    gpus.clear(2)
    wait_for("gpu4 healthy", lambda: metric(agent_metrics(lab, "gpu4"), "ha_ops_node_health", state="healthy") == 1.0,
             timeout=5, interval=0.1)  # fmt: skip


def test_cleared_fault_resumes_a_node_the_agent_drained(lab: Lab, slurm: Slurm) -> None:
    gpus = lab.node("gpu1").gpus()
    gpus.double_bit_ecc(0)
    node = wait_for("gpu1 drained", lambda: (n := slurm.node("gpu1")).drained and n, timeout=5, interval=0.05)
    # A double-bit error is an XID 48 event and a count of uncorrectable errors: the sweep may read the count before
    # the event arrives (seen in CI), and either names the same fault on the same GPU.
    assert "GPU0" in node.reason and ("XID 48" in node.reason or "ecc_uncorrectable" in node.reason), node.reason
    gpus.clear(0)
    wait_for("gpu1 resumed", lambda: not slurm.node("gpu1").drained, timeout=10, interval=0.1)


def test_agent_never_resumes_a_node_someone_else_drained(lab: Lab, slurm: Slurm) -> None:
    lab.node("gpu1").run(["scontrol", "update", "NodeName=gpu4", "State=DRAIN", "Reason=operator maintenance"])
    try:
        time.sleep(1.5)
        node = slurm.node("gpu4")
        assert node.drained and node.reason == "operator maintenance"
    finally:
        slurm.resume("gpu4")


def test_corrupt_state_and_read_errors_make_the_gpu_unknown_never_drain(lab: Lab, slurm: Slurm) -> None:
    gpus = lab.node("gpu3").gpus()
    (gpus.directory / "gpu7.json").write_text("{ this is not json")
    gpus.update(2, fail_reads=["temperature_gpu_c", "ecc_volatile_uncorrected"])
    with pytest.raises(IndexError):
        gpus.inject_xid(42, 79)  # the injector refuses a GPU that does not exist ...
    gpus.emit(GpuEvent(42, "xid", xid=79, at=time.time()))  # ... and the agent ignores such an event
    wait_for("gpu3 unknown", lambda: metric(agent_metrics(lab, "gpu3"), "ha_ops_node_health", state="unknown") == 1.0,
             timeout=5, interval=0.1)  # fmt: skip
    time.sleep(1.0)
    assert not slurm.node("gpu3").drained
    assert lab.node("gpu3").is_running("agent")
    text = agent_metrics(lab, "gpu3")
    assert metric(text, "ha_ops_gpu_health", gpu="7", state="unknown") == 1.0
    assert metric(text, "ha_ops_gpu_health", gpu="0", state="healthy") == 1.0
    assert "GPU 42" in lab.node("gpu3").logs("agent", 50)


def test_health_check_command_on_a_node(lab: Lab) -> None:
    from ha_ops.lab.agents import config_path

    cmd = [lab_python(), "-m", "ha_ops", "health", "check", "--config", str(config_path(lab.ctx, "gpu2")), "--json"]
    ok = lab.node("gpu2").run(cmd, check=False, timeout=30)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["state"] == "healthy"
    lab.node("gpu2").gpus().overheat(3, 97.0)
    bad = lab.node("gpu2").run(cmd, check=False, timeout=30)
    assert bad.returncode == 1
    assert json.loads(bad.stdout)["findings"][0]["check"] == "temperature"


def lab_python() -> str:
    import sys

    return sys.executable
