"""The controller pair as services: both running from one shared state folder, one of them leading, the other naming
it; the leader stopped, the other takes over; the config and the secrets where the role put them."""

import json
import time

import yaml

testinfra_hosts = ["podman://hao-ha-ops-controller-1", "podman://hao-ha-ops-controller-2"]
NAMES = ["hao-ha-ops-controller-1", "hao-ha-ops-controller-2"]
VENV = "/opt/ha-ops"
CONFIG = "/etc/ha-ops/controller.yaml"


def connect(name):
    import testinfra

    return testinfra.get_host(f"podman://{name}")


def config(host):
    return yaml.safe_load(host.file(CONFIG).content_string)


def health(host):
    """The controller's own /healthz ({id, leader}), or None while it does not answer."""
    address = config(host)["listen_address"]
    fetch = f"import urllib.request; print(urllib.request.urlopen('http://{address}:8800/healthz', timeout=3).read().decode())"
    out = host.run(f'python3 -c "{fetch}"')
    return json.loads(out.stdout) if out.rc == 0 else None


def leaders(hosts, timeout=30.0):
    """The ids of the controllers that lead, once every running one answers and exactly one leads."""
    deadline = time.monotonic() + timeout
    while True:
        answers = {h.backend.name: health(h) for h in hosts}
        leading = [a["id"] for a in answers.values() if a and a["leader"]]
        if all(answers.values()) and len(leading) == 1:
            return leading
        if time.monotonic() > deadline:
            raise AssertionError(f"no single leader within {timeout:g} s: {answers}")
        time.sleep(0.5)


def test_service_is_enabled_running_and_hardened(host):
    service = host.service("ha-ops-controller")
    assert service.is_enabled and service.is_running
    unit = host.run("systemctl cat ha-ops-controller").stdout
    assert "RequiresMountsFor=/srv/ha-ops/controller" in unit and "ProtectSystem=strict" in unit
    assert "ReadWritePaths=/srv/ha-ops/controller" in unit and "Restart=always" in unit


def test_the_config_passes_the_controllers_own_check_and_comes_from_the_inventory(host):
    checked = host.run(f"{VENV}/bin/ha-ops controller check-config {CONFIG}")
    assert checked.rc == 0, checked.stderr
    cfg = config(host)
    assert cfg["id"] == host.backend.name and cfg["state_dir"] == "/srv/ha-ops/controller"
    assert cfg["pools"] == {"h100": {"nodes": ["gpu1", "gpu2"], "spares": ["gpu3"]}}
    assert cfg["failure_domains"] == {"rack1": ["gpu1", "gpu2"], "rack2": ["gpu3"]}  # (observers.py's domain rule)
    assert len(cfg["peers"]) == 2 and all(p.startswith("http://") and p.endswith(":8800") for p in cfg["peers"])
    assert cfg["insecure"] is True and "tls" not in cfg  # plain HTTP only as the scenario meant it
    assert cfg["lease_ttl_s"] == 3.0 and cfg["safety"] == {"breaker_max_nodes": 1}  # the settings merged in
    # A GPU node names its BMC: the controller power-cycles through it, with the BMCs the role wrote.
    assert cfg["access"]["power_cycle_command"] == (
        f"{VENV}/bin/ha-ops power cycle {{node}} --inventory /etc/ha-ops/power-inventory.yml")
    power = yaml.safe_load(host.file("/etc/ha-ops/power-inventory.yml").content_string)
    assert list(power["all"]["hosts"]) == ["gpu1"]
    assert power["all"]["hosts"]["gpu1"]["ha_ops_bmc"]["address"] == "https://10.41.0.11"


def test_secrets_are_private_and_the_audit_key_is_the_same_on_both(host):
    for path in ("/etc/ha-ops/audit.key", "/etc/ha-ops/bmc-password"):
        secret = host.file(path)
        assert secret.mode == 0o600 and secret.user == "root", path
    keys = {connect(n).file("/etc/ha-ops/audit.key").content_string for n in NAMES}
    assert keys == {"0123456789abcdef" * 4 + "\n"}
    assert not host.file("/srv/ha-ops/controller/.ha-ops-shared-check").exists  # the check cleaned up


def test_one_leads_and_the_other_names_it():
    hosts = [connect(n) for n in NAMES]
    (leader,) = leaders(hosts)
    standby = next(h for h in hosts if h.backend.name != leader)
    address = config(standby)["listen_address"]
    fetch = f"import urllib.request; print(urllib.request.urlopen('http://{address}:8800/v1/state', timeout=3).read().decode())"
    state = json.loads(standby.check_output(f'python3 -c "{fetch}"'))
    assert state["leader"] is False and state["leader_name"] == leader


def test_the_standby_takes_over_when_the_leader_stops():
    hosts = [connect(n) for n in NAMES]
    (leader,) = leaders(hosts)
    first = next(h for h in hosts if h.backend.name == leader)
    other = next(h for h in hosts if h.backend.name != leader)
    first.check_output("systemctl stop ha-ops-controller")
    try:
        assert leaders([other]) == [other.backend.name]  # the lease (3 s) ran out and the standby took it
    finally:
        first.check_output("systemctl start ha-ops-controller")
    assert leaders(hosts) == [other.backend.name]  # the old leader comes back as the standby
