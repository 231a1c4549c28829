"""sshd on every lab host and switch, with per-lab host keys and a lab client key; known_hosts lets clients verify."""

from __future__ import annotations

from pathlib import Path

from ha_ops.lab import mgmt
from ha_ops.lab.context import LabContext, ServiceDef
from ha_ops.util.proc import run


def client_key(ctx: LabContext) -> Path:
    return ctx.paths.ssh / "id_ed25519"


def known_hosts(ctx: LabContext) -> Path:
    return ctx.paths.ssh / "known_hosts"


def host_key(ctx: LabContext, node: str) -> Path:
    return ctx.node_dir(node) / "ssh" / "ssh_host_ed25519_key"


def _keygen(path: Path, comment: str) -> None:
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.parent.chmod(0o700)
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)], timeout=10)


def prepare(ctx: LabContext) -> None:
    _keygen(client_key(ctx), f"ha-ops-lab-{ctx.name}")
    authorized = ctx.paths.ssh / "authorized_keys"
    authorized.write_text(Path(f"{client_key(ctx)}.pub").read_text())
    authorized.chmod(0o600)
    entries = []
    data = {n.name: str(n.address) for n in ctx.layout.nodes}  # switches have no address on the hosts' network
    for name in mgmt.nodes(ctx):
        key = host_key(ctx, name)
        _keygen(key, f"{name}.{ctx.name}")
        public = Path(f"{key}.pub").read_text().split()
        addresses = [a for a in (data.get(name), str(mgmt.address(ctx, name))) if a]
        entries.append(f"{','.join([name, *addresses])} {public[0]} {public[1]}")
        config = ctx.node_dir(name) / "ssh" / "sshd_config"
        config.write_text(
            "\n".join(
                [
                    *(f"ListenAddress {a}" for a in addresses),
                    f"HostKey {key}",
                    f"PidFile {ctx.node_dir(name) / 'ssh' / 'sshd.pid'}",
                    f"AuthorizedKeysFile {authorized}",
                    "PermitRootLogin prohibit-password",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "UsePAM no",
                    "StrictModes no",
                    "PrintMotd no",
                    # A real host keeps slurm.conf at /etc/slurm; lab nodes share /etc with this machine.
                    *(f"SetEnv {k}={v}" for k, v in ctx.node_env().items()),
                    "LogLevel INFO",
                    "",
                ]
            )
        )
    known_hosts(ctx).write_text("\n".join(entries) + "\n")


def sshd_services(ctx: LabContext) -> list[ServiceDef]:
    """One sshd per host and per switch: reached on the management network (and on the hosts' own network,
    where the remediation controllers and Ansible reach the hosts)."""
    return [
        ServiceDef(
            name,
            "sshd",
            ["/usr/sbin/sshd", "-D", "-e", "-f", str(ctx.node_dir(name) / "ssh" / "sshd_config")],
            ctx.node_dir(name) / "log" / "sshd.log",
        )
        for name in mgmt.nodes(ctx)
    ]


def ssh_argv(ctx: LabContext, target: str, *command: str) -> list[str]:
    """An ssh command line that logs in with the lab key and refuses any host key not in the lab's known_hosts."""
    return [
        "ssh",
        "-i", str(client_key(ctx)),
        "-o", f"UserKnownHostsFile={known_hosts(ctx)}",
        "-o", "StrictHostKeyChecking=yes",
        "-o", "GlobalKnownHostsFile=/dev/null",
        "-o", "BatchMode=yes",
        "-o", "ConnectTimeout=5",
        f"root@{target}",
        *command,
    ]  # fmt: skip
