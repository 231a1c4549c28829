"""The agent as a service: running, serving metrics for 8 fake GPUs, and seeing a fault injected into them."""

import json
import re
import time

testinfra_hosts = ["podman://hao-ha-ops-agent"]

VENV = "/opt/ha-ops"
CONFIG = "/etc/ha-ops/agent.yaml"
FAKE_DIR = "/var/lib/ha-ops/fake-gpus"
METRICS = "http://127.0.0.1:9426/metrics"
FETCH = f"python3 -c \"import urllib.request; print(urllib.request.urlopen('{METRICS}', timeout=3).read().decode())\""
SAMPLE = re.compile(r"^(\w+)\{([^}]*)\} (\S+)$")


def metrics(host):
    """Every sample as (name, labels, value)."""
    out = host.check_output(FETCH)
    samples = []
    for line in out.splitlines():
        m = SAMPLE.match(line)
        if m:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
            samples.append((m.group(1), labels, float(m.group(3))))
    return samples


def states(samples, name):
    """{gpu or node: state} for the states set to 1 in a health family."""
    key = "gpu" if name == "ha_ops_gpu_health" else "node"
    return {labels[key]: labels["state"] for n, labels, v in samples if n == name and v == 1.0}


def wait_for(host, predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            samples = metrics(host)
        except AssertionError:  # not listening yet (the service was just restarted)
            samples = []
        if samples and predicate(samples):
            return samples
        if time.monotonic() > deadline:
            raise AssertionError(f"metrics did not reach the expected state in {timeout:g} s: {samples[-40:]}")
        time.sleep(0.5)


def all_healthy(samples):
    gpus = states(samples, "ha_ops_gpu_health")
    return (
        len(gpus) == 8
        and set(gpus.values()) == {"healthy"}
        and set(states(samples, "ha_ops_node_health").values()) == {"healthy"}
    )


def test_service_is_enabled_and_running(host):
    service = host.service("ha-ops-agent")
    assert service.is_enabled
    assert service.is_running


def test_unit_restarts_always_and_keeps_the_gpu_devices_visible(host):
    props = dict(
        line.split("=", 1)
        for line in host.check_output(
            "systemctl show ha-ops-agent -p Restart -p ProtectSystem -p PrivateDevices -p DevicePolicy "
            "-p NoNewPrivileges -p ExecStart -p After"
        ).splitlines()
    )
    assert props["Restart"] == "always"
    assert props["ProtectSystem"] == "strict"
    assert props["NoNewPrivileges"] == "yes"
    assert props["PrivateDevices"] == "no"  # NVML needs /dev/nvidia*
    assert props["DevicePolicy"] == "auto"
    assert f"{VENV}/bin/ha-ops agent run --config {CONFIG}" in props["ExecStart"].replace(" ; ", " ")
    assert "network-online.target" in props["After"]


def test_config_is_valid_for_the_agent_and_as_rendered(host):
    out = host.check_output(f"{VENV}/bin/ha-ops agent check-config {CONFIG}")
    assert "ok" in out
    text = host.file(CONFIG).content_string
    assert "backend: fake" in text
    assert f'fake_dir: "{FAKE_DIR}"' in text
    assert "enabled: false" in text  # Slurm reporting off
    assert '"pcie_replays_per_minute": 50' in text
    # Mutual TLS, the certificate renewed through the controllers: its folder writable by the hardened service.
    assert '"cert_file": "/etc/ha-ops/pki/agent-node.crt"' in text and "renew: true" in text
    unit = host.check_output("systemctl show ha-ops-agent -p ReadWritePaths --value")
    assert "/etc/ha-ops/pki" in unit


def test_a_bad_config_is_refused_naming_the_field(host):
    host.check_output(f"sed 's/port: 9426/port: 99999/' {CONFIG} > /tmp/bad.yaml")
    cmd = host.run(f"{VENV}/bin/ha-ops agent check-config /tmp/bad.yaml")
    assert cmd.rc == 2
    assert "metrics.port" in cmd.stderr


def test_eight_fake_gpus_were_created(host):
    for i in range(8):
        assert host.file(f"{FAKE_DIR}/gpu{i}.json").exists
    assert not host.file(f"{FAKE_DIR}/gpu8.json").exists


def test_metrics_show_eight_healthy_gpus_and_a_healthy_node(host):
    samples = wait_for(host, all_healthy)
    gpus = states(samples, "ha_ops_gpu_health")
    assert sorted(gpus, key=int) == [str(i) for i in range(8)]
    lost = [v for n, labels, v in samples if n == "ha_ops_gpu_lost"]
    assert lost == [0.0] * 8


def test_health_check_json_works_in_the_container(host):
    cmd = host.run(f"{VENV}/bin/ha-ops health check --json --config {CONFIG}")
    assert cmd.rc == 0, cmd.stderr
    data = json.loads(cmd.stdout)
    assert data["state"] == "healthy"
    assert len(data["gpus"]) == 8


def test_an_injected_xid_79_makes_the_node_unhealthy_within_seconds(host):
    wait_for(host, all_healthy)
    inject = (
        f'{VENV}/bin/python -c "from pathlib import Path; from ha_ops.gpu.fake import FakeGpus; '
        f"FakeGpus(Path('{FAKE_DIR}')).fall_off_bus(5)\""
    )
    try:
        started = time.monotonic()
        host.check_output(inject)
        samples = wait_for(host, lambda s: set(states(s, "ha_ops_node_health").values()) == {"unhealthy"}, 10.0)
        elapsed = time.monotonic() - started
        assert elapsed < 10.0
        assert states(samples, "ha_ops_gpu_health")["5"] == "unhealthy"
        assert [v for n, labels, v in samples if n == "ha_ops_gpu_lost" and labels["gpu"] == "5"] == [1.0]
        assert any(n == "ha_ops_gpu_events_total" and labels["xid"] == "79" and v >= 1 for n, labels, v in samples), (
            "the XID event was not counted"
        )
        check = host.run(f"{VENV}/bin/ha-ops health check --json --config {CONFIG}")
        assert check.rc == 1
        assert json.loads(check.stdout)["state"] == "unhealthy"
    finally:
        # A GPU reset (the remediation step) clears the fault; the node is healthy again.
        host.check_output(f"{VENV}/bin/ha-ops gpu reset --all --backend fake --fake-dir {FAKE_DIR}")
    wait_for(host, all_healthy)


def test_the_service_comes_back_after_it_is_killed(host):
    before = host.check_output("systemctl show ha-ops-agent -p MainPID --value")
    host.check_output("systemctl kill --signal=SIGKILL ha-ops-agent")
    deadline = time.monotonic() + 15
    while True:
        after = host.check_output("systemctl show ha-ops-agent -p MainPID --value")
        if after not in ("0", before) and host.service("ha-ops-agent").is_running:
            break
        assert time.monotonic() < deadline, "ha-ops-agent was not restarted"
        time.sleep(0.5)
    wait_for(host, all_healthy)
