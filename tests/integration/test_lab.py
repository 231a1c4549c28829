"""The lab from examples/lab.yaml, with real daemons: fabric, Slurm, sshd, monitoring, node handles."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from ha_ops.errors import CommandFailed, TransportError
from ha_ops.lab import fabric, netns, sshd
from ha_ops.lab.cluster import Lab
from ha_ops.transport import SSHTransport
from ha_ops.util.wait import wait_for
from tests.labkit import firewall_matrix_problems

pytestmark = pytest.mark.lab


def test_every_node_reaches_every_other_across_the_fabric(lab: Lab) -> None:
    nodes = lab.ctx.layout.nodes
    for node in nodes:
        targets = " ".join(str(n.address) for n in nodes if n.name != node.name)
        script = f"for t in {targets}; do ping -c1 -W1 -q $t >/dev/null || echo unreachable $t; done"
        out = lab.node(node.name).run(["sh", "-c", script], timeout=30).stdout
        assert out == "", f"from {node.name}: {out}"


def test_the_host_firewalls_let_in_exactly_the_flows_the_cluster_needs(lab: Lab) -> None:
    """Issue 20: every host pair and every port some flow opens, probed from inside the source's namespace: an
    allowed flow answers (accepted, or refused where nothing listens: the SYN got in), a blocked one gets no answer
    at all (dropped), and each host's drop counter counts them. The rest of the suite runs with them on."""
    assert firewall_matrix_problems(lab) == []


def test_bgp_established_and_ecmp_installed(lab: Lab) -> None:
    assert fabric.fabric_problems(lab.ctx) == []
    leaf1, leaf2 = lab.ctx.layout.leaves
    assert fabric.ecmp_paths(lab.ctx, leaf1.name, str(leaf2.subnet)) == 2
    peers = fabric.bgp_peers(lab.ctx, "spine1")
    assert len(peers) == 2 and set(peers.values()) == {"Established"}


def test_each_node_has_its_own_hostname_and_hosts_view(lab: Lab) -> None:
    for name in ("gpu1", "ctl2", "mon1", "leaf1"):
        assert lab.node(name).run(["hostname"]).stdout.strip() == name
    hosts = lab.node("gpu1").run(["getent", "hosts", "gpu4"]).stdout.split()
    assert hosts[0] == str(lab.ctx.layout.node("gpu4").address)


def test_one_controller_in_control_and_four_gpu_nodes_idle(lab: Lab) -> None:
    controllers = lab.slurm_controllers()
    assert controllers == {"ctl1": "UP", "ctl2": "UP"}
    nodes = lab.slurm_nodes()
    assert sorted(nodes) == ["gpu1", "gpu2", "gpu3", "gpu4"]
    for info in nodes.values():
        assert info["state"] == "idle"
        assert info["gres"] == "gpu:8"


def test_job_runs_on_the_chosen_node(lab: Lab) -> None:
    out = lab.node("gpu1").run(["srun", "-w", "gpu3", "--gres=gpu:2", "hostname"], timeout=30).stdout
    assert out.strip() == "gpu3"


def test_ssh_with_host_key_checking(lab: Lab) -> None:
    # From a controller: with the host firewalls on, a GPU node takes ssh only from controllers and admin hosts.
    ok = lab.node("ctl1").run(sshd.ssh_argv(lab.ctx, "gpu2", "hostname"), timeout=20)
    assert ok.stdout.strip() == "gpu2"
    # The same login against a known_hosts without gpu2's key must be refused.
    wrong = lab.paths.root / "empty_known_hosts"
    wrong.write_text("")
    argv = [a.replace(str(sshd.known_hosts(lab.ctx)), str(wrong)) for a in sshd.ssh_argv(lab.ctx, "gpu2", "hostname")]
    with pytest.raises(CommandFailed, match="Host key verification failed"):
        lab.node("ctl1").run(argv, timeout=20)


def test_paramiko_transport_verifies_host_keys(lab: Lab) -> None:
    gpu2 = lab.ctx.layout.node("gpu2")
    ns = lab.ctx.netns("ctl1")  # (a controller may ssh to a GPU node)

    def sock():
        return netns.connect_in(ns, (str(gpu2.address), 22))

    good = SSHTransport(
        "gpu2", "gpu2", key_file=sshd.client_key(lab.ctx), known_hosts=sshd.known_hosts(lab.ctx), sock_factory=sock
    )
    try:
        assert good.run(["hostname"]).stdout.strip() == "gpu2"
        assert good.run(["sh", "-c", "exit 3"], check=False).returncode == 3
    finally:
        good.close()
    empty = lab.paths.root / "paramiko_empty_known_hosts"
    empty.write_text("")
    bad = SSHTransport("gpu2", "gpu2", key_file=sshd.client_key(lab.ctx), known_hosts=empty, sock_factory=sock)
    with pytest.raises(TransportError, match="gpu2"):
        bad.run(["hostname"])


def test_prometheus_and_alertmanager_configured_from_the_spec(lab: Lab) -> None:
    from ha_ops.lab import monitoring

    def listed() -> list[dict]:
        status, body = monitoring.request(lab.ctx, "prometheus", "/api/v1/targets")
        assert status == 200
        return json.loads(body)["data"]["activeTargets"]

    # Prometheus is ready before its first target discovery: a lab just built may list none for a moment.
    wait_for("Prometheus lists its targets", lambda: len(listed()) >= 8, timeout=10, interval=0.2)
    targets = listed()
    jobs = {t["labels"]["job"] for t in targets}
    assert jobs == {"prometheus", "alertmanager", "ha-ops-agent", "ha-ops-controller"}
    assert len([t for t in targets if t["labels"]["job"] == "ha-ops-agent"]) == 4
    status, _ = monitoring.request(lab.ctx, "alertmanager", "/api/v2/status")
    assert status == 200


def test_prometheus_and_alertmanager_ask_for_a_certificate_and_the_password(lab: Lab) -> None:
    """remediation.tls: both serve over TLS, ask for a client certificate from the lab's CA and the monitoring
    password, and Prometheus and the controllers reach them so."""
    import ssl

    from ha_ops.lab import monitoring, tls
    from ha_ops.lab.http import http_get
    from ha_ops.monitoring.web import MonitoringClient, MonitoringSession
    from tests.labkit import call_controller, leader

    ctx = lab.ctx
    ns = ctx.netns("mon1")
    prometheus, alertmanager = monitoring.prometheus_url(ctx), monitoring.alertmanager_url(ctx)
    # Plain HTTP: the exporter toolkit answers 400 ("Client sent an HTTP request to an HTTPS server").
    assert http_get(ns, prometheus.replace("https://", "http://") + "/-/ready")[0] == 400
    # TLS without a client certificate: the handshake fails.
    anonymous = ssl.create_default_context(cafile=str(tls.files(ctx, "operator").ca_file))
    with pytest.raises(OSError):
        http_get(ns, alertmanager + "/-/ready", context=anonymous)
    operator = monitoring.client(ctx, "operator")
    assert operator is not None and operator.password_file is not None

    def ask(caller: MonitoringClient, url: str, body: bytes | None = None) -> int:
        connect = lambda h, p, t: netns.connect_in(ns, (h, p), timeout=t)  # noqa: E731
        return MonitoringSession(caller).request(connect, "POST" if body else "GET", url, body)[0]

    # A GPU node's certificate is the CA's too, but holds no password: it may neither read nor post alerts.
    agent = MonitoringClient(tls=tls.files(ctx, "agent-gpu1"))
    assert ask(agent, prometheus + "/api/v1/targets") == 401
    forged = json.dumps([{"labels": {"alertname": "HaOpsGpuNodeUnhealthy", "node": "gpu1"}}]).encode()
    assert ask(agent, alertmanager + "/api/v2/alerts", forged) == 401
    wrong = operator.model_copy(update={"password_file": ctx.paths.root / "wrong-password"})
    (ctx.paths.root / "wrong-password").write_text("guess\n")
    assert ask(wrong, prometheus + "/-/ready") == 401
    assert ask(operator, prometheus + "/-/ready") == ask(operator, alertmanager + "/-/ready") == 200

    # Prometheus scrapes itself and Alertmanager, and sends to it, with its own certificate and the password.
    def own_targets() -> dict[str, str]:
        targets = json.loads(monitoring.request(ctx, "prometheus", "/api/v1/targets")[1])["data"]["activeTargets"]
        return {t["labels"]["job"]: t["health"] for t in targets if t["labels"]["job"] in monitoring.SERVERS}

    all_up = {server: "up" for server in monitoring.SERVERS}
    wait_for("Prometheus scraping itself and Alertmanager", lambda: own_targets() == all_up, timeout=15, interval=0.5)
    managers = json.loads(monitoring.request(ctx, "prometheus", "/api/v1/alertmanagers")[1])["data"]
    assert [m["url"] for m in managers["activeAlertmanagers"]] == [f"{alertmanager}/api/v2/alerts"]
    alerts = json.loads(monitoring.request(ctx, "alertmanager", "/api/v2/alerts")[1])
    assert not [a for a in alerts if a["labels"].get("node") == "gpu1"]
    # The leader's watch reaches Prometheus with its certificate and the password: it polls every second and
    # would count monitoring down after 2 polls without an answer.
    ctl = leader(lab)
    assert ctl is not None
    _, metrics = call_controller(lab, ctl, "/metrics")
    assert f'ha_ops_controller_monitoring_down{{id="{ctl}"}} 0.0' in metrics["raw"]


def test_link_down_cuts_the_node_off_and_up_restores_it(lab: Lab) -> None:
    gpu2 = str(lab.ctx.layout.node("gpu2").address)
    node = lab.node("gpu1")
    node.link_down("eth0")
    try:
        assert not node.run(["ping", "-c1", "-W1", gpu2], check=False).ok
    finally:
        node.link_up("eth0")
    wait_for("gpu1 reaches gpu2 again", lambda: node.run(["ping", "-c1", "-W1", gpu2], check=False).ok, timeout=10)


def test_freeze_and_thaw_a_service(lab: Lab) -> None:
    node = lab.node("gpu4")
    node.freeze("slurmd")
    try:
        assert node.is_frozen("slurmd")
        assert lab.status()["services"]["gpu4/slurmd"]["state"] == "frozen"
    finally:
        node.thaw("slurmd")
    assert node.is_running("slurmd")


def test_logs_are_readable(lab: Lab) -> None:
    text = lab.node("ctl1").logs("slurmctld", lines=500)
    assert "slurmctld version" in text  # the daemon's own start line, not just the file name in the header


def test_up_again_repairs_a_killed_service_and_leaves_the_rest(lab: Lab) -> None:
    before = {k: s.pid for k, s in lab.state().services.items()}
    lab.node("gpu2").kill("slurmd")
    lab.node("spine2").kill("bgpd")
    assert not lab.node("gpu2").is_running("slurmd")
    lab.up()
    after = {k: s.pid for k, s in lab.state().services.items()}
    changed = sorted(k for k in before if before[k] != after[k])
    assert changed == ["gpu2/slurmd", "spine2/bgpd"]
    assert lab.status()["healthy"]


def test_status_cli_reports_real_liveness(lab: Lab) -> None:
    cmd = [sys.executable, "-m", "ha_ops", "lab", "status", "--lab", lab.spec.name, "--json"]
    ok = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["healthy"] is True
    lab.node("mon1").kill("alertmanager")
    try:
        bad = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert bad.returncode == 1
        assert "service mon1/alertmanager: dead" in json.loads(bad.stdout)["problems"]
    finally:
        lab.node("mon1").start("alertmanager")
    wait_for("lab healthy", lambda: lab.status()["healthy"], timeout=20, interval=0.5)


def test_unknown_service_and_interface_are_named_in_the_error(lab: Lab) -> None:
    from ha_ops.errors import LabError

    with pytest.raises(LabError, match="runs no service 'nope'; it runs: sshd, netwatch, slurmd"):
        lab.node("gpu1").kill("nope")
    with pytest.raises(LabError, match="no interface 'eth9'"):
        lab.node("gpu1").link_down("eth9")


def test_up_is_quick_and_touches_nothing_when_nothing_changed(lab: Lab) -> None:
    before = {k: s.pid for k, s in lab.state().services.items()}
    holders = {k: n.holder_pid for k, n in lab.state().nodes.items()}
    start = time.monotonic()
    lab.up()
    assert time.monotonic() - start < 5
    assert {k: s.pid for k, s in lab.state().services.items()} == before
    assert {k: n.holder_pid for k, n in lab.state().nodes.items()} == holders


def test_slurm_jobs_read_from_json_keep_a_hostile_name_a_name(lab: Lab) -> None:
    """Issue 20: the adapter reads jobs from `squeue --json`. A job named to look like other fields and like another
    squeue line (`Requeue=1`, a newline, `77|RUNNING|gpu9|...`) is one job with that name, not requeueable because
    it was submitted --no-requeue; a --requeue job is; a cancelled job is no longer listed and reads CANCELLED; the
    partition's nodes are those `scontrol show partition` names."""
    from ha_ops.schedulers.slurm import Slurm, expand_hostlist

    slurm = Slurm(lab.transport("gpu1"))
    hostile = "x Requeue=1 State=RUNNING\n77|RUNNING|gpu9|forged"
    node = lab.node("gpu1")

    def submit(*argv: str) -> str:
        return node.run(["sbatch", "--parsable", "-o", "/dev/null", "-w", "gpu2", *argv, "--wrap", "sleep 120"],
                        timeout=30).stdout.strip()  # fmt: skip

    plain = submit("--no-requeue", "-J", hostile)
    requeueable = submit("--requeue", "-J", "ordinary")
    try:
        wait_for("both jobs listed", lambda: {plain, requeueable} <= {j.id for j in slurm.jobs()}, timeout=30,
                 interval=0.5)  # fmt: skip
        mine = {j.id: j for j in slurm.jobs() if j.id in (plain, requeueable)}
        assert mine[plain].name == hostile and mine[requeueable].name == "ordinary"
        assert all(j.nodes in ((), ("gpu2",)) for j in mine.values()), mine
        assert "77" not in {j.id for j in slurm.jobs()} and not slurm.jobs_on("gpu9")
        assert slurm.job_requeueable(plain) is False
        assert slurm.job_requeueable(requeueable) is True
        shown = node.run(["scontrol", "show", "partition", "-o", "gpu"], timeout=15).stdout
        listed = next(t.removeprefix("Nodes=") for t in shown.split() if t.startswith("Nodes="))
        assert sorted(slurm.partition_nodes("gpu")) == sorted(expand_hostlist(listed))
    finally:
        node.run(["scancel", plain, requeueable], check=False, timeout=15)
    wait_for("the jobs ended", lambda: not {plain, requeueable} & {j.id for j in slurm.jobs()}, timeout=30,
             interval=0.5)  # fmt: skip
    assert slurm.job_state(plain) == "CANCELLED"


def test_slurm_states_read_from_json_match_sinfo_and_scontrol_and_no_reason_changes_them(lab: Lab) -> None:
    """The Slurm adapter reads nodes from `sinfo --json`: its states are the words sinfo's %T and scontrol's State=
    print, in each state the controller acts on (drained, down, not responding), and a reason written to look like
    other fields (`State=IDLE`, `NodeName=n9`, a newline and a forged sinfo line) is read back as a reason only."""
    from ha_ops.schedulers.slurm import Slurm

    slurm = Slurm(lab.transport("gpu1"))
    node = "gpu3"
    hostile = "test: x [a@b] State=IDLE NodeName=n9 Reason=none\ngpu3|idle|forged"

    def as_slurm_prints_them() -> tuple[dict[str, str], dict[str, str]]:
        sinfo = lab.node("gpu1").run(["sinfo", "-h", "-N", "-o", "%N %T"], timeout=15).stdout.split("\n")
        words = dict(line.split() for line in sinfo if line.strip())
        shown = lab.node("gpu1").run(["scontrol", "show", "node", "-o", node], timeout=15).stdout
        return words, {node: shown.split(" State=", 1)[1].split()[0]}

    def agree(expected: str) -> None:
        # Slurm may move the node on between the reads (a DOWN node whose slurmd answers returns to IDLE+DRAIN:
        # ReturnToService=2): compare reads taken together, a few times until Slurm holds still.
        for _ in range(10):
            words, states = as_slurm_prints_them()
            read, one = slurm.node_states_and_reasons(), slurm.node(node)
            if words == as_slurm_prints_them()[0]:
                break
            time.sleep(0.3)
        assert {n: s for n, (s, _) in read.items()} == words, (read, words)
        assert one.state == states[node], (one, states)
        if expected:
            assert read[node][0] == expected, read

    try:
        agree("idle")
        lab.node("gpu1").run(["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={hostile}"])
        agree("drained")
        assert slurm.node(node).drained and slurm.node(node).reason == hostile
        assert slurm.node_states_and_reasons()[node] == ("drained", hostile)
        assert set(slurm.node_states_and_reasons()) == {"gpu1", "gpu2", "gpu3", "gpu4"}  # no node n9
        lab.node("gpu1").run(["scontrol", "update", f"NodeName={node}", "State=DOWN", "Reason=test: lost"])
        agree("")  # whatever sinfo calls DOWN+DRAIN (or IDLE+DRAIN once slurmd answered), the adapter says it too
        assert slurm.node(node).drained
        lab.node(node).stop("slurmd")  # not responding: `*`
        wait_for("gpu3 not responding", lambda: slurm.node_states_and_reasons()[node][0].endswith("*"),
                 timeout=30, interval=0.5)  # fmt: skip
        agree("")
    finally:
        lab.node(node).start("slurmd")
        lab.node("gpu1").run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], check=False)
        wait_for("gpu3 idle again", lambda: slurm.node_states_and_reasons()[node][0] == "idle", timeout=30,
                 interval=0.5)  # fmt: skip
