"""The audit sink as the role leaves it: its own rsyslog instance beside the distro's, listening on 6514 with TLS and
the certificate ha_ops_pki installed (renewed by the side effect, which restarted it). From this machine, ha-ops'
own shipper (ha_ops.remediation.audit_sink) with a controller's certificate lands its entries in the output file;
with a GPU node's certificate, of the same CA, nothing lands."""

import json
import os
import socket
import ssl
import time
import uuid
from pathlib import Path

import pytest

from ha_ops.remediation.audit_sink import AuditShipper, AuditSinkConfig, shipped_entries
from ha_ops.security.tls import TlsFiles

testinfra_hosts = ["podman://hao-audit-sink"]

PKI = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "pki"  # the scenario's CA, on this machine
OUTPUT = "/var/log/ha-ops/audit.jsonl"
UNIT = "ha-ops-audit-sink.service"


def files(name: str) -> TlsFiles:
    return TlsFiles(ca_file=PKI / "ca.crt", cert_file=PKI / f"{name}.crt", key_file=PKI / f"{name}.key")


@pytest.fixture
def address(host):
    return host.check_output("hostname -I").split()[0]


def shipped(host) -> str:
    return host.file(OUTPUT).content_string if host.file(OUTPUT).exists else ""


def wait_for(condition, seconds: float = 20.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return condition()


def ship(address: str, identity: str, entries: list[dict], tmp_path: Path) -> AuditShipper:
    """Entries shipped from a thread of ha-ops' shipper, as a controller's leader ships what it appends."""
    config = AuditSinkConfig(address=address, port=6514, tls=files(identity),
                             marker_file=tmp_path / f"{identity}-shipped", retry_s=0.2)  # fmt: skip
    shipper = AuditShipper(config, host=identity)
    shipper.ship(entries)
    shipper.start()
    return shipper


def entries(marker: str, first_seq: int, count: int = 3) -> list[dict]:
    return [{"seq": first_seq + k, "action": "test", "marker": marker, "hash": f"h{first_seq + k}"}
            for k in range(count)]  # fmt: skip


def test_the_sink_is_an_rsyslog_instance_of_its_own(host):
    sink = host.service(UNIT)
    assert sink.is_enabled and sink.is_running
    assert host.service("rsyslog.service").is_running  # the host's own logging, left as it was
    argv = host.check_output("systemctl show -p ExecStart --value %s", UNIT)
    assert "/usr/sbin/rsyslogd -n -iNONE -f /etc/ha-ops/audit-sink.conf" in argv
    config = host.file("/etc/ha-ops/audit-sink.conf")
    assert (config.user, config.mode) == ("root", 0o640)
    assert config.content_string.startswith("# Ansible managed")
    assert 'permittedPeer=["ctl1", "ctl2"]' in config.content_string  # the remediation_controllers group
    assert 'defaultNetstreamDriverCertFile="/etc/ha-ops/pki/audit-sink.crt"' in config.content_string
    host.run_test("/usr/sbin/rsyslogd -N1 -f /etc/ha-ops/audit-sink.conf")
    folder = host.file("/var/log/ha-ops")
    assert (folder.user, folder.group, folder.mode) == ("root", "root", 0o2750)
    assert host.file("/var/lib/ha-ops/audit-sink").mode == 0o700
    assert host.service("ha-ops-audit-sink-certs.path").is_enabled


def test_it_listens_with_tls_and_the_certificate_ha_ops_pki_installed(host, address):
    assert host.socket("tcp://0.0.0.0:6514").is_listening or host.socket("tcp://:::6514").is_listening
    context = ssl.create_default_context(cafile=str(PKI / "ca.crt"))
    context.load_cert_chain(str(PKI / "controller-ctl1.crt"), str(PKI / "controller-ctl1.key"))
    with socket.create_connection((address, 6514), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname=address) as tls:
            served = tls.getpeercert(binary_form=True)
            subject = dict(x[0] for x in tls.getpeercert()["subject"])
            assert tls.version() in ("TLSv1.2", "TLSv1.3")
    assert subject == {"commonName": "mon1", "organizationName": "ha-ops:audit-sink"}
    installed = host.file("/etc/ha-ops/pki/audit-sink.crt").content_string
    assert served == ssl.PEM_cert_to_DER_cert(installed)


def test_a_renewed_certificate_restarted_the_sink(host):
    """The side effect installed a new certificate; the path unit restarted rsyslog, which serves it (above)."""
    before = host.file("/root/sink-serial-before").content_string.strip()
    assert before != host.check_output("openssl x509 -in /etc/ha-ops/pki/audit-sink.crt -noout -serial")
    invocation = host.file("/root/sink-invocation-before").content_string.strip()
    assert wait_for(lambda: host.check_output("systemctl show -p InvocationID --value %s", UNIT) != invocation)
    assert wait_for(lambda: host.service(UNIT).is_running)


def test_a_controllers_entries_land_in_the_output_file(host, address, tmp_path):
    marker = uuid.uuid4().hex
    sent = entries(marker, 1)
    shipper = ship(address, "controller-ctl1", sent, tmp_path)
    try:
        assert wait_for(lambda: shipped(host).count(marker) == len(sent)), shipped(host)[-2000:]
    finally:
        shipper.stop()
    mine = [json.loads(line) for line in shipped(host).splitlines() if marker in line]
    assert mine == sent  # each entry's JSON line as it was shipped, in order
    got, problems = shipped_entries(shipped(host))
    assert not problems and all(e in got for e in sent)  # what `ha-ops audit verify --shipped` reads
    output = host.file(OUTPUT)
    assert (output.user, output.group, output.mode) == ("root", "root", 0o640)


def test_a_gpu_nodes_certificate_lands_nothing(host, address, tmp_path):
    """A certificate of the same CA that does not name a controller: rsyslog refuses the peer by name. A controller
    shipping after it lands, the GPU node's entries never do, and rsyslog logs the refusal with the name it saw."""
    refused, allowed = uuid.uuid4().hex, uuid.uuid4().hex
    gpu = ship(address, "agent-gpu1", entries(refused, 100), tmp_path)
    try:
        # It connects and sends (TLS 1.3: the client's handshake ends before the server checks its certificate) or
        # fails its handshake; either way it has tried.
        assert wait_for(lambda: gpu.shipped_seq >= 100 or gpu.failures > 0)
        ctl = ship(address, "controller-ctl2", entries(allowed, 200), tmp_path)
        try:
            assert wait_for(lambda: shipped(host).count(allowed) == 3), shipped(host)[-2000:]
        finally:
            ctl.stop()
        time.sleep(1)
        assert refused not in shipped(host)
    finally:
        gpu.stop()
    # rsyslog says why, in the unit's journal (its own messages go to the system log).
    refusal = "peer name not authorized -  not permitted to talk to it. Names: CN: gpu1;"
    journal = "journalctl -u %s --no-pager -o cat"
    assert wait_for(lambda: refusal in host.check_output(journal, UNIT)), host.check_output(journal, UNIT)[-2000:]
