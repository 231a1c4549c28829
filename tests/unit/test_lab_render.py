"""The lab's pure renderers: slurm.conf, gres.conf, FRR, Prometheus/Alertmanager and the ssh command line.

Everything is rendered from examples/lab.yaml (or a variant of it) into a temporary lab root; nothing starts.
"""

from __future__ import annotations

import copy
import functools
import itertools
import re
import subprocess
from collections.abc import Callable
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path
from typing import Any

import pytest
import yaml

from ha_ops.lab import fabric, monitoring, slurm, sshd, tls
from ha_ops.lab.context import LabContext
from ha_ops.lab.paths import NODE_DIR, LabPaths
from ha_ops.spec import ClusterSpec, compute_layout, load_spec, parse_spec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
LAB_YAML = EXAMPLES / "lab.yaml"
PROMTOOL = Path("/usr/bin/promtool")
AMTOOL = Path("/usr/bin/amtool")
IFNAMSIZ = 15  # Linux interface names: at most 15 characters


@functools.cache
def _lab_data() -> dict[str, Any]:
    data = yaml.safe_load(LAB_YAML.read_text())
    assert isinstance(data, dict)
    return data


def make_ctx(spec: ClusterSpec, root: Path) -> LabContext:
    return LabContext(spec, compute_layout(spec), LabPaths(Path(root)))


def variant(mutate: Callable[[dict[str, Any]], None]) -> ClusterSpec:
    """examples/lab.yaml with one change, validated like any spec."""
    data = copy.deepcopy(_lab_data())
    mutate(data)
    return parse_spec(data, "lab-variant")


@pytest.fixture
def ctx(tmp_path: Path) -> LabContext:
    return make_ctx(load_spec(LAB_YAML), tmp_path / "lab")


def gpu_nodes(ctx: LabContext):
    nodes = ctx.layout.nodes_with_role("gpu")
    assert nodes, "the example lab has GPU nodes"
    return nodes


def fields(line: str) -> dict[str, str]:
    """'NodeName=a NodeAddr=b' -> {'NodeName': 'a', 'NodeAddr': 'b'}."""
    out = {}
    for token in line.split():
        key, sep, value = token.partition("=")
        assert sep, f"not key=value: {token!r} in {line!r}"
        assert key not in out, f"{key} twice in {line!r}"
        out[key] = value
    return out


def conf_lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]


def single_settings(text: str) -> dict[str, str]:
    """Settings that appear once per file (everything except the repeated host, node and partition lines)."""
    repeated = ("SlurmctldHost=", "NodeName=", "PartitionName=")
    out: dict[str, str] = {}
    for line in conf_lines(text):
        if line.startswith(repeated):
            continue
        key, sep, value = line.partition("=")
        assert sep, f"not key=value: {line!r}"
        assert key not in out, f"{key} set twice"
        out[key] = value
    return out


# --- slurm.conf --------------------------------------------------------------------------------------------


def test_slurm_conf_controllers_in_spec_order_with_addresses(ctx: LabContext) -> None:
    text = slurm.render_slurm_conf(ctx)
    hosts = [ln for ln in conf_lines(text) if ln.startswith("SlurmctldHost=")]
    expected = [f"SlurmctldHost={h.name}({ctx.layout.node(h.name).address})" for h in ctx.spec.controllers.hosts]
    assert hosts == expected
    assert len(hosts) == 2
    # The addresses are the controllers' own, on their own leaves' subnets.
    for host in ctx.spec.controllers.hosts:
        node = ctx.layout.node(host.name)
        assert node.address in ctx.layout.leaf(node.leaf).subnet


def test_slurm_conf_controller_order_follows_the_spec(tmp_path: Path) -> None:
    spec = variant(lambda d: d["controllers"].update(hosts=list(reversed(d["controllers"]["hosts"]))))
    ctx = make_ctx(spec, tmp_path / "lab")
    hosts = [ln.split("=", 1)[1] for ln in conf_lines(slurm.render_slurm_conf(ctx)) if ln.startswith("SlurmctldHost=")]
    assert [h.split("(")[0] for h in hosts] == ["ctl2", "ctl1"]


def test_slurm_conf_timeouts_come_from_the_spec(tmp_path: Path) -> None:
    spec = variant(lambda d: d["schedulers"]["slurm"].update(slurmctld_timeout_s=7, slurmd_timeout_s=11))
    settings = single_settings(slurm.render_slurm_conf(make_ctx(spec, tmp_path / "lab")))
    assert settings["SlurmctldTimeout"] == "7"
    assert settings["SlurmdTimeout"] == "11"


def test_slurm_conf_settings(ctx: LabContext) -> None:
    settings = single_settings(slurm.render_slurm_conf(ctx))
    slurm_spec = ctx.spec.schedulers.slurm
    assert slurm_spec is not None
    assert settings["ClusterName"] == slurm_spec.cluster_name
    assert settings["SlurmctldTimeout"] == str(slurm_spec.slurmctld_timeout_s)
    assert settings["SlurmdTimeout"] == str(slurm_spec.slurmd_timeout_s)
    # Primary and backup share their state: it lives in the lab's shared folder, not in a node's own folder.
    state = Path(settings["StateSaveLocation"])
    assert state.is_absolute()
    assert state.is_relative_to(ctx.paths.shared)
    assert state == ctx.paths.shared / "slurmctld"
    assert settings["SlurmdParameters"] == "config_overrides"
    assert settings["GresTypes"] == "gpu"
    assert settings["AuthType"] == "auth/munge"


def test_slurm_conf_one_node_line_per_gpu_node(ctx: LabContext) -> None:
    lines = [fields(ln) for ln in conf_lines(slurm.render_slurm_conf(ctx)) if ln.startswith("NodeName=")]
    nodes = gpu_nodes(ctx)
    assert [f["NodeName"] for f in lines] == [n.name for n in nodes]
    for f, node in zip(lines, nodes, strict=True):
        assert f["NodeAddr"] == str(node.address)
        assert f["Gres"] == "gpu:8"
        assert f["CPUs"] == str(node.cpus)
        assert f["RealMemory"] == str(node.memory_mb)
    others = {n.name for n in ctx.layout.nodes} - {n.name for n in nodes}
    assert others, "controllers and the monitoring node are not GPU nodes"
    assert not others & {f["NodeName"] for f in lines}


def test_slurm_conf_main_partition_holds_the_gpu_nodes_and_spares_wait_outside(ctx: LabContext) -> None:
    parts = [fields(ln) for ln in conf_lines(slurm.render_slurm_conf(ctx)) if ln.startswith("PartitionName=")]
    assert len(parts) == 2
    main, spare = parts
    assert main["PartitionName"] == "gpu"
    assert main["Nodes"].split(",") == [n.name for n in gpu_nodes(ctx) if not n.spare]
    assert main["State"] == "UP"
    assert main["Default"] == "YES"
    assert spare["PartitionName"] == "spare"
    assert spare["Nodes"].split(",") == [n.name for n in gpu_nodes(ctx) if n.spare] == ["gpu4"]
    assert spare["State"] == "INACTIVE"


def test_slurm_conf_gres_count_follows_the_pool(tmp_path: Path) -> None:
    spec = variant(lambda d: d["pools"][0].update(gpus_per_node=4))
    lines = [
        fields(ln)
        for ln in conf_lines(slurm.render_slurm_conf(make_ctx(spec, tmp_path / "lab")))
        if ln.startswith("NodeName=")
    ]
    assert lines
    assert {f["Gres"] for f in lines} == {"gpu:4"}


# --- gres.conf ---------------------------------------------------------------------------------------------


def test_gres_conf(ctx: LabContext) -> None:
    lines = conf_lines(slurm.render_gres_conf(ctx))
    assert lines[0] == "AutoDetect=off"
    node_lines = [fields(ln) for ln in lines[1:]]
    assert [f["NodeName"] for f in node_lines] == [n.name for n in gpu_nodes(ctx)]
    for f in node_lines:
        assert f["Name"] == "gpu"
        assert f["File"] == f"{NODE_DIR}/{slurm.GPU_DEVICE_DIR}/nvidia[0-7]"


@pytest.mark.parametrize(("gpus", "files"), [(1, "nvidia0"), (2, "nvidia[0-1]"), (16, "nvidia[0-15]")])
def test_gres_conf_device_range_follows_the_pool(tmp_path: Path, gpus: int, files: str) -> None:
    spec = variant(lambda d: d["pools"][0].update(gpus_per_node=gpus))
    lines = conf_lines(slurm.render_gres_conf(make_ctx(spec, tmp_path / "lab")))
    node_lines = [fields(ln) for ln in lines[1:]]
    assert node_lines
    assert {f["File"] for f in node_lines} == {f"{NODE_DIR}/{slurm.GPU_DEVICE_DIR}/{files}"}


# --- FRR -----------------------------------------------------------------------------------------------------


def bgp_neighbors(bgpd: str) -> list[str]:
    return re.findall(r"^ neighbor (\d+\.\d+\.\d+\.\d+) peer-group FABRIC$", bgpd, re.MULTILINE)


def bgp_networks(bgpd: str) -> list[str]:
    return re.findall(r"^\s+network (\S+)$", bgpd, re.MULTILINE)


def max_paths(bgpd: str) -> list[str]:
    return re.findall(r"^\s+maximum-paths (\d+)$", bgpd, re.MULTILINE)


def test_frr_leaf_announces_exactly_its_subnet_and_peers_with_its_spines(ctx: LabContext) -> None:
    for leaf in ctx.layout.leaves:
        bgpd = fabric.render_configs(ctx, leaf.name)["bgpd.conf"]
        assert bgp_networks(bgpd) == [str(leaf.subnet)]
        links = [lk for lk in ctx.layout.links if lk.leaf == leaf.index]
        assert len(links) == ctx.spec.fabric.uplinks_per_leaf
        assert sorted(bgp_neighbors(bgpd)) == sorted(str(lk.spine_address) for lk in links)
        assert f"router bgp {leaf.asn}" in bgpd.splitlines()
        own_links = {IPv4Network(f"{lk.leaf_address}/31", strict=False) for lk in links}
        for peer in bgp_neighbors(bgpd):
            address = IPv4Address(peer)
            # The peer is the other end of one of the leaf's own /31 links.
            assert address in ctx.spec.network.fabric_cidr
            assert IPv4Network(f"{address}/31", strict=False) in own_links


def test_frr_spines_announce_nothing_and_peer_with_their_leaves(ctx: LabContext) -> None:
    for spine in ctx.layout.spines:
        bgpd = fabric.render_configs(ctx, spine.name)["bgpd.conf"]
        assert bgp_networks(bgpd) == []
        expected = sorted(str(lk.leaf_address) for lk in ctx.layout.links if lk.spine == spine.index)
        assert expected
        assert sorted(bgp_neighbors(bgpd)) == expected


def test_frr_sessions_are_symmetric(ctx: LabContext) -> None:
    """Every session is configured on both ends: A peers B's address exactly when B peers A's."""
    own: dict[str, set[str]] = {s: set() for s in ctx.switch_names()}
    for lk in ctx.layout.links:
        own[f"spine{lk.spine}"].add(str(lk.spine_address))
        own[f"leaf{lk.leaf}"].add(str(lk.leaf_address))
    sessions = set()
    for switch in ctx.switch_names():
        for peer in bgp_neighbors(fabric.render_configs(ctx, switch)["bgpd.conf"]):
            (other,) = [s for s, addrs in own.items() if peer in addrs]
            sessions.add((switch, other))
    assert sessions
    assert all((b, a) in sessions for a, b in sessions)
    assert len(sessions) == 2 * len(ctx.layout.links)


def test_frr_router_ids_are_unique_and_leaf_asns_differ(ctx: LabContext) -> None:
    ids = []
    for switch in ctx.switch_names():
        bgpd = fabric.render_configs(ctx, switch)["bgpd.conf"]
        (rid,) = re.findall(r"^ bgp router-id (\S+)$", bgpd, re.MULTILINE)
        ids.append(rid)
    assert len(set(ids)) == len(ids)
    assert len({lf.asn for lf in ctx.layout.leaves}) == len(ctx.layout.leaves)


def test_frr_ecmp_uses_sixteen_paths(ctx: LabContext) -> None:
    assert ctx.spec.fabric.ecmp
    for switch in ctx.switch_names():
        assert max_paths(fabric.render_configs(ctx, switch)["bgpd.conf"]) == ["16"]


def test_frr_without_ecmp_uses_one_path(tmp_path: Path) -> None:
    spec = variant(lambda d: d["fabric"].update(ecmp=False, spines=1, uplinks_per_leaf=1))
    ctx = make_ctx(spec, tmp_path / "lab")
    for switch in ctx.switch_names():
        assert max_paths(fabric.render_configs(ctx, switch)["bgpd.conf"]) == ["1"]


def test_frr_bfd_profile_from_the_spec(tmp_path: Path) -> None:
    spec = variant(lambda d: d["fabric"].update(bfd_interval_ms=250, bfd_multiplier=5))
    ctx = make_ctx(spec, tmp_path / "lab")
    for switch in ctx.switch_names():
        configs = fabric.render_configs(ctx, switch)
        bfdd = configs["bfdd.conf"].splitlines()
        assert " profile fabric" in bfdd
        settings = {ln.split()[0]: ln.split()[1] for ln in bfdd if ln.startswith("  ")}
        assert settings == {"receive-interval": "250", "transmit-interval": "250", "detect-multiplier": "5"}
        bgpd = configs["bgpd.conf"].splitlines()
        assert " neighbor FABRIC bfd" in bgpd
        assert " neighbor FABRIC bfd profile fabric" in bgpd


def test_frr_bfd_profile_of_the_example(ctx: LabContext) -> None:
    bfdd = fabric.render_configs(ctx, "leaf1")["bfdd.conf"]
    assert f"  receive-interval {ctx.spec.fabric.bfd_interval_ms}\n" in bfdd
    assert f"  transmit-interval {ctx.spec.fabric.bfd_interval_ms}\n" in bfdd
    assert f"  detect-multiplier {ctx.spec.fabric.bfd_multiplier}\n" in bfdd


def test_frr_zebra_keeps_nexthops_out_of_the_kernel_nexthop_api(ctx: LabContext) -> None:
    for switch in ctx.switch_names():
        configs = fabric.render_configs(ctx, switch)
        assert set(configs) == {"zebra.conf", "bgpd.conf", "bfdd.conf", "vtysh.conf"}
        zebra = configs["zebra.conf"].splitlines()
        assert "no zebra nexthop kernel enable" in zebra
        assert f"hostname {switch}" in zebra


@pytest.mark.parametrize("example", ["lab.yaml", "production.yaml"])
def test_host_port_names_are_unique_per_leaf_and_fit_an_interface_name(tmp_path: Path, example: str) -> None:
    ctx = make_ctx(load_spec(EXAMPLES / example), tmp_path / "lab")
    for leaf in ctx.layout.leaves:
        hosts = [n.name for n in ctx.layout.nodes if n.leaf == leaf.index]
        assert hosts
        ports = [fabric.host_port_name(ctx, h) for h in hosts]
        assert len(set(ports)) == len(ports), f"{leaf.name}: {ports}"
        # Nor may a port take the name of the leaf's bridge or uplinks.
        uplinks = {lk.leaf_ifname for lk in ctx.layout.links if lk.leaf == leaf.index}
        assert not set(ports) & (uplinks | {fabric.HOST_BRIDGE})
    for host in ctx.host_names():
        port = fabric.host_port_name(ctx, host)
        assert 0 < len(port) <= IFNAMSIZ
        assert re.fullmatch(r"[A-Za-z0-9_.-]+", port), port


# --- Prometheus and Alertmanager -------------------------------------------------------------------------------


def jobs(config: dict) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for job in config["scrape_configs"]:
        assert job["job_name"] not in out
        out[job["job_name"]] = [t for sc in job["static_configs"] for t in sc["targets"]]
    return out


def test_prometheus_scrape_jobs(ctx: LabContext) -> None:
    mon = ctx.spec.monitoring
    mon_address = ctx.layout.node(mon.host.name).address
    config = monitoring.render_prometheus(ctx)
    scrape = jobs(config)
    assert list(scrape) == ["prometheus", "alertmanager", "ha-ops-agent", "ha-ops-controller"]
    assert scrape["ha-ops-controller"] == [f"{n.address}:8800" for n in ctx.layout.nodes_with_role("controller")]
    assert scrape["prometheus"] == [f"{mon_address}:{mon.prometheus_port}"]
    assert scrape["alertmanager"] == [f"{mon_address}:{mon.alertmanager_port}"]
    agents = scrape["ha-ops-agent"]
    assert agents == [f"{n.address}:{mon.agent_port}" for n in gpu_nodes(ctx)]
    assert len(agents) == len(set(agents)) == 4
    alerting = [t for am in config["alerting"]["alertmanagers"] for sc in am["static_configs"] for t in sc["targets"]]
    assert alerting == [f"{mon_address}:{mon.alertmanager_port}"]
    assert config["global"]["external_labels"] == {"cluster": ctx.name}
    assert config["rule_files"] == [str(ctx.paths.etc / "prometheus" / "rules.yml")]
    assert Path(config["rule_files"][0]).is_absolute()


def test_prometheus_ports_from_the_spec(tmp_path: Path) -> None:
    spec = variant(lambda d: d["monitoring"].update(prometheus_port=19090, alertmanager_port=19093, agent_port=19426))
    ctx = make_ctx(spec, tmp_path / "lab")
    scrape = jobs(monitoring.render_prometheus(ctx))
    assert [t.rsplit(":", 1)[1] for t in scrape["prometheus"]] == ["19090"]
    assert [t.rsplit(":", 1)[1] for t in scrape["alertmanager"]] == ["19093"]
    assert {t.rsplit(":", 1)[1] for t in scrape["ha-ops-agent"]} == {"19426"}


@pytest.mark.parametrize(("seconds", "duration"), [(1, "1s"), (15, "15s"), (300, "300s"), (0.5, "500ms")])
def test_prometheus_intervals_from_the_spec(tmp_path: Path, seconds: float, duration: str) -> None:
    spec = variant(lambda d: d["monitoring"].update(scrape_interval_s=seconds))
    config = monitoring.render_prometheus(make_ctx(spec, tmp_path / "lab"))
    assert config["global"]["scrape_interval"] == duration
    assert config["global"]["evaluation_interval"] == duration


def test_alertmanager_routes_to_a_declared_receiver() -> None:
    config = monitoring.render_alertmanager()
    receivers = [r["name"] for r in config["receivers"]]
    assert len(receivers) == len(set(receivers))
    assert config["route"]["receiver"] in receivers
    # Lab alerts must arrive within seconds.
    assert config["route"]["group_wait"] == "0s"


def test_prepare_writes_the_rendered_files(ctx: LabContext) -> None:
    monitoring.prepare(ctx)
    etc = ctx.paths.etc
    assert yaml.safe_load((etc / "prometheus" / "prometheus.yml").read_text()) == monitoring.render_prometheus(ctx)
    assert yaml.safe_load((etc / "prometheus" / "rules.yml").read_text()) == monitoring.render_rules()
    assert yaml.safe_load((etc / "alertmanager" / "alertmanager.yml").read_text()) == monitoring.render_alertmanager(
        ctx
    )


@pytest.mark.skipif(not PROMTOOL.exists(), reason="promtool is not installed")
@pytest.mark.parametrize("seconds", [1, 0.5, 15])
def test_promtool_accepts_the_prometheus_config(tmp_path: Path, seconds: float) -> None:
    spec = variant(lambda d: d["monitoring"].update(scrape_interval_s=seconds))
    ctx = make_ctx(spec, tmp_path / "lab")
    tls.prepare(ctx)  # promtool checks that the scrape's client certificate exists
    monitoring.prepare(ctx)
    config = ctx.paths.etc / "prometheus" / "prometheus.yml"
    out = subprocess.run(
        [str(PROMTOOL), "check", "config", str(config)], capture_output=True, text=True, timeout=30, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr
    # The rules file was found and checked too, not skipped.
    assert "rules.yml" in out.stdout + out.stderr


@pytest.mark.skipif(not PROMTOOL.exists(), reason="promtool is not installed")
def test_promtool_rejects_a_broken_config(tmp_path: Path) -> None:
    """The check above can fail: promtool says no to a config with an invalid duration."""
    bad = tmp_path / "prometheus.yml"
    bad.write_text(yaml.safe_dump({"global": {"scrape_interval": "0.5s"}}))
    out = subprocess.run(
        [str(PROMTOOL), "check", "config", str(bad)], capture_output=True, text=True, timeout=30, check=False
    )
    assert out.returncode != 0


@pytest.mark.skipif(not AMTOOL.exists(), reason="amtool is not installed")
def test_amtool_accepts_the_alertmanager_config(ctx: LabContext) -> None:
    monitoring.prepare(ctx)
    config = ctx.paths.etc / "alertmanager" / "alertmanager.yml"
    out = subprocess.run(
        [str(AMTOOL), "check-config", str(config)], capture_output=True, text=True, timeout=30, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr


# --- ssh -----------------------------------------------------------------------------------------------------------


def ssh_options(argv: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for flag, value in itertools.pairwise(argv):
        if flag == "-o":
            key, _, val = value.partition("=")
            assert key not in out, f"ssh option {key} given twice (ssh keeps the first)"
            out[key] = val
    return out


def test_ssh_argv_verifies_host_keys_against_the_lab(ctx: LabContext) -> None:
    argv = sshd.ssh_argv(ctx, "10.77.0.12", "hostname", "-f")
    assert argv[0] == "ssh"
    options = ssh_options(argv)
    assert options["StrictHostKeyChecking"] == "yes"
    assert options["UserKnownHostsFile"] == str(ctx.paths.ssh / "known_hosts")
    assert options["UserKnownHostsFile"] == str(sshd.known_hosts(ctx))
    assert options["GlobalKnownHostsFile"] == "/dev/null"
    assert options["BatchMode"] == "yes"
    lowered = [a.lower() for a in argv]
    assert not any(a.endswith(("=no", "=accept-new", "=off")) for a in lowered if a.startswith("stricthostkey"))
    assert "accept-new" not in " ".join(lowered)
    assert "stricthostkeychecking=no" not in lowered
    assert argv[argv.index("-i") + 1] == str(sshd.client_key(ctx))
    assert argv[-3:] == ["root@10.77.0.12", "hostname", "-f"]


def test_ssh_known_hosts_is_per_lab(tmp_path: Path) -> None:
    spec = load_spec(LAB_YAML)
    a = sshd.ssh_argv(make_ctx(spec, tmp_path / "a"), "gpu1")
    b = sshd.ssh_argv(make_ctx(spec, tmp_path / "b"), "gpu1")
    assert ssh_options(a)["UserKnownHostsFile"] != ssh_options(b)["UserKnownHostsFile"]
    assert ssh_options(a)["UserKnownHostsFile"].startswith(str(tmp_path / "a"))


def test_with_tls_every_caller_of_the_controllers_gets_its_own_certificate(ctx: LabContext) -> None:
    from ha_ops.lab import agents, controllers
    from ha_ops.security.tls import ReloadingContext

    tls.prepare(ctx)
    ctl1 = ctx.layout.node("ctl1")
    assert controllers.base_urls(ctx)[0] == f"https://{ctl1.address}:8800"
    assert controllers.render_config(ctx, "ctl1")["tls"] == tls.config_block(ctx, "controller-ctl1")
    agent = agents.render_config(ctx, "gpu2")["controller"]
    assert agent["urls"][0].startswith("https://") and agent["tls"] == tls.config_block(ctx, "agent-gpu2")
    hook = monitoring.render_alertmanager(ctx)["receivers"][0]["webhook_configs"][0]
    assert hook["http_config"]["tls_config"]["cert_file"].endswith("alertmanager.crt")
    scrape = next(
        j for j in monitoring.render_prometheus(ctx)["scrape_configs"] if j["job_name"] == "ha-ops-controller"
    )
    assert scrape["scheme"] == "https" and scrape["tls_config"]["cert_file"].endswith("prometheus.crt")
    # Each certificate names its holder (CN) and role (O), as the controller's API authorises them.
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    for name, (cn, roles, _) in tls.identities(ctx).items():
        assert ReloadingContext(tls.files(ctx, name), server=False).loads == 1  # key and certificate match
        subject = x509.load_pem_x509_certificate(tls.files(ctx, name).cert_file.read_bytes()).subject
        assert [a.value for a in subject.get_attributes_for_oid(NameOID.COMMON_NAME)] == [cn]
        assert [a.value for a in subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == list(roles)


def test_with_tls_prometheus_and_alertmanager_ask_for_a_certificate_and_the_password(ctx: LabContext) -> None:
    import bcrypt

    from ha_ops.lab import controllers

    tls.prepare(ctx)
    monitoring.prepare(ctx)
    mon = ctx.layout.node("mon1").address
    assert monitoring.prometheus_url(ctx) == f"https://{mon}:9090"
    assert monitoring.alertmanager_url(ctx) == f"https://{mon}:9093"
    password = monitoring.password_file(ctx)
    assert password.stat().st_mode & 0o777 == 0o600 and len(password.read_text().strip()) >= 24
    for server in monitoring.SERVERS:
        web = yaml.safe_load((ctx.paths.etc / server / "web.yml").read_text())
        assert web["tls_server_config"]["cert_file"] == str(tls.files(ctx, server).cert_file)
        assert web["tls_server_config"]["client_auth_type"] == "RequireAndVerifyClientCert"
        hashed = web["basic_auth_users"][monitoring.USER]
        assert bcrypt.checkpw(password.read_text().strip().encode(), hashed.encode())
        service = next(s for s in monitoring.monitoring_services(ctx) if s.service == server)
        assert f"--web.config.file={ctx.paths.etc / server / 'web.yml'}" in service.argv
    # Prepared again (a lab brought up again), the web configs are unchanged: the hash is kept while it matches.
    before = {server: (ctx.paths.etc / server / "web.yml").read_bytes() for server in monitoring.SERVERS}
    monitoring.prepare(ctx)
    assert before == {server: (ctx.paths.etc / server / "web.yml").read_bytes() for server in monitoring.SERVERS}
    password.write_text("a-new-password\n")  # ... and made again for a new password
    monitoring.prepare(ctx)
    hashed = yaml.safe_load((ctx.paths.etc / "prometheus" / "web.yml").read_text())["basic_auth_users"][monitoring.USER]
    assert bcrypt.checkpw(b"a-new-password", hashed.encode())
    # Prometheus reaches itself and Alertmanager with its certificate and the password.
    config = monitoring.render_prometheus(ctx)
    own = {j["job_name"]: j for j in config["scrape_configs"]}
    for job in (own["prometheus"], own["alertmanager"], config["alerting"]["alertmanagers"][0]):
        assert job["scheme"] == "https" and job["tls_config"]["cert_file"] == str(
            tls.files(ctx, "prometheus").cert_file
        )
        assert job["basic_auth"] == {"username": monitoring.USER, "password_file": str(password)}
    assert "basic_auth" not in own["ha-ops-controller"]  # the controllers authorise by certificate alone
    # The controller's watch too, as its own identity.
    watch = controllers.render_config(ctx, "ctl2")["monitoring"]
    assert watch["prometheus_url"].startswith("https://")
    assert watch["client"]["tls"]["cert_file"] == str(tls.files(ctx, "controller-ctl2").cert_file)
    assert watch["client"]["password_file"] == str(password)
    if PROMTOOL.exists():  # Prometheus' own parser of web configs
        for server in monitoring.SERVERS:
            out = subprocess.run([str(PROMTOOL), "check", "web-config", str(ctx.paths.etc / server / "web.yml")],
                                 capture_output=True, text=True, timeout=30, check=False)  # fmt: skip
            assert out.returncode == 0, out.stdout + out.stderr


def test_the_audit_sink_is_rsyslog_over_tls_and_each_controller_ships_to_it(ctx: LabContext) -> None:
    from ha_ops.lab import audit_sink, controllers

    tls.prepare(ctx)
    audit_sink.prepare(ctx)
    sink = controllers.render_config(ctx, "ctl2")["audit_sink"]
    assert sink == {"address": str(ctx.layout.node("mon1").address), "port": 6514,
                    "tls": tls.config_block(ctx, "controller-ctl2"),
                    "marker_file": str(ctx.node_dir("ctl2") / "audit-shipped")}  # fmt: skip
    conf = audit_sink.config_path(ctx).read_text()
    assert 'permittedPeer=["ctl1", "ctl2"]' in conf and 'streamDriver.authMode="x509/name"' in conf
    assert str(audit_sink.shipped_log(ctx)) in conf
    # rsyslog's own parser accepts it (a level-1 check loads every module and parses every statement)
    out = subprocess.run(["/usr/sbin/rsyslogd", "-N1", "-f", str(audit_sink.config_path(ctx))],
                         capture_output=True, text=True, timeout=30)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    (service,) = audit_sink.services(ctx)
    assert service.node == "mon1" and service.argv[:2] == ["/usr/sbin/rsyslogd", "-n"]


def test_without_tls_there_is_no_sink_and_no_certificate(tmp_path: Path) -> None:
    from ha_ops.lab import audit_sink, controllers

    spec = variant(lambda d: d["remediation"].update(tls=False, insecure=True))
    plain = make_ctx(spec, tmp_path / "plain")
    tls.prepare(plain)
    audit_sink.prepare(plain)
    assert not (tls.folder(plain)).exists() and not audit_sink.config_path(plain).exists()
    config = controllers.render_config(plain, "ctl1")
    assert "tls" not in config and "audit_sink" not in config and config["insecure"] is True  # (as the spec said)
    assert controllers.base_urls(plain)[0].startswith("http://")
    assert "client" not in config["monitoring"] and monitoring.prometheus_url(plain).startswith("http://")
    monitoring.prepare(plain)
    assert not (plain.paths.etc / "prometheus" / "web.yml").exists()
