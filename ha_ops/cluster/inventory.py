"""The hosts of a real cluster, from an Ansible inventory (YAML or INI, with its group_vars and host_vars), as
`ha-ops inventory` renders it or as the user keeps it. Parsed by ansible-inventory itself: the variables each host
ends up with are exactly the ones Ansible would give it, precedence and group_vars folders included.

Per host: `ansible_host` (its address), `ansible_user`, `ansible_port`, `ansible_ssh_private_key_file`,
`ansible_become` (commands through `sudo -n`), and ha-ops' own variables:
- `ha_ops_known_hosts`: the known_hosts file its host key is verified against (default ~/.ssh/known_hosts);
- `ha_ops_bmc`: its BMC (ha_ops.cluster.power.BmcConfig: kind, address, user, password_file or password_env);
- `ha_ops_gpu_injection`: `dcgm`, `fake` (with `ha_ops_fake_gpu_dir`) or `none`;
- `ha_ops_firewall`: `iptables` (default) or `nftables`;
- `ha_ops_command`: how ha-ops runs on the node (default `ha-ops`);
- `ha_ops_production`: faults need --confirm-production; `ha_ops_spec`: the cluster spec (relative to the file);
- `ha_ops_tls`: the operator's certificate for the controllers' API where the spec serves it over mutual TLS
  (`remediation.tls`): `ca_file`, `cert_file`, `key_file` (relative to the file), an operator identity of the
  cluster CA (docs/security.md);
- `ha_ops_monitoring`: how the operator calls Prometheus and Alertmanager where they ask for a certificate and a
  password: `tls` (`ca_file`, `cert_file`, `key_file`), `username`, `password_file` (relative to the file); plain
  HTTP without it;
- `ha_ops_kubeconfig`: the Kubernetes API, for a spec whose controllers act on Kubernetes (relative to the file;
  default kubectl's own: $KUBECONFIG or ~/.kube/config).
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError

from ha_ops.cluster.power import BmcConfig
from ha_ops.errors import HaOpsError, SpecError
from ha_ops.util.models import ConfigModel
from ha_ops.util.proc import run


class InventoryHost(ConfigModel):
    name: str
    address: str
    user: str = "root"
    port: int = Field(22, ge=1, le=65535)
    key_file: Path | None = None
    known_hosts: Path = Path("~/.ssh/known_hosts")
    become: bool = False
    bmc: BmcConfig | None = None
    gpu_injection: Literal["dcgm", "fake", "none"] = "none"
    fake_gpu_dir: str | None = None
    firewall: Literal["iptables", "nftables"] = "iptables"
    ha_ops_command: str = "ha-ops"
    units: dict[str, str] = Field(default_factory=dict, description="Service -> systemd unit where not the usual.")
    production: bool = False
    boot_wait_s: float = Field(600.0, ge=0, description="After a power on through the BMC, how long ssh may take.")
    groups: tuple[str, ...] = ()
    vars: dict[str, Any] = Field(default_factory=dict, description="Every variable, for runbook placeholders.")


class Inventory(ConfigModel):
    source: Path
    hosts: dict[str, InventoryHost]
    spec: Path | None = None

    @property
    def production(self) -> bool:
        return any(h.production for h in self.hosts.values())

    def host(self, name: str) -> InventoryHost:
        """A host of the inventory; SpecError naming the known ones otherwise (nothing outside it is touched)."""
        if name not in self.hosts:
            raise SpecError(str(self.source), [f"{name!r} is not a host of this inventory (it has "
                                               f"{', '.join(self.hosts)})"])  # fmt: skip
        return self.hosts[name]


def _ansible_inventory(path: Path) -> dict[str, Any]:
    # Beside this Python first: the ansible-core installed with ha-ops, whether or not its environment is activated.
    beside = Path(sys.executable).parent / "ansible-inventory"
    binary = str(beside) if beside.exists() else shutil.which("ansible-inventory")
    if binary is None:
        raise HaOpsError("reading an Ansible inventory needs ansible-core (pip install 'ha-ops[ansible]')")
    quiet = {"ANSIBLE_NOCOLOR": "1", "ANSIBLE_LOCALHOST_WARNING": "False", "ANSIBLE_DEPRECATION_WARNINGS": "False"}
    env = {**os.environ, "ANSIBLE_INVENTORY_UNPARSED_FAILED": "True", "ANSIBLE_INVENTORY_ENABLED": "yaml,ini", **quiet}
    result = run([binary, "-i", str(path), "--list"], env=env, timeout=60, check=False)
    if not result.ok:
        lines = [ln.strip() for ln in result.stderr.splitlines() if ln.strip() and not ln.startswith("[WARNING]")]
        cause = next((ln for ln in lines if ln.startswith("Failed to parse inventory:")), lines[0] if lines else "")
        raise SpecError(str(path), [f"does not parse as an Ansible inventory (YAML or INI): {cause}"])
    return json.loads(result.stdout)


def _groups_of(data: dict[str, Any]) -> dict[str, list[str]]:
    """Every group each host is in, directly or through a parent group."""
    found: dict[str, list[str]] = {}

    def walk(group: str, parents: list[str]) -> None:
        entry = data.get(group) or {}
        for host in entry.get("hosts", []):
            found.setdefault(host, [])
            found[host] += [g for g in [*parents, group] if g not in found[host]]
        for child in entry.get("children", []):
            walk(child, [*parents, group])

    walk("all", [])
    return found


def _address(name: str, hostvars: dict[str, Any]) -> str | None:
    address = hostvars.get("ansible_host")
    if address:
        return str(address)
    try:  # Ansible connects to the inventory name itself when it is an address or a full DNS name
        ipaddress.ip_address(name)
        return name
    except ValueError:
        return name if "." in name else None


def load_inventory(path: Path) -> Inventory:
    """The inventory's hosts; SpecError (exit 2) naming the host and the variable for anything wrong in it."""
    path = Path(path)
    if not path.exists():
        raise SpecError(str(path), ["no such inventory file"])
    data = _ansible_inventory(path)
    hostvars: dict[str, dict[str, Any]] = data.get("_meta", {}).get("hostvars", {})
    groups = _groups_of(data)
    names = sorted(set(hostvars) | set(groups))
    problems: list[str] = []
    hosts: dict[str, InventoryHost] = {}
    spec_paths = set()
    for name in names:
        hv = hostvars.get(name, {})
        address = _address(name, hv)
        if address is None:
            problems.append(f"{name}: no address (set ansible_host)")
            continue
        if hv.get("ha_ops_spec"):
            spec_paths.add(str(hv["ha_ops_spec"]))
        fields: dict[str, Any] = {
            "name": name,
            "address": address,
            "user": hv.get("ansible_user", "root"),
            "port": hv.get("ansible_port", 22),
            "key_file": hv.get("ansible_ssh_private_key_file") or hv.get("ansible_private_key_file"),
            "known_hosts": hv.get("ha_ops_known_hosts", "~/.ssh/known_hosts"),
            "become": hv.get("ansible_become", False),
            "bmc": hv.get("ha_ops_bmc"),
            "gpu_injection": hv.get("ha_ops_gpu_injection", "fake" if hv.get("ha_ops_fake_gpu_dir") else "none"),
            "fake_gpu_dir": hv.get("ha_ops_fake_gpu_dir"),
            "firewall": hv.get("ha_ops_firewall", "iptables"),
            "ha_ops_command": hv.get("ha_ops_command", "ha-ops"),
            "units": hv.get("ha_ops_units") or {},
            "production": hv.get("ha_ops_production", False),
            "boot_wait_s": hv.get("ha_ops_boot_wait_s", 600.0),
            "groups": tuple(groups.get(name, [])),
            "vars": hv,
        }
        try:
            host = InventoryHost(**fields)
        except ValidationError as exc:
            for error in exc.errors():
                where = ".".join(str(p) for p in error["loc"])
                variable = _VARIABLE.get(where.split(".")[0], where)
                problems.append(f"{name}: {variable}{where[len(where.split('.')[0]) :]}: {error['msg']}")
            continue
        if host.gpu_injection == "fake" and not host.fake_gpu_dir:
            problems.append(f"{name}: ha_ops_gpu_injection: fake needs ha_ops_fake_gpu_dir")
        hosts[name] = host
    if len(spec_paths) > 1:
        problems.append(f"ha_ops_spec: hosts name different specs ({', '.join(sorted(spec_paths))})")
    if not names:
        problems.append("no hosts")
    if problems:
        raise SpecError(str(path), problems)
    spec = (path.parent / next(iter(spec_paths))).resolve() if spec_paths else None
    return Inventory(source=path, hosts=hosts, spec=spec)


# Model field -> the inventory variable it comes from, for error messages that name what the user wrote.
_VARIABLE = {"address": "ansible_host", "user": "ansible_user", "port": "ansible_port",
             "key_file": "ansible_ssh_private_key_file", "known_hosts": "ha_ops_known_hosts",
             "become": "ansible_become", "bmc": "ha_ops_bmc", "gpu_injection": "ha_ops_gpu_injection",
             "fake_gpu_dir": "ha_ops_fake_gpu_dir", "firewall": "ha_ops_firewall",
             "ha_ops_command": "ha_ops_command", "units": "ha_ops_units",
             "production": "ha_ops_production", "boot_wait_s": "ha_ops_boot_wait_s"}  # fmt: skip
