"""Prometheus and Alertmanager as the role leaves them: running, over TLS asking every caller for a certificate of
the cluster CA and the password, loading the shipped rules (which promtool checks and unit-tests in the container),
scraping the targets built from the inventory, and an alert travelling from a rule through Alertmanager to a
remediation controller's webhook over mutual TLS (a stand-in on ctl1's loopback address)."""

import base64
import json
import re
import time
from pathlib import Path

import pytest

testinfra_hosts = ["podman://hao-monitoring-1"]

FILES = Path(__file__).resolve().parents[3] / "files"
CLUSTER_ALERTS = {
    "HaOpsGpuUnhealthy", "HaOpsNodeDown", "HaOpsSlurmControllerDown", "HaOpsSlurmNoController",
    "HaOpsRemediationControllerDown", "HaOpsNoRemediationLeader", "HaOpsFabricLinkDown", "HaOpsFabricBondDegraded",
}  # fmt: skip

PKI = "/etc/ha-ops/pki"
PASSWORD = "molecule-monitoring-secret"  # prepare.yml's

# A remediation controller stand-in over mutual TLS (ctl1's certificate, callers' certificates from the CA): leader
# metric on /metrics, Alertmanager's webhook bodies appended to a file with the caller's CN.
FAKE_CONTROLLER = """
import http.server, ssl
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b'ha_ops_controller_leader{id="ctl1"} 1\\n'
        self.send_response(200 if self.path == "/metrics" else 404)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        self.wfile.write(body)
    def do_POST(self):
        data = self.rfile.read(int(self.headers["Content-Length"]))
        caller = dict(x[0] for x in self.connection.getpeercert()["subject"])["commonName"]
        with open("/tmp/webhook.jsonl", "ab") as f:
            f.write(self.path.encode() + b" " + caller.encode() + b" " + data.replace(b"\\n", b" ") + b"\\n")
        self.send_response(200)
        self.end_headers()
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.verify_mode = ssl.CERT_REQUIRED
context.load_verify_locations("/etc/ha-ops/pki/ca.crt")
context.load_cert_chain("/etc/ha-ops/pki/ctl1.crt", "/etc/ha-ops/pki/ctl1.key")
server = http.server.HTTPServer(("127.0.0.4", 8800), H)
server.socket = context.wrap_socket(server.socket, server_side=True)
server.serve_forever()
"""

# One request from inside the container (the image has no curl): with a certificate of prepare.yml's ("-" for
# none) and a password ("-" for none); prints the status and the body, or the TLS error.
CLIENT = """
import base64, json, ssl, sys, urllib.error, urllib.request
cert, password, url = sys.argv[1:4]
context = ssl.create_default_context(cafile="/etc/ha-ops/pki/ca.crt")
if cert != "-":
    context.load_cert_chain(f"/etc/ha-ops/pki/{cert}.crt", f"/etc/ha-ops/pki/{cert}.key")
request = urllib.request.Request(url)
if password != "-":
    request.add_header("Authorization", "Basic " + base64.b64encode(f"ha-ops:{password}".encode()).decode())
try:
    with urllib.request.urlopen(request, timeout=5, context=context) as answer:
        print(json.dumps([answer.status, answer.read().decode()]))
except urllib.error.HTTPError as e:
    print(json.dumps([e.code, e.read().decode()]))
except (ssl.SSLError, urllib.error.URLError, ConnectionError) as e:
    print(json.dumps(["tls", str(e)]))
"""


def call(host, url, cert="operator", password=PASSWORD):
    return json.loads(host.check_output("python3 -c %s %s %s %s", CLIENT, cert, password, url))


def fetch(host, url):
    """GET as the operator: its certificate and the password."""
    status, body = call(host, url)
    assert status == 200, (url, status, body)
    return body


def api(host, url):
    answer = json.loads(fetch(host, url))
    assert answer["status"] == "success", answer
    return answer["data"]


def put(host, path, text):
    host.run_test("echo %s | base64 -d > %s", base64.b64encode(text.encode()).decode(), path)


def wait(what, probe, timeout=30.0):
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value or time.monotonic() > deadline:
            assert value, f"timed out waiting for {what}"
            return value
        time.sleep(0.5)


@pytest.fixture(scope="module")
def controller(host):
    host.run("systemctl stop hao-fake-controller; systemctl reset-failed hao-fake-controller; rm -f /tmp/webhook.jsonl")
    put(host, "/tmp/fake_controller.py", FAKE_CONTROLLER)
    host.run_test("systemd-run --unit=hao-fake-controller python3 /tmp/fake_controller.py")
    yield
    host.run("systemctl stop hao-fake-controller")


@pytest.mark.parametrize("service", ["prometheus", "prometheus-alertmanager"])
def test_services_are_enabled_and_running(host, service):
    s = host.service(service)
    assert s.is_enabled and s.is_running


@pytest.mark.parametrize("port,answer", [(9090, "Prometheus Server is Ready."), (9093, "OK")])
def test_prometheus_and_alertmanager_are_ready(host, port, answer):
    assert fetch(host, f"https://127.0.0.1:{port}/-/ready").strip() == answer


@pytest.mark.parametrize("port", [9090, 9093])
def test_every_caller_needs_a_certificate_of_the_ca_and_the_password(host, port):
    url = f"https://127.0.0.1:{port}/-/ready"
    assert call(host, url.replace("https", "http"), cert="-")[0] == 400  # plain HTTP to the TLS port
    assert call(host, url, cert="-")[0] == "tls"  # no certificate: the handshake fails
    assert call(host, url, cert="agent-gpu1", password="-")[0] == 401  # the CA's, but no password: a GPU node
    assert call(host, url, password="guess")[0] == 401
    assert call(host, url)[0] == 200


def test_flags_carry_retention_the_web_config_and_no_alertmanager_cluster_port(host):
    args = host.file("/etc/default/prometheus").content_string
    assert "--storage.tsdb.retention.time=2d" in args and "--web.listen-address=0.0.0.0:9090" in args
    assert "--web.config.file=/etc/prometheus/web-prometheus.yml" in args
    alertmanager_args = host.file("/etc/default/prometheus-alertmanager").content_string
    assert "--web.config.file=/etc/prometheus/web-alertmanager.yml" in alertmanager_args
    assert re.search(r'--cluster\.listen-address=[ "]', alertmanager_args)
    for daemon in ("prometheus", "alertmanager"):
        web = host.file(f"/etc/prometheus/web-{daemon}.yml")
        assert (web.group, web.mode) == ("prometheus", 0o640)
        assert f'cert_file: "{PKI}/{daemon}.crt"' in web.content_string
        host.run_test("promtool check web-config %s", web.path)
        key = host.file(f"{PKI}/{daemon}.key")
        assert (key.user, key.group, key.mode) == ("root", "prometheus", 0o640)
    assert host.run("python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 9094), 1)'").rc != 0


def test_installed_rules_are_the_shipped_file_and_pass_promtool(host):
    installed = host.file("/etc/prometheus/rules/ha-ops-rules.yml")
    assert installed.content_string == (FILES / "ha-ops-rules.yml").read_text()
    host.run_test("promtool check rules /etc/prometheus/rules/ha-ops-rules.yml")
    host.run_test("promtool check config /etc/prometheus/prometheus.yml")
    host.run_test("amtool check-config /etc/prometheus/alertmanager.yml")


def test_rule_unit_tests_pass_in_the_container(host):
    host.run_test("rm -rf /tmp/rules-test && mkdir /tmp/rules-test")
    put(host, "/tmp/rules-test/ha-ops-rules.test.yml", (FILES / "ha-ops-rules.test.yml").read_text())
    host.run_test("cp /etc/prometheus/rules/ha-ops-rules.yml /tmp/rules-test/")
    out = host.run("promtool test rules /tmp/rules-test/ha-ops-rules.test.yml")
    assert out.rc == 0 and "SUCCESS" in out.stdout, out.stdout + out.stderr


def test_prometheus_loaded_both_rule_groups(host):
    groups = {
        g["name"]: {r["name"] for r in g["rules"]} for g in api(host, "https://127.0.0.1:9090/api/v1/rules")["groups"]
    }
    assert set(groups) == {"ha-ops-lab", "ha-ops-cluster"}
    assert groups["ha-ops-cluster"] == CLUSTER_ALERTS
    assert "HaOpsGpuNodeUnhealthy" in groups["ha-ops-lab"]


def test_targets_come_from_the_inventory_groups(host):
    config = host.file("/etc/prometheus/prometheus.yml").content_string
    assert '["gpu1:9426", "gpu2:9426"]' in config
    active = api(host, "https://127.0.0.1:9090/api/v1/targets")["activeTargets"]
    jobs = {}
    for t in active:
        jobs.setdefault(t["labels"]["job"], set()).add(t["labels"]["instance"])
    assert jobs["ha-ops-agent"] == {"gpu1:9426", "gpu2:9426"}
    assert jobs["ha-ops-controller"] == {"ctl1:8800", "ctl2:8800"}
    assert jobs["node"] == {"gpu1:9100", "gpu2:9100"}
    assert jobs["ha-ops-storage"] == {"127.0.0.1:9425"}
    assert jobs["alertmanager"] == {"127.0.0.1:9093"}
    assert api(host, "https://127.0.0.1:9090/api/v1/status/config")["yaml"].count("cluster: molecule") == 1

    # Prometheus reaches itself and Alertmanager with its certificate and the password (they are up).
    def own_up():
        targets = api(host, "https://127.0.0.1:9090/api/v1/targets")["activeTargets"]
        return {
            t["labels"]["job"]: t["health"] for t in targets if t["labels"]["job"] in ("prometheus", "alertmanager")
        }

    both_up = {"prometheus": "up", "alertmanager": "up"}
    wait("Prometheus scraping itself and Alertmanager", lambda: own_up() == both_up)


def test_alertmanager_sends_to_every_controller_webhook(host):
    status = json.loads(fetch(host, "https://127.0.0.1:9093/api/v2/status"))
    assert "https://ctl1:8800/v1/alerts" in status["config"]["original"]
    assert "https://ctl2:8800/v1/alerts" in status["config"]["original"]
    [manager] = api(host, "https://127.0.0.1:9090/api/v1/alertmanagers")["activeAlertmanagers"]
    assert manager["url"] == "https://127.0.0.1:9093/api/v2/alerts"


def test_an_alert_reaches_the_controller_webhook(host, controller):
    """gpu1's agent does not answer: the lab group's HaOpsScrapeTargetDown (for 0s) goes through Alertmanager to
    ctl1's /v1/alerts over mutual TLS (Alertmanager's certificate), and the cluster group's HaOpsNodeDown is pending
    or firing (`for: 1m`) on the same scrape."""

    def delivered():
        out = host.run("cat /tmp/webhook.jsonl")
        for line in out.stdout.splitlines():
            path, caller, body = line.split(" ", 2)
            for alert in json.loads(body)["alerts"]:
                labels = alert["labels"]
                if labels["alertname"] == "HaOpsScrapeTargetDown" and labels["instance"] == "gpu1:9426":
                    assert path == "/v1/alerts" and alert["status"] == "firing" and caller == "alertmanager"
                    assert labels["cluster"] == "molecule"  # external labels travel with the alert
                    return True
        return False

    # Alertmanager has been failing to reach ctl1 since the converge (nothing answered there before this test's
    # stand-in started) and retries with a backoff: the first delivery can take well over 30 s on a loaded machine.
    wait("HaOpsScrapeTargetDown for gpu1 at ctl1's webhook", delivered, timeout=120.0)

    def alerts():
        return {
            (a["labels"]["alertname"], a["labels"].get("instance")): a["state"]
            for a in api(host, "https://127.0.0.1:9090/api/v1/alerts")["alerts"]
        }

    assert alerts()[("HaOpsNodeDown", "gpu1:9426")] in ("pending", "firing")
    # The stand-in answers as ctl1 (Prometheus' certificate scrapes it over TLS): its target comes up and its down
    # alert resolves; ctl2 stays down.
    wait("ctl1's down alert resolved", lambda: ("HaOpsScrapeTargetDown", "ctl1:8800") not in alerts())
    assert ("HaOpsScrapeTargetDown", "ctl2:8800") in alerts()
