"""The node after the upgrade, a rollback, a forward switch and a failed driver: still on the good version."""

import json

testinfra_hosts = ["podman://hao-gpu-driver", "podman://hao-gpu-driver-archive"]


def fact(host):
    return json.loads(host.file("/etc/ansible/facts.d/gpu_driver.fact").content_string)


def test_the_active_slot_runs_the_upgraded_driver(host):
    assert host.check_output("readlink /opt/ha-ops/gpu-driver/active") == "/opt/ha-ops/gpu-driver/slot-b"
    assert host.check_output("readlink /opt/ha-ops/gpu-driver/slot-b") == "/usr/lib/nvidia-driver/570.86.15"
    out = host.check_output("/opt/ha-ops/gpu-driver/active/bin/nvidia-smi --query-gpu=driver_version --format=csv")
    assert set(out.split()) == {"570.86.15"}


def test_the_fact_records_active_slot_and_the_failure(host):
    state = fact(host)
    assert state["active_slot"] == "b"
    assert state["active_version"] == "570.86.15"
    assert state["last_failure"]["version"] == "575.51.02"
    assert "exit 9" in state["last_failure"]["reason"]
    # The failed driver's slot was emptied; there is nothing to roll back to but the running version.
    assert state["slots"] == {"a": None, "b": "570.86.15"}
    assert state["previous_slot"] is None


def test_the_good_driver_is_held_and_the_others_are_gone(host):
    if host.backend.name == "hao-gpu-driver-archive":
        assert sorted(host.file("/usr/lib/nvidia-driver").listdir()) == ["570.86.15"]
        assert host.run("dpkg --get-selections 'nvidia-driver-*'").stdout.strip() == ""
        return
    selections = host.check_output("dpkg --get-selections 'nvidia-driver-*'")
    assert [line.split() for line in selections.splitlines()] == [["nvidia-driver-570.86.15", "hold"]]
    assert not host.package("nvidia-driver-575.51.02").is_installed
    assert not host.package("nvidia-driver-550.127.05").is_installed
    assert not host.file("/opt/ha-ops/gpu-driver/slot-a").exists
