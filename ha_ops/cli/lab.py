"""`ha-ops lab`: build, check and remove the local lab cluster, and reach into its nodes."""

from __future__ import annotations

import signal
import socketserver
import time
from pathlib import Path

import typer
import yaml
from rich.table import Table

from ha_ops.cli import output
from ha_ops.errors import LabError, SpecError
from ha_ops.lab.cluster import Lab, teardown
from ha_ops.lab.netns import NETNS_DIR
from ha_ops.lab.paths import LabPaths
from ha_ops.lab.state import service_key
from ha_ops.shipped import shipped
from ha_ops.spec import load_spec
from ha_ops.util.atomic import write_atomic

app = typer.Typer(help="Build, check and remove the local lab cluster (needs root).", no_args_is_help=True)

DEFAULT_SPEC = shipped("examples", "lab.yaml")
# `--lab`, as everywhere else a lab is named (--target lab:NAME's short form); `--name`/`-n` still accepted.
NameOpt = typer.Option("lab", "--lab", "--name", "-n", envvar="HA_OPS_LAB", help="Lab name (the spec's `name`).")
JsonOpt = typer.Option(False, "--json", help="Machine-readable output on stdout.")


def _progress(start: float):
    return lambda message: output.info(f"[{time.monotonic() - start:5.1f}s] {message}")


@app.command()
def up(
    spec: Path = typer.Option(DEFAULT_SPEC, "--spec", "-s", help="Cluster spec to build the lab from."),
    timeout: float = typer.Option(45.0, help="Seconds to wait for the lab to become ready."),
    json_out: bool = JsonOpt,
) -> None:
    """Build the lab from a spec, or repair it if it is already up. Returns when everything is ready."""
    cluster_spec = load_spec(spec)
    start = time.monotonic()
    lab = Lab(cluster_spec)
    lab.up(progress=_progress(start), timeout=timeout)
    elapsed = time.monotonic() - start
    if json_out:
        output.emit_json(
            {"lab": cluster_spec.name, "up": True, "seconds": round(elapsed, 2), "root": str(lab.paths.root)}
        )
    else:
        output.result(f"lab {cluster_spec.name} is up in {elapsed:.1f} s (state in {lab.paths.root})")


@app.command()
def status(name: str = NameOpt, json_out: bool = JsonOpt) -> None:
    """Check real liveness of every node, daemon, BGP session, Slurm and Prometheus. Exit 1 if unhealthy."""
    report = Lab.from_state(name).status()
    if json_out:
        output.emit_json(report)
    else:
        table = Table(title=f"lab {name}: {'healthy' if report['healthy'] else 'UNHEALTHY'} ({report['phase']})")
        for col in ("service", "pid", "state"):
            table.add_column(col)
        for key, svc in report["services"].items():
            style = "" if svc["state"] == "running" else "bold red"
            table.add_row(key, str(svc["pid"]), svc["state"], style=style)
        output.result(table)
        slurm = report.get("slurm") or {}
        for host, state in (slurm.get("controllers") or {}).items():
            output.result(f"slurmctld {host}: {state}")
        for node, info in (slurm.get("nodes") or {}).items():
            output.result(f"slurm node {node}: {info['state']} {info['gres']}")
        for problem in report["problems"]:
            output.error(problem)
    if not report["healthy"]:
        raise typer.Exit(1)


@app.command()
def down(name: str = NameOpt, json_out: bool = JsonOpt) -> None:
    """Remove everything the lab created: processes (by PID, command line checked), namespaces, mounts, files."""
    start = time.monotonic()
    removed = teardown(name, LabPaths.for_lab(name), progress=_progress(start))
    elapsed = time.monotonic() - start
    if json_out:
        output.emit_json({"lab": name, "removed": removed, "seconds": round(elapsed, 2)})
    else:
        output.result(f"lab {name} removed in {elapsed:.1f} s ({len(removed)} items)")


@app.command("exec")
def exec_(
    node: str = typer.Argument(..., help="Node name, e.g. gpu1."),
    command: list[str] = typer.Argument(..., help="Command and arguments (put them after --)."),
    name: str = NameOpt,
    timeout: float = typer.Option(60.0, help="Seconds before the command is killed."),
) -> None:
    """Run a command on a lab node (its network, hostname and files), with SLURM_CONF set."""
    result = Lab.from_state(name).node(node).run(command, timeout=timeout, check=False)
    if result.stdout:
        output.result(result.stdout.rstrip("\n"))
    if result.stderr:
        output.info(result.stderr.rstrip("\n"))
    raise typer.Exit(result.returncode)


ACTIONS = ("start", "stop", "restart", "kill", "freeze", "thaw")


@app.command()
def service(
    node: str = typer.Argument(..., help="Node name ('host' for munged)."),
    service_name: str = typer.Argument(..., metavar="SERVICE", help="Service, e.g. slurmctld, sshd, bgpd."),
    action: str = typer.Argument(..., help=f"One of: {', '.join(ACTIONS)}."),
    name: str = NameOpt,
) -> None:
    """Control one lab service: start, stop, restart, kill (SIGKILL), freeze (SIGSTOP), thaw (SIGCONT)."""
    if action not in ACTIONS:
        raise LabError(f"action {action!r} is not one of: {', '.join(ACTIONS)}")
    handle = Lab.from_state(name).node(node)
    getattr(handle, action)(service_name)
    output.result(f"{node}/{service_name}: {action} done")


@app.command()
def link(
    node: str = typer.Argument(..., help="Node or switch name."),
    interface: str = typer.Argument(..., help="Interface, e.g. eth0 on a host or to-spine1 on a leaf."),
    updown: str = typer.Argument(..., metavar="up|down"),
    name: str = NameOpt,
) -> None:
    """Take a link of a lab node down or bring it up."""
    if updown not in ("up", "down"):
        raise LabError(f"state {updown!r} is not 'up' or 'down'")
    handle = Lab.from_state(name).node(node)
    (handle.link_up if updown == "up" else handle.link_down)(interface)
    output.result(f"{node} {interface}: {updown}")


@app.command()
def power(
    node: str = typer.Argument(..., help="Node name."),
    action: str = typer.Argument(..., metavar="cycle|off", help="cycle: boot it again; off: power loss."),
    repaired: bool = typer.Option(False, "--repaired", help="cycle: the dead hardware was replaced."),
    permanently: bool = typer.Option(False, "--permanently", help="off: broken hardware; no cycle revives it."),
    name: str = NameOpt,
) -> None:
    """The lab's BMC: power a node off (every process on it dies, links down) or cycle it (it boots again).
    The remediation controller power-cycles a lost node through this, as it would through IPMI."""
    if action not in ("cycle", "off"):
        raise LabError(f"action {action!r} is not 'cycle' or 'off'")
    lab = Lab.from_state(name)
    if not (NETNS_DIR / lab.ctx.netns(node)).exists():
        _reexec_on_the_lab_host(lab)  # called from inside a node (the controller's BMC call)
    handle = lab.node(node)
    if action == "off":
        handle.power_off(permanently=permanently)
    else:
        handle.power_cycle(repair=repaired)
    output.result(f"{node}: power {action} done")


@app.command("supervisor", hidden=True)
def supervisor(
    socket: Path = typer.Option(..., "--socket", help="Where the nodes' systemctl reaches it (the lab sets it)."),
    name: str = NameOpt,
) -> None:
    """The lab's stand-in for an init system (a lab service, started by `lab up`): what `systemctl` on a lab node
    asks for, carried out on the lab's supervised services (ha_ops.lab.systemctl)."""
    from ha_ops.lab.systemctl import Supervisor

    server = Supervisor(socket, Lab.from_state(name).node)
    try:
        _serve(server, f"lab supervisor serving the nodes' systemctl at {socket}")
    finally:
        socket.unlink(missing_ok=True)


def _serve(server: socketserver.BaseServer, what: str) -> None:
    """Serve until the lab stops the service (SIGTERM: a clean exit)."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    output.info(what)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


@app.command("bmc", hidden=True)
def bmc_service(
    password_file: Path = typer.Option(..., "--password-file", help="The BMC's password (the lab writes it)."),
    name: str = NameOpt,
) -> None:
    """The lab's BMC (a lab service, started by `lab up`): Redfish for every lab host on the management network."""
    from ha_ops.lab import bmc, mgmt

    lab = Lab.from_state(name)
    server = bmc.Bmc(bmc.LabMachines(lab), bmc.USER, password_file.read_text().strip(),
                     address=str(mgmt.operator_address(lab.ctx)), port=bmc.PORT)  # fmt: skip
    _serve(server.server, f"lab BMC serving Redfish at {server.url}")


def _reexec_on_the_lab_host(lab: Lab) -> None:
    """Run this command again in the lab host's namespaces (the BMC network is outside the cluster's). A node has
    its own /run, so the lab's namespaces are not visible there; the host's munged is a process outside them."""
    import subprocess
    import sys

    anchor = lab.state().services.get(service_key("host", "munged"))
    if anchor is None or anchor.pid is None:
        raise LabError("the lab host cannot be reached from here (no host process to enter)")
    argv = ["nsenter", "-t", str(anchor.pid), "-m", "-n", "-u", "--", sys.executable, "-m", "ha_ops", *sys.argv[1:]]
    raise typer.Exit(subprocess.run(argv, check=False, timeout=120).returncode)


@app.command()
def logs(
    node: str = typer.Argument(...),
    service_name: str = typer.Argument(..., metavar="SERVICE"),
    lines: int = typer.Option(100, "--lines", "-l"),
    name: str = NameOpt,
) -> None:
    """Print the last lines of a lab service's logs."""
    output.result(Lab.from_state(name).node(node).logs(service_name, lines))


@app.command("promote-metalogger")
def promote_metalogger(name: str = NameOpt) -> None:
    """Storage master lost: fence it, move its address to the metalogger's node, start a master there from the
    metalogger's metadata. Clients keep their mounts (the storage runbook's recovery step)."""
    from ha_ops.lab.storage_ops import promote_metalogger as promote

    seconds = promote(Lab.from_state(name))
    output.result(f"the metalogger's node now runs the MooseFS master ({seconds:.1f} s)")


@app.command("rotate-certs")
def rotate_certs(
    name: str = NameOpt,
    lifetime_s: float = typer.Option(86400.0, "--lifetime-s", min=60, help="How long the new certificates are valid."),
    json_out: bool = JsonOpt,
) -> None:
    """Issue every ha-ops certificate of the lab again, with new keys (the lab's rotation; on a cluster the ha_ops_pki
    role or cert-manager rotates them). The controllers, agents, Prometheus and Alertmanager pick them up by
    themselves, from their next connection on; rsyslog (the audit sink) reads its own at start only, so it is
    restarted (the controllers reconnect and send the last entries again)."""
    import datetime as dt

    from ha_ops.lab import audit_sink, tls

    lab = Lab.from_state(name)
    if not tls.enabled(lab.ctx):
        raise SpecError(f"lab {name}", ["remediation.tls is off: the lab issued no certificates to rotate"])
    rotated = tls.rotate(lab.ctx, dt.timedelta(seconds=lifetime_s))
    if audit_sink.enabled(lab.ctx):
        lab.node(audit_sink.node(lab.ctx)).restart("audit-sink")
    if json_out:
        output.emit_json({"rotated": rotated, "lifetime_s": lifetime_s})
    else:
        output.result(f"rotated {len(rotated)} certificates: {', '.join(rotated)}")


@app.command("driver-build")
def driver_build(
    version: str = typer.Argument(..., help="Driver version, e.g. 570.86.15."),
    broken: bool = typer.Option(False, "--broken", help="A build that loses every GPU when loaded."),
    name: str = NameOpt,
) -> None:
    """Make a fake driver build the gpu_driver role can install on the lab's GPU nodes (archive method)."""
    from ha_ops.lab.drivers import build_driver

    path = build_driver(Lab.from_state(name).ctx, version, works=not broken)
    output.result(f"{path}" + (" (broken: loses every GPU)" if broken else ""))


@app.command("driver-install")
def driver_install(
    version: str = typer.Argument(..., help="Driver version, e.g. 550.90.07 (built first, as a working driver)."),
    name: str = NameOpt,
) -> None:
    """Install a driver through the gpu_driver role on every GPU node that runs none from the role yet (all at
    once): the fleet a rollout starts from, as a real site's nodes run their driver before any rollout."""
    from ha_ops.lab.rollouts import active_versions, prepare

    lab = Lab.from_state(name)
    prepare(lab, version, {})
    output.result(", ".join(f"{node}: {v}" for node, v in active_versions(lab).items()))


@app.command("inventory")
def lab_inventory(
    name: str = NameOpt,
    out: Path | None = typer.Option(None, "--out", "-o", help="Write it here, not to stdout."),
    ssh: bool = typer.Option(False, "--ssh", help="For --inventory commands: the lab reached as a real cluster."),
) -> None:
    """The Ansible inventory of the lab: the spec's groups and host variables, the lab's ssh key and known_hosts,
    and the gpu_driver settings that fit lab nodes (node-private slots, fake drivers).

    With --ssh: what `chaos run`, `gameday run` and `runbook verify` take as --inventory to reach the lab as they
    reach a real cluster: hosts and switches at their management addresses, the lab's BMC (Redfish) per host,
    fake-GPU injection on the GPU nodes, and the lab's spec."""
    from ha_ops.lab.drivers import lab_inventory as render
    from ha_ops.lab.inventory import ssh_inventory

    ctx = Lab.from_state(name).ctx
    text = yaml.safe_dump(ssh_inventory(ctx) if ssh else render(ctx), sort_keys=False)
    if out is None:
        output.result(text.rstrip("\n"))
    else:
        write_atomic(out, text)
        output.info(f"lab inventory written to {out}")
