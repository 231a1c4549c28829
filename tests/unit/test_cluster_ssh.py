"""SshCluster and SshNode: refusals before anything runs, commands run exactly as --dry-run prints them, and HTTP
to a cluster service through the service host's own SSH session (a direct-tcpip channel, as `ssh -L` opens)."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import socket
import threading
from collections.abc import Iterator, Sequence
from dataclasses import replace
from ipaddress import IPv4Address
from pathlib import Path

import paramiko
import pytest

from ha_ops.cluster.gpu import CapabilityMissing
from ha_ops.cluster.inventory import Inventory, InventoryHost
from ha_ops.cluster.ops import FilterOp, FilterRule, GpuOp, LinkOp, PowerOp, ServiceOp
from ha_ops.cluster.power import BmcConfig
from ha_ops.cluster.ssh import SshCluster, SshNode, state_dir
from ha_ops.errors import HaOpsError, SpecError, TransportError
from ha_ops.security.pki import CertificateAuthority
from ha_ops.security.tls import TlsFiles
from ha_ops.spec import load_spec
from ha_ops.spec.model import ClusterSpec
from ha_ops.util.proc import CommandResult
from tests.unit.test_controller_tls import api, pki  # noqa: F401  (fixtures)
from tests.unit.test_monitoring_web import ca, guarded  # noqa: F401  (fixtures)
from tests.unit.test_monitoring_web import client as monitoring_client
from tests.unit.test_transport_ssh import (  # noqa: F401  (fixtures)
    STEP_TIMEOUT,
    Keys,
    MiniSSHServer,
    _Handler,
    keys,
    known_hosts_entry,
    no_thread_left,
)

SPEC = Path(__file__).resolve().parents[2] / "examples" / "lab.yaml"


class Recorder:
    """A transport that records what it is asked to run and answers from a table (pure logic only)."""

    def __init__(self, answers: dict[str, str] | None = None) -> None:
        self.ran: list[tuple[list[str], str | None, bool]] = []
        self.answers = answers or {}

    def run(self, argv: Sequence[str], *, timeout: float = 30.0, check: bool = True, input: str | None = None,
            env: object = None, privileged: bool = True) -> CommandResult:  # fmt: skip
        self.ran.append((list(argv), input, privileged))
        return CommandResult(list(argv), 0, self.answers.get(argv[-1], ""), "")


def host(name: str = "gpu1", **extra: object) -> InventoryHost:
    return InventoryHost(name=name, address="10.77.1.10", **extra)  # type: ignore[arg-type]


def test_a_node_runs_exactly_what_it_renders() -> None:
    recorder = Recorder()
    node = SshNode(host(become=True, firewall="nftables"), recorder, gpus=8)  # type: ignore[arg-type]
    op = FilterOp(host="gpu1", chain="HAO-PART", rules=(FilterRule(hook="input", source="10.77.1.11"),))
    (line,) = node.render(op)
    assert line.startswith("ssh root@10.77.1.10: sudo -n -- nft -f - <<'EOF'\ntable inet ha_ops_chaos {")
    node.apply(op)
    (argv, given, _), = recorder.ran  # fmt: skip
    assert argv == ["nft", "-f", "-"] and given is not None and "ip saddr 10.77.1.11 drop" in given
    node.apply(ServiceOp(host="gpu1", unit="slurmd", action="freeze"))
    assert recorder.ran[-1][0] == ["systemctl", "kill", "--signal=SIGSTOP", "slurmd"]


class MaskedMaster(Recorder):
    """A host whose moosefs-master an operator masked: systemctl refuses to start it and says why."""

    def __init__(self, masked: bool) -> None:
        super().__init__({"moosefs-master": "masked" if masked else "enabled"})

    def run(self, argv: Sequence[str], **kwargs: object) -> CommandResult:  # type: ignore[override]
        result = super().run(argv, **kwargs)  # type: ignore[arg-type]
        if list(argv[:2]) == ["systemctl", "start"]:
            return CommandResult(list(argv), 1, "", "Failed to start moosefs-master.service: Unit ... is masked.")
        return result


def test_a_start_of_a_masked_unit_is_left_undone_and_any_other_failed_start_is_an_error() -> None:
    op = ServiceOp(host="mfsm", unit="mfsmaster", action="start")
    masked = MaskedMaster(masked=True)
    SshNode(host("mfsm"), masked, gpus=0).apply(op)  # type: ignore[arg-type]
    assert [argv for argv, _, _ in masked.ran] == [
        ["systemctl", "start", "moosefs-master"], ["systemctl", "is-enabled", "moosefs-master"],
    ]  # fmt: skip
    with pytest.raises(HaOpsError, match="exited 1"):
        SshNode(host("mfsm"), MaskedMaster(masked=False), gpus=0).apply(op)  # type: ignore[arg-type]


def test_what_a_node_lacks_is_refused_before_anything_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = Recorder()
    node = SshNode(host(), recorder, gpus=8)  # type: ignore[arg-type]
    assert node.capabilities == {"services", "links", "filters", "qdisc"}
    for op in (PowerOp(host="gpu1", action="off"), GpuOp(host="gpu1", fault="xid", gpu=0)):
        with pytest.raises(CapabilityMissing) as info:
            node.apply(op)
        assert info.value.exit_code == 2
        with pytest.raises(CapabilityMissing):
            node.render(op)
    monkeypatch.setenv("HAO_TEST_BMC_PASSWORD", "secret")
    bmc = BmcConfig(kind="ipmi", address="10.9.0.1", user="admin", password_env="HAO_TEST_BMC_PASSWORD")
    powered = SshNode(host(bmc=bmc), recorder, gpus=8)  # type: ignore[arg-type]
    assert "power" in powered.capabilities
    with pytest.raises(CapabilityMissing, match="permanent"):
        powered.apply(PowerOp(host="gpu1", action="off", permanent=True))
    assert powered.render(PowerOp(host="gpu1", action="cycle"))[0].endswith("chassis power cycle")
    assert recorder.ran == []


class Booting(Recorder):
    """A host that answers ssh only after `refusals` tries (booting after a power on), and a BMC that records."""

    def __init__(self, refusals: int) -> None:
        super().__init__()
        self.refusals, self.closed, self.acted = refusals, 0, []

    def run(self, argv: Sequence[str], **kwargs: object) -> CommandResult:  # type: ignore[override]
        if self.refusals:
            self.refusals -= 1
            raise TransportError("gpu1: cannot reach 10.77.1.10:22: [Errno 111] Connection refused")
        return super().run(argv, **kwargs)  # type: ignore[arg-type]

    def close(self) -> None:
        self.closed += 1

    def act(self, action: str) -> None:
        self.acted.append(action)


def test_after_a_power_on_the_node_waits_for_ssh_and_never_reuses_a_session_from_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HAO_TEST_BMC_PASSWORD", "secret")
    monkeypatch.setattr("ha_ops.cluster.ssh.time.sleep", lambda s: None)
    bmc = BmcConfig(kind="ipmi", address="10.9.0.1", user="admin", password_env="HAO_TEST_BMC_PASSWORD")
    booting = Booting(refusals=3)
    node = SshNode(host(bmc=bmc), booting, gpus=8)  # type: ignore[arg-type]
    node.power = booting  # type: ignore[assignment]
    node.apply(PowerOp(host="gpu1", action="off"))
    assert booting.acted == ["off"] and booting.closed == 1 and booting.refusals == 3  # off: nothing to wait for
    node.apply(PowerOp(host="gpu1", action="on"))
    assert booting.acted == ["off", "on"] and booting.closed == 2
    assert booting.refusals == 0 and [argv for argv, _, _ in booting.ran] == [["true"]]  # it answered: booted
    never = Booting(refusals=10**6)
    slow = SshNode(host(bmc=bmc, boot_wait_s=0), never, gpus=8)  # type: ignore[arg-type]
    slow.power = never  # type: ignore[assignment]
    with pytest.raises(TransportError, match="does not answer ssh 0 s after a power on"):
        slow.apply(PowerOp(host="gpu1", action="on"))


def test_the_link_ha_ops_reaches_a_node_through_is_never_taken_down() -> None:
    recorder = Recorder({'ip -o route get "${SSH_CONNECTION%% *}"': "10.0.0.1 dev mgmt0 src 10.77.9.10 uid 0"})
    node = SshNode(host(become=True), recorder, gpus=0)  # type: ignore[arg-type]
    with pytest.raises(HaOpsError, match="refusing to take gpu1 mgmt0 down"):
        node.apply(LinkOp(host="gpu1", interface="mgmt0", up=False))
    assert recorder.ran[-1][2] is False  # asked as the login user: sudo would drop SSH_CONNECTION
    node.apply(LinkOp(host="gpu1", interface="eth0", up=False))
    assert recorder.ran[-1][0] == ["ip", "link", "set", "dev", "eth0", "down"]


def test_targets_are_the_inventory_hosts_only(tmp_path: Path) -> None:
    inventory = Inventory(source=tmp_path / "hosts.yml", hosts={"gpu1": host(), "ctl1": host("ctl1")})
    cluster = SshCluster(load_spec(SPEC), inventory, journal_dir=tmp_path)
    assert cluster.hosts() == ["gpu1", "ctl1"]
    with pytest.raises(SpecError, match="'gpu3' is not a host of this inventory"):
        cluster.node("gpu3")
    with pytest.raises(SpecError, match="'mon1' is not a host of this inventory"):
        cluster.http("prometheus", "/-/ready")
    assert state_dir("lab").parts[-3:] == ("ha-ops", "clusters", "lab")


def test_the_kubernetes_api_is_the_inventorys_kubeconfig_relative_to_it_or_kubectls_own(tmp_path: Path) -> None:
    spec = load_spec(SPEC.parent / "lab-k8s.yaml")
    plain = SshCluster(spec, Inventory(source=tmp_path / "hosts.yml", hosts={"gpu1": host()}), journal_dir=tmp_path)
    assert plain._kubeconfig() is None  # $KUBECONFIG or ~/.kube/config, as kubectl finds it
    named = host(vars={"ha_ops_kubeconfig": "kube/admin.conf"})
    cluster = SshCluster(spec, Inventory(source=tmp_path / "hosts.yml", hosts={"gpu1": named}), journal_dir=tmp_path)
    assert cluster._kubeconfig() == (tmp_path / "kube" / "admin.conf").resolve()


# --- HTTP through the SSH session ------------------------------------------------------------------------------
class _TunnelHandler(_Handler):
    def check_channel_request(self, kind: str, chanid: int) -> int:
        return (
            paramiko.OPEN_SUCCEEDED
            if kind in ("session", "direct-tcpip")
            else super().check_channel_request(kind, chanid)
        )

    def check_channel_direct_tcpip_request(self, chanid: int, origin: tuple, destination: tuple) -> int:
        self.log.append(f"direct-tcpip {destination[0]}:{destination[1]}")
        self.requests.put((chanid, destination))
        return paramiko.OPEN_SUCCEEDED


class TunnelSSHServer(MiniSSHServer):
    """The mini server, also forwarding direct-tcpip channels (one request each) to where they ask."""

    handler = _TunnelHandler

    def serve_request(self, transport: paramiko.Transport, request: tuple) -> None:
        chanid, destination = request
        channel = transport.accept(STEP_TIMEOUT)
        assert channel is not None and channel.get_id() == chanid
        channel.settimeout(STEP_TIMEOUT)
        with socket.create_connection(destination, timeout=STEP_TIMEOUT) as upstream:
            # Both ways at once, as sshd forwards: a TLS handshake talks back and forth before any request.
            back = threading.Thread(target=self._copy_back, args=(upstream, channel), name="tunnel-back", daemon=True)
            back.start()
            with contextlib.suppress(EOFError, OSError):
                while chunk := channel.recv(4096):
                    upstream.sendall(chunk)
            back.join(STEP_TIMEOUT)

    @staticmethod
    def _copy_back(upstream: socket.socket, channel: paramiko.Channel) -> None:
        with contextlib.suppress(EOFError, OSError):  # the client may already have hung up: done either way
            while chunk := upstream.recv(4096):
                channel.sendall(chunk)
        with contextlib.suppress(EOFError, OSError):
            channel.close()


class _Ready(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"ready at {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def service() -> Iterator[int]:
    server = http.server.HTTPServer(("127.0.0.1", 0), _Ready)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="svc", daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(STEP_TIMEOUT)


def loopback_cluster(
    spec: ClusterSpec,
    tmp_path: Path,
    host: str,
    port: int,
    ssh_keys: Keys,
    known: Path,
    given: dict,
) -> SshCluster:
    """A cluster of one host, `host`, reached over the test's SSH server on this machine and at 127.0.0.1 (its
    services listen there), with the inventory variables `given`."""
    entry = InventoryHost(name=host, address="127.0.0.1", port=port, key_file=ssh_keys.client_file, known_hosts=known,
                          vars=given)  # fmt: skip
    cluster = SshCluster(spec, Inventory(source=tmp_path / "hosts.yml", hosts={host: entry}), journal_dir=tmp_path)
    nodes = [replace(n, address=IPv4Address("127.0.0.1")) if n.name == host else n for n in cluster.layout.nodes]
    cluster.layout = replace(cluster.layout, nodes=nodes)
    return cluster


def test_http_to_a_service_goes_through_its_hosts_ssh_session(tmp_path: Path, keys: Keys, service: int) -> None:  # noqa: F811
    sshd = TunnelSSHServer(keys.host, keys.client)
    try:
        known = tmp_path / "known_hosts"
        known.write_text(known_hosts_entry(sshd.port, keys.host))
        mon = InventoryHost(name="mon1", address="127.0.0.1", port=sshd.port, key_file=keys.client_file,
                            known_hosts=known)  # fmt: skip
        spec = load_spec(SPEC)
        spec = spec.model_copy(update={"monitoring": spec.monitoring.model_copy(update={"prometheus_port": service})})
        cluster = SshCluster(spec, Inventory(source=tmp_path / "hosts.yml", hosts={"mon1": mon}), journal_dir=tmp_path)
        # Prometheus listens on mon1's own address; mon1 is this machine here, so that address is 127.0.0.1.
        nodes = [replace(n, address=IPv4Address("127.0.0.1")) if n.name == "mon1" else n for n in cluster.layout.nodes]
        cluster.layout = replace(cluster.layout, nodes=nodes)
        # The body comes in a packet after the headers': it must survive http.client closing its connection early.
        for attempt in range(20):
            status, body = cluster.http("prometheus", f"/api/v1/status/buildinfo?n={attempt}")
            assert status == 200 and body == f"ready at /api/v1/status/buildinfo?n={attempt}".encode()
        assert f"direct-tcpip 127.0.0.1:{service}" in sshd.log, sshd.log
        cluster.close()
    finally:
        sshd.close()


def test_the_controllers_mutual_tls_runs_end_to_end_through_the_ssh_session(
    tmp_path: Path,
    keys: Keys,  # noqa: F811
    api: tuple[object, str],  # noqa: F811
    pki: dict[str, TlsFiles],  # noqa: F811
) -> None:
    """remediation.tls: the operator's certificate (the inventory's ha_ops_tls, relative to it) speaks TLS to the
    real controller API through the direct-tcpip channel; the SSH server only ever sees ciphertext."""
    port = int(api[1].rsplit(":", 1)[1])
    sshd = TunnelSSHServer(keys.host, keys.client)
    try:
        known = tmp_path / "known_hosts"
        known.write_text(known_hosts_entry(sshd.port, keys.host))
        spec = load_spec(SPEC)
        assert spec.remediation is not None
        spec = spec.model_copy(update={"remediation": spec.remediation.model_copy(update={"port": port, "tls": True})})

        def cluster_with(identity: TlsFiles | None) -> SshCluster:
            tls_var = {} if identity is None else {"ha_ops_tls": {
                "ca_file": str(identity.ca_file), "cert_file": os.path.relpath(identity.cert_file, tmp_path),
                "key_file": os.path.relpath(identity.key_file, tmp_path)}}  # fmt: skip
            return loopback_cluster(spec, tmp_path, "ctl1", sshd.port, keys, known, tls_var)

        operator = cluster_with(pki["operator"])
        for _ in range(3):
            status, body = operator.http("controller", "/v1/state", host="ctl1")
            assert status == 200 and json.loads(body)["leader_name"] == "ctl1"
        operator.close()
        agent = cluster_with(pki["n1"])  # a certificate of the CA, but no operator's: the controller says 403
        status, body = agent.http("controller", "/v1/state", host="ctl1")
        assert status == 403 and "operator" in json.loads(body)["error"]
        agent.close()
        with pytest.raises(SpecError, match="ha_ops_tls: the spec serves the controllers' API over mutual TLS"):
            cluster_with(None).http("controller", "/v1/state", host="ctl1")
        assert f"direct-tcpip 127.0.0.1:{port}" in sshd.log, sshd.log
    finally:
        sshd.close()


def test_prometheus_behind_tls_and_a_password_is_reached_through_the_ssh_session_with_the_inventorys_client(
    tmp_path: Path,
    keys: Keys,  # noqa: F811
    ca: CertificateAuthority,  # noqa: F811
    guarded: str,  # noqa: F811
) -> None:
    """The inventory's ha_ops_monitoring (paths relative to it): the certificate and the password reach a server
    that asks for both, as Prometheus' web config does, through mon1's direct-tcpip channel."""
    port = int(guarded.rsplit(":", 1)[1])
    sshd = TunnelSSHServer(keys.host, keys.client)
    try:
        known = tmp_path / "known_hosts"
        known.write_text(known_hosts_entry(sshd.port, keys.host))
        spec = load_spec(SPEC)
        spec = spec.model_copy(update={"monitoring": spec.monitoring.model_copy(update={"prometheus_port": port})})
        caller = monitoring_client(tmp_path, ca)
        assert caller.tls is not None and caller.password_file is not None

        def cluster_with(monitoring: object) -> SshCluster:
            given = {"ha_ops_monitoring": monitoring} if monitoring else {}
            return loopback_cluster(spec, tmp_path, "mon1", sshd.port, keys, known, given)

        relative = caller.model_dump(mode="json") | {"password_file": caller.password_file.name}
        operator = cluster_with(relative)
        assert operator.http("prometheus", "/-/healthy") == (200, b"")
        operator.close()
        wrong = monitoring_client(tmp_path, ca, "guess").model_dump(mode="json")
        assert cluster_with(wrong).http("prometheus", "/-/healthy")[0] == 401
        with pytest.raises(SpecError, match="ha_ops_monitoring"):
            cluster_with({"username": "ha-ops"}).http("prometheus", "/-/healthy")
        assert f"direct-tcpip 127.0.0.1:{port}" in sshd.log, sshd.log
    finally:
        sshd.close()
