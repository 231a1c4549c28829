"""What a runbook's manual commands may name, filled from the cluster they are verified against. A runbook's `run`
is the command an on-call engineer types on a real cluster; its placeholders say where:

    {ssh:HOST}      the ssh command that reaches HOST as the inventory says (key, port, known_hosts; sudo with
                    ansible_become): `{ssh:ctl1} systemctl start slurmctld`
    {on:HOST}       how ha-ops runs on HOST: `{ssh:ctl1} {on:ctl1} controller status`
    {address:HOST}  HOST's address in the cluster spec (what its services listen on)
    {ha_ops}        ha-ops on the operator's machine;  {target}: how its commands name this cluster
                    (`--inventory FILE`);  {spec}, {inventory}, {cluster}
    {controller_state}  the remediation controllers' shared state folder (lease, state, audit log): the
                    inventory's ha_ops_controller_state_dir, default /var/lib/ha-ops/controller
    {controller_config:HOST}  the controller's config file on HOST (its log, state and audit key, for `audit verify
                    --config`): the inventory's ha_ops_controller_config_file, default /etc/ha-ops/controller.yaml
    {storage_watch_state}  the storage master's failover watcher's folder (audit log) on the metalogger's host: the
                    inventory's ha_ops_storage_watch_state_dir, default /var/lib/ha-ops/storage-watch
    {rollout_state}  the driver rollout's state folder on the rollout host: the inventory's
                    ha_ops_rollout.state_dir, default /var/lib/ha-ops/rollout
    {mfsmaster}     the storage master's service address (the spec's)

In the lab, {ssh:HOST} enters the node (`ha-ops lab exec HOST --`), and {lab}, {root}, {python}, {mfsmaster} name the
lab's own folder and tools for the few `lab_run` steps where the lab truly differs."""

from __future__ import annotations

import string
from collections.abc import Callable

PER_HOST = frozenset({"ssh", "on", "address", "controller_config"})  # {ssh:HOST}: these name a host in their spec
NAMES = PER_HOST | frozenset(
    {"ha_ops", "target", "spec", "inventory", "cluster", "controller_state", "storage_watch_state", "rollout_state",
     "mfsmaster", "lab", "root", "python"}
)  # fmt: skip


class PerHost:
    """A placeholder that names a host in its format spec: `{ssh:gpu1}`."""

    def __init__(self, what: str, render: Callable[[str], str], hosts: list[str]) -> None:
        self.what = what
        self.render = render
        self.hosts = hosts

    def __format__(self, host: str) -> str:
        if host not in self.hosts:
            raise KeyError(f"{self.what}:{host}" if host else f"{self.what}:HOST (it names a host)")
        return self.render(host)


def ssh_argv(user: str, address: str, port: int, key_file: str | None, known_hosts: str, become: bool) -> list[str]:
    """The ssh an engineer runs: the host key checked against known_hosts, never accepted on first sight."""
    argv = ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={known_hosts}",
            "-o", "ConnectTimeout=10", "-p", str(port)]  # fmt: skip
    argv += ["-i", key_file] if key_file else []
    return [*argv, f"{user}@{address}", *(["sudo", "-n"] if become else [])]


def fill(template: str, values: dict[str, object]) -> str:
    """The command with its placeholders filled; KeyError naming the first one the cluster has no value for."""
    return template.format_map(values)


def template_problem(template: str) -> str | None:
    """Why a runbook's command is not a template `fill` can fill, or None: every placeholder one of NAMES, by name
    (`{0}` and `{}` have no value; `{spec.__class__}` or `{ssh[0]}` would reach into the values' objects), without a
    conversion (`!r`), and a host given to each of PER_HOST. Braces meant literally are doubled: `{{print $1}}`."""
    try:
        fields = [(name, spec, conversion) for _, name, spec, conversion in string.Formatter().parse(template)
                  if name is not None]  # fmt: skip
    except ValueError as exc:
        return f"not a command template ({exc}; write a literal brace as {{{{ or }}}})"
    for name, spec, conversion in fields:
        if not name or name.isdigit():
            return f"{{{name}}} names no placeholder (one of: {', '.join(sorted(NAMES))})"
        if not name.isidentifier():
            return (f"{{{name}}}: a placeholder is a plain name (no attribute, index or space; a literal brace is "
                    "written {{ or }})")  # fmt: skip
        if name not in NAMES:
            return f"{{{name}}} is not a placeholder (one of: {', '.join(sorted(NAMES))})"
        if conversion:
            return f"{{{name}!{conversion}}}: a placeholder takes no conversion"
        if name in PER_HOST and not spec:
            return f"{{{name}}} names a host: {{{name}:HOST}}"
    return None
