"""The remediation controller pair in the lab, with the agents reporting to it and the real Slurm."""

from __future__ import annotations

import hashlib
import json
import random
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from ha_ops.chaos import workload
from ha_ops.checkpoint.reference_job import parse_event
from ha_ops.lab import monitoring
from ha_ops.lab.cluster import Lab
from ha_ops.lab.controllers import audit_key_path, config_path, state_dir
from ha_ops.remediation.store import read_state
from ha_ops.schedulers.slurm import Slurm
from ha_ops.util.wait import wait_for
from tests.labkit import (
    REPO,
    audit_entries,
    call_controller,
    cluster,
    controller_nodes,
    controller_url,
    leader,
    reset_remediation,
)

pytestmark = pytest.mark.lab


@pytest.fixture(autouse=True)
def clean(lab: Lab) -> Iterator[None]:
    reset_remediation(lab)
    yield


@pytest.fixture(scope="module", autouse=True)
def leave_in_service(lab: Lab) -> Iterator[None]:
    yield
    reset_remediation(lab)  # the next module expects every node in service


@pytest.fixture
def slurm(lab: Lab) -> Slurm:
    return Slurm(lab.transport("gpu1"))


def phase(lab: Lab, node: str) -> str:
    return read_state(state_dir(lab.ctx) / "state.json").nodes[node].phase.value


def node_entries(lab: Lab, node: str, since: int = 0) -> list[dict]:
    return [e for e in audit_entries(lab) if e["node"] == node and e["seq"] > since]


def kinds(entries: list[dict]) -> Counter:
    return Counter(e["what"] for e in entries)


def audited(lab: Lab, node: str, expected: Counter) -> Counter:
    """The node's audit entries by kind, read once at least `expected` is there: the controller audits an action
    after it is done, so Slurm shows a spare leaving or a node resumed a moment before the audit log does."""
    wait_for(f"{node}'s actions audited", lambda: kinds(node_entries(lab, node)) >= expected, timeout=10,
             interval=0.1)  # fmt: skip
    return kinds(node_entries(lab, node))


def audit_verify(lab: Lab) -> subprocess.CompletedProcess:
    directory = state_dir(lab.ctx)
    cmd = [sys.executable, "-m", "ha_ops", "audit", "verify", str(directory / "audit.jsonl"),
           "--state", str(directory / "state.json"), "--key-file", str(audit_key_path(lab.ctx, "ctl1"))]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def test_xid79_on_a_node_running_a_job_requeues_it_elsewhere_and_a_spare_enters(lab: Lab, slurm: Slurm) -> None:
    # The stateful job is ha-ops' reference training job (ha_ops.checkpoint): it resumes from its latest valid
    # checkpoint and logs each start (with the step it resumed from), save and finish.
    work = lab.paths.shared / "jobs" / "stateful"
    subprocess.run(["rm", "-rf", str(work)], check=True)
    work.mkdir(parents=True)
    script = work / "job.sh"
    script.write_text(workload.JOB.format(ha_ops=cluster(lab).ha_ops_command("gpu1")))
    script.chmod(0o755)
    argv = ["sbatch", "--requeue", "--parsable", "-o", "/dev/null", str(script), str(work), "--steps", "60",
            "--step-s", "0.2"]  # fmt: skip
    job_id = lab.node("gpu1").run(argv).stdout.strip()
    running = wait_for("job running", lambda: [j for j in slurm.jobs() if j.id == job_id and j.state == "RUNNING"],
                       timeout=15, interval=0.1)  # fmt: skip
    node = running[0].nodes[0]
    log = work / f"{job_id}.log"

    def events(kind: str) -> list[dict[str, str]]:
        lines = log.read_text().splitlines() if log.exists() else []
        return [fields for event, fields in map(parse_event, lines) if event == kind]

    wait_for("a few checkpoints", lambda: len(events("saved")) >= 5, timeout=20, interval=0.1)

    gpus = lab.node(node).gpus()
    gpus.fall_off_bus(2)
    gpus.break_permanently(2)  # no reset or reboot brings this GPU back: the ladder ends at "replace"

    drained = wait_for(f"{node} drained", lambda: (n := slurm.node(node)).drained and n, timeout=5, interval=0.05)
    # The XID 79 event or the GPU's lost readings, whichever the agent's sweep met first (CI saw both): one fault,
    # the same critical finding and the same rung (reboot), named either way.
    assert "GPU2" in drained.reason and "fallen off the bus" in drained.reason, drained.reason
    wait_for("the spare in the main partition", lambda: "gpu4" in slurm.partition_nodes("gpu"), timeout=10)
    moved = wait_for(
        "job running on another node",
        lambda: [j for j in slurm.jobs() if j.id == job_id and j.state == "RUNNING" and node not in j.nodes],
        timeout=20,
        interval=0.1,
    )
    assert moved[0].nodes[0] != node
    wait_for("job done", lambda: events("done"), timeout=40, interval=0.2)
    starts = events("start")
    assert len(starts) == 2
    assert starts[0]["host"] == node and starts[1]["host"] != node
    assert starts[1]["restart"] == "1"  # SLURM_RESTART_COUNT: the same job, requeued
    assert int(starts[1]["from"]) >= 5  # resumed from its checkpoint, not from step 0
    assert events("done")[0]["step"] == "60"
    account = workload.judge([job_id], {job_id: log.read_text().splitlines()}, queued=set())
    assert account.ok and account.resumed_behind == []  # it resumed at (or after) the last step it saved

    wait_for(f"{node} held for replacement", lambda: phase(lab, node) == "awaiting_repair", timeout=40, interval=0.2)
    assert slurm.node(node).drained
    assert "gpu4" in slurm.partition_nodes("gpu")  # capacity holds while the node is out

    # A person replaces the GPU and says so: validated, returned, and the spare leaves again.
    gpus.clear()
    status, answer = call_controller(lab, leader(lab) or "ctl1", f"/v1/nodes/{node}/repaired", b"{}")
    assert status == 200, answer
    wait_for(f"{node} back in service", lambda: not slurm.node(node).drained, timeout=20, interval=0.2)
    wait_for("the spare out again", lambda: "gpu4" not in slurm.partition_nodes("gpu"), timeout=20, interval=0.2)

    mine = audited(lab, node, Counter({"drain": 1, "requeue_jobs": 1, "resume": 1}))
    assert mine["drain"] == 1 and mine["requeue_jobs"] == 1 and mine["resume"] == 1
    spare = audited(lab, "gpu4", Counter({"spare_in": 1, "spare_out": 1}))
    assert spare == Counter({"spare_in": 1, "spare_out": 1})
    requeue = next(e for e in node_entries(lab, node) if e["what"] == "requeue_jobs")
    assert job_id in requeue["after"]
    assert audit_verify(lab).returncode == 0


def test_transient_fault_is_repaired_and_each_action_audited_once(lab: Lab, slurm: Slurm) -> None:
    lab.node("gpu2").gpus().fall_off_bus(6)
    wait_for("gpu2 drained", lambda: slurm.node("gpu2").drained, timeout=5, interval=0.05)
    wait_for("gpu2 returned", lambda: phase(lab, "gpu2") == "returned", timeout=30, interval=0.2)
    assert not slurm.node("gpu2").drained
    wait_for("the spare out again", lambda: "gpu4" not in slurm.partition_nodes("gpu"), timeout=20, interval=0.2)
    assert kinds(node_entries(lab, "gpu2")) == Counter(
        {"drain": 1, "requeue_jobs": 1, "reboot_node": 1, "validate": 1, "resume": 1}
    )
    assert audited(lab, "gpu4", Counter({"spare_in": 1, "spare_out": 1})) == Counter({"spare_in": 1, "spare_out": 1})


def test_leader_killed_mid_remediation_the_standby_finishes_once(lab: Lab, slurm: Slurm) -> None:
    first = leader(lab)
    assert first is not None
    other = next(n for n in controller_nodes(lab) if n != first)
    lab.node("gpu3").gpus().fall_off_bus(1)
    wait_for("the drain audited", lambda: kinds(node_entries(lab, "gpu3"))["drain"] == 1, timeout=5, interval=0.01)
    lab.node(first).kill("controller")
    killed_at = time.monotonic()
    wait_for("the standby leads", lambda: leader(lab) == other, timeout=10, interval=0.1)
    takeover = time.monotonic() - killed_at
    assert takeover < 10
    wait_for("gpu3 returned", lambda: phase(lab, "gpu3") == "returned", timeout=30, interval=0.2)
    entries = node_entries(lab, "gpu3")
    assert kinds(entries) == Counter({"drain": 1, "requeue_jobs": 1, "reboot_node": 1, "validate": 1, "resume": 1})
    assert any(e["who"].startswith(other) for e in entries), "the standby finished the remediation"
    ids = [e["intent"] for e in audit_entries(lab) if e["intent"]]  # read once: the spare may leave meanwhile
    assert len(set(ids)) == len(ids), f"an intent audited twice: {ids}"
    lab.node(first).start("controller")


def test_frozen_leader_is_replaced_and_acts_on_nothing_when_it_wakes(lab: Lab, slurm: Slurm) -> None:
    first = leader(lab)
    assert first is not None
    other = next(n for n in controller_nodes(lab) if n != first)
    lab.node(first).freeze("controller")
    frozen_at = time.monotonic()
    try:
        wait_for("the standby leads", lambda: leader(lab) == other, timeout=10, interval=0.1)
        assert time.monotonic() - frozen_at < 10
        lab.node("gpu1").gpus().fall_off_bus(0)
        # An agent whose last report went to the frozen leader spends one report timeout on it first.
        wait_for("gpu1 drained by the new leader", lambda: slurm.node("gpu1").drained, timeout=10, interval=0.05)
    finally:
        lab.node(first).thaw("controller")
    wait_for("gpu1 returned", lambda: phase(lab, "gpu1") == "returned", timeout=30, interval=0.2)
    time.sleep(2)  # the woken leader has had time to try
    assert all(not e["who"].startswith(first) for e in audit_entries(lab)), "the old leader acted"
    assert "lost the lease" in lab.node(first).logs("controller", 200) or leader(lab) == other


def test_monitoring_storm_trips_the_breaker_and_the_rest_stay_in_service(lab: Lab, slurm: Slurm) -> None:
    for node in ("gpu1", "gpu2", "gpu3", "gpu4"):
        gpus = lab.node(node).gpus()
        gpus.fall_off_bus(0)
        gpus.break_permanently(0)  # the cordoned node stays out, so "the rest stay in service" is visible
    wait_for("one node drained", lambda: sum(slurm.node(n).drained for n in ("gpu1", "gpu2", "gpu3", "gpu4")) >= 1,
             timeout=5, interval=0.05)  # fmt: skip
    ctl = leader(lab)
    assert ctl is not None

    def breaker() -> dict:
        return call_controller(lab, ctl, "/v1/state")[1]["state"]["breaker"]

    wait_for("breaker open", lambda: breaker()["open"], timeout=10, interval=0.1)
    assert "reaches the limit of 1" in breaker()["reason"]
    time.sleep(3)  # every agent keeps reporting; nothing more may happen
    drained = [n for n in ("gpu1", "gpu2", "gpu3", "gpu4") if slurm.node(n).drained]
    assert len(drained) == 1, drained
    assert [e["node"] for e in audit_entries(lab) if e["what"] == "drain"] == drained
    _, metrics = call_controller(lab, ctl, "/metrics")
    assert 'ha_ops_controller_breaker_open{id="' + ctl + '"} 1.0' in metrics["raw"]

    def alert_firing() -> bool:
        _, body = monitoring.request(lab.ctx, "prometheus", "/api/v1/alerts")
        return any(a["labels"]["alertname"] == "HaOpsRemediationBreakerOpen" and a["state"] == "firing"
                   for a in json.loads(body)["data"]["alerts"])  # fmt: skip

    wait_for("the breaker alert firing in Prometheus", alert_firing, timeout=15, interval=0.5)


def test_flapping_gpu_climbs_the_ladder_instead_of_looping(lab: Lab, slurm: Slurm) -> None:
    gpus = lab.node("gpu1").gpus()
    rungs = []
    for round_ in range(3):
        gpus.double_bit_ecc(4)
        wait_for(f"round {round_}: drained", lambda: slurm.node("gpu1").drained, timeout=5, interval=0.05)
        state = read_state(state_dir(lab.ctx) / "state.json").nodes["gpu1"]
        rungs.append(state.rung.value if state.rung else None)
        if round_ < 2:
            wait_for(f"round {round_}: returned", lambda: phase(lab, "gpu1") == "returned", timeout=30, interval=0.2)
    assert rungs == ["reset_gpu", "reboot_node", "replace"]
    wait_for("held for replacement", lambda: phase(lab, "gpu1") == "awaiting_repair", timeout=10, interval=0.2)
    time.sleep(2)
    assert slurm.node("gpu1").drained
    assert kinds(node_entries(lab, "gpu1"))["resume"] == 2  # two returns, then no more loops


def test_bad_input_gets_400_and_changes_nothing(lab: Lab) -> None:
    ctl = leader(lab)
    assert ctl is not None
    standby = next(n for n in controller_nodes(lab) if n != ctl)
    path = state_dir(lab.ctx) / "state.json"

    def digest() -> str:
        return hashlib.sha256(path.read_bytes()).hexdigest()

    # Hold the state still while we compare it: the agents' own reports (every 5 s) update it legitimately.
    agents = [n.name for n in lab.ctx.layout.nodes_with_role("gpu")]
    for node in agents:
        lab.node(node).freeze("agent")
    try:
        time.sleep(0.5)  # a report already on its way lands first
        before = digest()
        for body in (b"{not json", b"[]", json.dumps({"schema": "ha-ops/agent-report", "version": 1}).encode()):
            status, answer = call_controller(lab, ctl, "/v1/reports", body, identity="agent-gpu1")
            assert status == 400, answer
            assert answer["error"]
        status, answer = call_controller(lab, ctl, "/v1/reports", json.dumps({"schema": "x"}).encode(), "agent-gpu1")
        assert status == 400 and "schema" in answer["error"]
        bad_webhook = json.dumps({"version": "3", "alerts": []}).encode()
        status, answer = call_controller(lab, ctl, "/v1/alerts", bad_webhook, identity="alertmanager")
        assert status == 400 and "version" in answer["error"]
        assert digest() == before
    finally:
        for node in agents:
            lab.node(node).thaw("agent")
    report = {
        "schema": "ha-ops/agent-report", "version": 1, "node": "gpu99", "seq": 1, "agent_id": "x", "sent_at": 1.0,
        "state": "unhealthy", "action": "reboot_node", "reason": "test",
    }  # fmt: skip
    status, answer = call_controller(lab, ctl, "/v1/reports", json.dumps(report).encode(), identity="agent-gpu1")
    assert status == 403 and "may not report for gpu99" in answer["error"]  # only for the node it names
    healthy = {**report, "node": "gpu1", "state": "healthy", "action": "none", "reason": ""}
    status, answer = call_controller(lab, standby, "/v1/reports", json.dumps(healthy).encode(), identity="agent-gpu1")
    assert status == 503 and answer["leader"] == ctl


def test_callers_without_the_right_certificate_are_refused(lab: Lab, slurm: Slurm) -> None:
    """The controllers' API over mutual TLS (issue 20): refused at TLS without a certificate of the lab's CA or
    over plain HTTP, 403 for an agent reporting for another node or resetting the breaker."""
    import http.client
    import ssl

    from ha_ops.lab import tls
    from ha_ops.lab.http import http_post

    ctl = leader(lab)
    assert ctl is not None and lab.spec.remediation is not None
    address, port = lab.ctx.layout.node(ctl).address, lab.spec.remediation.port
    # The stale-seq trick at its strongest: the largest seq a report may carry (2**62 is refused as out of range).
    forged = {"schema": "ha-ops/agent-report", "version": 1, "node": "gpu3", "seq": 2**53, "agent_id": "forged",
              "sent_at": time.time(), "state": "healthy", "action": "none", "reason": ""}  # fmt: skip
    body = json.dumps(forged).encode()
    no_certificate = ssl.create_default_context(cafile=str(tls.files(lab.ctx, "operator").ca_file))
    with pytest.raises((ssl.SSLError, OSError)):  # the server asks for a certificate; none is given
        http_post(lab.ctx.netns("gpu2"), f"https://{address}:{port}/v1/reports", body, context=no_certificate)
    with pytest.raises((OSError, http.client.HTTPException)):  # plain HTTP on the TLS port: no answer
        http_post(lab.ctx.netns("gpu2"), f"http://{address}:{port}/v1/reports", body)
    status, answer = call_controller(lab, ctl, "/v1/reports", body, identity="agent-gpu2")
    assert status == 403 and "the certificate of gpu2 may not report for gpu3" in answer["error"], answer
    too_far = json.dumps({**forged, "node": "gpu2", "seq": 2**62}).encode()
    status, answer = call_controller(lab, ctl, "/v1/reports", too_far, identity="agent-gpu2")
    assert status == 400 and "seq" in answer["error"], answer
    status, answer = call_controller(lab, ctl, "/v1/breaker/reset", b"{}", identity="agent-gpu2")
    assert status == 403 and "not an operator" in answer["error"]
    status, state = call_controller(lab, ctl, "/v1/state")  # an operator may read it: no seq, no agent_id in it
    assert status == 200 and "agent_id" not in json.dumps(state) and '"seq"' not in json.dumps(state)
    # The stale-seq trick: whatever was tried above, a real fault on gpu3 is still taken out, and repaired.
    since = max((e["seq"] for e in audit_entries(lab)), default=0)
    lab.node("gpu3").gpus().fall_off_bus(1)
    wait_for("gpu3 drained", lambda: "drain" in kinds(node_entries(lab, "gpu3", since)), timeout=20, interval=0.2)
    wait_for("gpu3 returned", lambda: phase(lab, "gpu3") == "returned", timeout=40, interval=0.3)


def test_a_hostile_gpu_node_flooding_the_leader_does_not_delay_another_nodes_drain(lab: Lab, slurm: Slurm) -> None:
    """Issue 44, line 2: a job on gpu2 that read its node's agent certificate floods the leader's API from gpu2's
    address (tests/hostile.py, in gpu2's network namespace): 400 TCP connections that never start TLS, 100 trickling
    a ClientHello a byte every 5 s, 64 trickling a report with gpu2's certificate, each opened again when dropped.
    While it holds on, gpu3's GPU falls off the bus: drained within the usual 5 s and returned, as without it."""
    import threading
    import urllib.parse

    from ha_ops.lab import tls

    ctl = leader(lab)
    assert ctl is not None
    where = urllib.parse.urlsplit(controller_url(lab, ctl))
    gpu2 = tls.files(lab.ctx, "agent-gpu2")
    argv = ["nsenter", f"--net=/run/netns/{lab.ctx.netns('gpu2')}", sys.executable, "-m", "tests.hostile",
            "--host", str(where.hostname), "--port", str(where.port), "--ca", str(gpu2.ca_file), "--cert",
            str(gpu2.cert_file), "--key", str(gpu2.key_file), "--half-open", "400", "--slow-handshakes", "100",
            "--slow-bodies", "64", "--seconds", "120"]  # fmt: skip
    attacker = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    rounds: list[dict] = []
    assert attacker.stdout is not None
    reader = threading.Thread(target=lambda out=attacker.stdout: rounds.extend(
        json.loads(line) for line in out if line.startswith("{")), daemon=True)  # fmt: skip
    reader.start()
    try:
        # In place: every kind opened as many as it wants at least once (the server may drop them: then again).
        wait_for("the flood in place", lambda: len(rounds) >= 2 and sum(rounds[-1]["opened"].values()) >= 564,
                 timeout=60, interval=0.5)  # fmt: skip
        since = max((e["seq"] for e in audit_entries(lab)), default=0)
        lab.node("gpu3").gpus().fall_off_bus(1)
        started = time.monotonic()
        wait_for("gpu3 drained", lambda: slurm.node("gpu3").drained, timeout=5, interval=0.05)
        drained_s = time.monotonic() - started
        assert attacker.poll() is None, "the flood ended before the drain"
        print(f"\ngpu3 drained {drained_s:.2f} s after its fault while gpu2 flooded {ctl}: {rounds[-1]}")
        wait_for("gpu3 returned", lambda: phase(lab, "gpu3") == "returned", timeout=40, interval=0.3)
        assert kinds(node_entries(lab, "gpu3", since))["drain"] == 1
    finally:
        attacker.kill()
        attacker.wait(10)
        reader.join(10)
        attacker.stdout.close()


def test_a_certificate_is_renewed_through_the_controllers_for_the_identity_it_presents(lab: Lab) -> None:
    """Issue 20: the controllers hold an issuing CA (an intermediate of the lab's CA) and renew any part's
    certificate, over mutual TLS with the one it holds: a new key, the same identity, whatever the request names; no
    Ansible run and no CA key on the part's host. Either controller issues, the standby too."""
    from cryptography import x509

    from ha_ops.lab import tls
    from ha_ops.security.issuer import new_request
    from ha_ops.security.pki import store

    ctl = leader(lab)
    assert ctl is not None
    standby = next(n for n in controller_nodes(lab) if n != ctl)
    renewed = tls.files(lab.ctx, "renewed-gpu2")
    for controller, identity in ((ctl, "agent-gpu2"), (standby, "renewed-gpu2")):
        key, csr = new_request("gpu3")  # the CN asked for is not the one given
        status, answer = call_controller(lab, controller, "/v1/certificates", json.dumps({"csr": csr}).encode(),
                                         identity=identity)  # fmt: skip
        assert status == 200, answer
        store(renewed.cert_file, renewed.key_file, key, answer["certificate"])
        leaf, issuer = x509.load_pem_x509_certificates(renewed.cert_file.read_bytes())
        assert leaf.subject.rfc4514_string() == "CN=gpu2,O=ha-ops:agents" and leaf.issuer == issuer.subject
    # Used as gpu2's, it chains to the lab's CA and carries gpu2's rights, no more.
    report = {"schema": "ha-ops/agent-report", "version": 1, "node": "gpu3", "seq": 1, "agent_id": "renewed",
              "sent_at": time.time(), "state": "healthy", "action": "none", "reason": ""}  # fmt: skip
    status, answer = call_controller(lab, ctl, "/v1/reports", json.dumps(report).encode(), identity="renewed-gpu2")
    assert status == 403 and "the certificate of gpu2 may not report for gpu3" in answer["error"], answer
    assert call_controller(lab, ctl, "/v1/state", identity="renewed-gpu2")[0] == 403


def test_the_shipped_audit_copy_outlives_the_local_log_and_names_an_edit(lab: Lab, tmp_path: Path) -> None:
    """Issue 20: each entry reaches the central sink (rsyslog on the monitoring node, syslog over TLS from the
    controller's certificate); `audit verify --shipped` finds every local entry there, names an entry edited locally
    with its chain recomputed without the key, and with the local log deleted verifies the shipped copy alone."""
    import os

    from ha_ops.lab import audit_sink
    from ha_ops.remediation.audit import _digest

    lab.node("gpu2").gpus().fall_off_bus(4)
    wait_for("gpu2 returned", lambda: phase(lab, "gpu2") == "returned", timeout=40, interval=0.3)
    local, shipped = state_dir(lab.ctx) / "audit.jsonl", audit_sink.shipped_log(lab.ctx)
    # The episode as written so far (the controller may still append, say a spare's return, while the test reads)
    written, entries = local.read_text().splitlines(), audit_entries(lab)
    wait_for("every entry at the sink", lambda: set(written) <= set(shipped.read_text().splitlines()), timeout=30,
             interval=0.2)  # fmt: skip
    assert {"drain", "resume"} <= set(kinds(entries)) and len(entries) >= 3
    ctl = leader(lab)
    assert ctl is not None
    _, metrics = call_controller(lab, ctl, "/metrics")
    metric = f'ha_ops_audit_shipped_seq{{id="{ctl}"}} '
    shipped_seq = next(float(x.split()[-1]) for x in metrics["raw"].splitlines() if x.startswith(metric))
    assert shipped_seq >= entries[-1]["seq"], (shipped_seq, entries[-1])

    def verify(log: Path) -> tuple[int, dict]:
        argv = [sys.executable, "-m", "ha_ops", "audit", "verify", str(log), "--shipped", str(shipped),
                "--key-file", str(audit_key_path(lab.ctx, "ctl1")), "--json"]  # fmt: skip
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        return out.returncode, json.loads(out.stdout)

    code, result = verify(local)
    assert code == 0 and result["intact"] and result["shipped_entries"] >= len(entries), result
    # Someone who can write the log but not read the key rewrites the drain's reason, and the chain after it.
    edited, prev = [], "0" * 64
    for entry in entries:
        entry = {**entry, "prev": prev} | ({"why": "nothing happened"} if entry["what"] == "drain" else {})
        entry.pop("mac", None)
        entry["hash"] = prev = _digest(entry)
        edited.append(json.dumps(entry, sort_keys=True))
    forged = tmp_path / "audit.jsonl"
    forged.write_text("\n".join(edited) + "\n")
    code, result = verify(forged)
    drain_seq = next(e["seq"] for e in entries if e["what"] == "drain")
    assert (
        code == 1
        and f"seq {drain_seq}: the local log holds it otherwise than the shipped copy (changed)" in (result["problems"])
    ), result
    # The local log deleted: the shipped copy still holds every entry, its keyed chain intact.
    aside = local.with_name("audit.jsonl.aside")
    os.replace(local, aside)
    try:
        code, result = verify(local)
    finally:
        os.replace(aside, local)
    assert code == 0 and result["local_log_present"] is False and result["shipped_entries"] >= len(entries), result


def test_kill_9_at_random_points_loses_no_state(lab: Lab, slurm: Slurm) -> None:
    rng = random.Random(11)
    lab.node("gpu2").gpus().fall_off_bus(3)
    for _ in range(5):
        time.sleep(rng.uniform(0.0, 1.2))
        current = leader(lab)
        if current is not None:
            lab.node(current).kill("controller")
            lab.node(current).start("controller")
    wait_for("gpu2 returned", lambda: phase(lab, "gpu2") == "returned", timeout=60, interval=0.2)
    assert not slurm.node("gpu2").drained
    wait_for("no intent left pending", lambda: not read_state(state_dir(lab.ctx) / "state.json").pending(),
             timeout=20, interval=0.2)  # fmt: skip
    entries = audit_entries(lab)
    ids = [e["intent"] for e in entries if e["intent"]]
    assert len(ids) == len(set(ids)), "an intent was audited twice"
    assert kinds(node_entries(lab, "gpu2"))["drain"] == 1
    result = audit_verify(lab)
    assert result.returncode == 0, result.stderr


def test_audit_verify_detects_a_changed_a_removed_and_a_rechained_line(lab: Lab, slurm: Slurm, tmp_path: Path) -> None:
    lab.node("gpu3").gpus().fall_off_bus(0)
    wait_for("gpu3 returned", lambda: phase(lab, "gpu3") == "returned", timeout=30, interval=0.2)
    lines = (state_dir(lab.ctx) / "audit.jsonl").read_text().splitlines()
    assert len(lines) >= 5
    changed = tmp_path / "changed.jsonl"
    entry = json.loads(lines[1])
    entry["why"] = "nothing happened here"
    changed.write_text("\n".join([lines[0], json.dumps(entry, sort_keys=True), *lines[2:]]) + "\n")
    removed = tmp_path / "removed.jsonl"
    removed.write_text("\n".join([lines[0], *lines[2:]]) + "\n")
    # Edited, then the whole chain recomputed as someone who can write the log but not read the key can: SHA-256.
    rechained, prev = [], "0" * 64
    for line in [lines[0], json.dumps(entry, sort_keys=True), *lines[2:]]:
        body = {k: v for k, v in json.loads(line).items() if k not in ("hash", "mac")} | {"prev": prev}
        body["hash"] = prev = hashlib.sha256(
            json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
        ).hexdigest()
        rechained.append(json.dumps(body, sort_keys=True))
    forged = tmp_path / "rechained.jsonl"
    forged.write_text("\n".join(rechained) + "\n")
    key = ["--key-file", str(audit_key_path(lab.ctx, "ctl1"))]  # on the controller node's disk, not the shared one
    for path, phrase in ((changed, "line 2: content does not match"), (removed, "line 2: seq 3 follows 1"),
                         (forged, "line 1: not keyed")):  # fmt: skip
        result = subprocess.run([sys.executable, "-m", "ha_ops", "audit", "verify", str(path), *key],
                                capture_output=True, text=True, timeout=60)  # fmt: skip
        assert result.returncode == 1
        assert phrase in result.stderr, result.stderr
    intact = audit_verify(lab)
    assert intact.returncode == 0, intact.stderr


def test_the_audit_log_and_the_state_deleted_together_are_named_and_block_the_next_leader(lab: Lab) -> None:
    """Issue 44, finding 5, in the lab: before, deleting both left "0 entries, chain intact" and a fresh start. The
    lease records the audit head (as the leader last saved it), so `audit verify --config` names the cut, the next
    leader leads nothing (HaOpsRemediationBlocked) until a person restores the state, and then leads."""
    first = leader(lab)
    assert first is not None
    other = next(n for n in controller_nodes(lab) if n != first)
    directory, key = state_dir(lab.ctx), str(audit_key_path(lab.ctx, "ctl1"))
    window = json.dumps({"nodes": ["gpu2"], "reason": "issue 44", "ttl_s": 3600}).encode()
    assert call_controller(lab, first, "/v1/maintenance", window)[0] == 200  # (audited)

    def recorded_seq() -> int:
        head = json.loads((directory / "lease.json").read_text()).get("audit_head") or {}
        return int(head.get("seq", 0))

    seq = wait_for("the lease recording the audit head", recorded_seq, timeout=20, interval=0.2)
    lab.node(first).kill("controller")
    (directory / "audit.jsonl").unlink()
    (directory / "state.json").unlink()
    verify = subprocess.run([sys.executable, "-m", "ha_ops", "audit", "verify", "--config",
                             str(config_path(lab.ctx, other))], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert verify.returncode == 1 and f"the lease records the audit head at seq {seq}" in verify.stderr, verify.stderr

    def blocked_alert() -> list[dict]:
        _, body = monitoring.request(lab.ctx, "prometheus", "/api/v1/alerts")
        return [a for a in json.loads(body)["data"]["alerts"]
                if a["labels"]["alertname"] == "HaOpsRemediationBlocked" and a["state"] == "firing"]  # fmt: skip

    [alert] = wait_for("HaOpsRemediationBlocked firing", blocked_alert, timeout=60, interval=0.5)
    assert alert["labels"]["id"] == other and leader(lab) is None
    done = subprocess.run([sys.executable, "-m", "ha_ops", "controller", "state", "restore", "--rebuild-from-audit",
                           "--state-dir", str(directory), "--audit-key-file", key],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    wait_for(f"{other} leads", lambda: leader(lab) == other, timeout=15, interval=0.2)
    assert [e["what"] for e in audit_entries(lab)][:1] == ["state_restore"]  # the loss accepted, audited
    lab.node(first).start("controller")


def test_a_damaged_state_is_alerted_and_restored_from_a_snapshot_with_every_node_as_it_was(
    lab: Lab, slurm: Slurm
) -> None:
    first = leader(lab)
    assert first is not None
    other = next(n for n in controller_nodes(lab) if n != first)
    directory, key = state_dir(lab.ctx), str(audit_key_path(lab.ctx, "ctl1"))

    def state_cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "ha_ops", "controller", "state", *args, "--state-dir",
                               str(directory)], capture_output=True, text=True, timeout=60)  # fmt: skip

    # A history a fresh state would not have: gpu2 in a maintenance window (audited), then a snapshot at the head.
    window = json.dumps({"nodes": ["gpu2"], "reason": "issue 42", "ttl_s": 3600}).encode()
    assert call_controller(lab, first, "/v1/maintenance", window)[0] == 200

    def snapshots() -> list[dict]:
        return json.loads(state_cli("list", "--json").stdout)["snapshots"]

    def newest_at_head() -> dict | None:
        return next((s for s in reversed(snapshots()) if s["at_head"] and s["audit_seq"] > 0), None)

    snap = wait_for("a snapshot at the audit head", newest_at_head, timeout=20, interval=0.5)
    oldest = snapshots()[0]
    nodes = read_state(directory / "state.json").nodes
    before = {n: (r.phase.value, r.maintenance is not None) for n, r in nodes.items()}
    (directory / "state.json").write_text('{"version": 1, "nodes": {"gpu1": ')  # damaged from outside
    lab.node(first).kill("controller")
    killed = time.monotonic()
    lab.node("gpu1").gpus().fall_off_bus(2)

    def blocked_alert() -> list[dict]:
        _, body = monitoring.request(lab.ctx, "prometheus", "/api/v1/alerts")
        return [a for a in json.loads(body)["data"]["alerts"]
                if a["labels"]["alertname"] == "HaOpsRemediationBlocked" and a["state"] == "firing"]  # fmt: skip

    [alert] = wait_for("HaOpsRemediationBlocked firing", blocked_alert, timeout=60, interval=0.5)
    fired = time.monotonic() - killed
    assert alert["labels"]["id"] == other and str(directory / "state.json") in alert["annotations"]["description"]
    drained = wait_for("gpu1 drained by its agent", lambda: (n := slurm.node("gpu1")).drained and n, timeout=30)
    assert drained.reason.startswith("ha-ops: agent: "), drained.reason
    older = state_cli("restore", "--from", oldest["id"], "--audit-key-file", key)
    head = snap["audit_seq"]
    assert older.returncode == 2, older.stderr
    assert f"at audit seq 0, older than the audit log's head (seq {head})" in " ".join(older.stderr.split())
    done = state_cli("restore", "--audit-key-file", key)
    assert done.returncode == 0 and f"from snapshot {snap['id']}" in done.stdout, done.stdout + done.stderr
    wait_for(f"{other} leads", lambda: leader(lab) == other, timeout=10, interval=0.2)
    served = call_controller(lab, other, "/v1/state")[1]["state"]["nodes"]
    after = {n: (r["phase"], r["maintenance"] is not None) for n, r in served.items()}
    # gpu1 excepted: drained by its agent meanwhile, it is the restored leader's to adopt (its phase moves on).
    assert {n: v for n, v in after.items() if n != "gpu1"} == {n: v for n, v in before.items() if n != "gpu1"}
    assert after["gpu2"] == ("healthy", True)
    assert any(p.name.startswith("state.json.damaged-") for p in directory.iterdir())
    print(f"damaged state: HaOpsRemediationBlocked fired {fired:.1f} s after the leader was killed; restored from "
          f"snapshot {snap['id']}")  # fmt: skip
    lab.node(first).start("controller")
