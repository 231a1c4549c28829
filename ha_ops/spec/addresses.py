"""Where the hosts of a spec really are, when something other than the layout picked their addresses: a cloud stack
(infra/aws gives GPU nodes the addresses AWS picks) exports them, and `ha-ops inventory --addresses` renders the
inventory with them so that Ansible reaches the nodes that were built.

Two forms are read: the JSON of `pulumi stack output --json` (a mapping whose `nodes` is {host: address}), or a
plain {host: address} mapping in JSON or YAML."""

from __future__ import annotations

import json
from collections.abc import Mapping
from ipaddress import AddressValueError, IPv4Address
from pathlib import Path

import yaml

from ha_ops.errors import SpecError
from ha_ops.spec.layout import compute_layout
from ha_ops.spec.model import ClusterSpec

STACK_NODES = "nodes"  # the stack output infra/aws exports the spec hosts' addresses under


def read_addresses(path: Path, source: str) -> dict[str, object]:
    """{host: address as written} from a file in either form; nothing is checked against a spec yet."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise SpecError(source, [f"cannot read it: {exc.strerror or exc}"]) from None
    try:
        data = json.loads(text)
    except ValueError:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise SpecError(source, [f"neither JSON nor YAML: {str(exc).splitlines()[0]}"]) from None
    return addresses_in(data, source)


def addresses_in(data: object, source: str) -> dict[str, object]:
    """The {host: address} mapping of a stack's outputs (under `nodes`), or `data` itself when it is one."""
    if not isinstance(data, Mapping):
        raise SpecError(source, [f"the top level must be a mapping of hosts to addresses, got {type(data).__name__}"])
    # A stack's outputs hold `nodes` as a mapping; in a plain mapping every value is an address, never a mapping.
    nodes = data.get(STACK_NODES)
    found = nodes if isinstance(nodes, Mapping) else data
    return {str(host): address for host, address in found.items()}


def resolve_addresses(
    spec: ClusterSpec, addresses: Mapping[str, object], source: str
) -> tuple[dict[str, IPv4Address], list[str]]:
    """The addresses checked against the spec, and the spec's hosts they leave out (in layout order), which keep
    their spec address. Every host must be a host of the spec and every address an IPv4 address (the cluster's
    host network, its inventory and its firewall rules are IPv4); all problems are reported together."""
    hosts = [node.name for node in compute_layout(spec).nodes]
    problems: list[str] = []
    resolved: dict[str, IPv4Address] = {}
    for host, value in addresses.items():
        if host not in hosts:
            problems.append(f"{host}: not a host of spec {spec.name!r}")
            continue
        try:
            if not isinstance(value, str):
                raise AddressValueError(f"{value!r} is not text")
            resolved[host] = IPv4Address(value.strip())
        except AddressValueError:
            problems.append(f"{host}: {value!r} is not an IPv4 address")
    if problems:
        raise SpecError(source, problems)
    return resolved, [h for h in hosts if h not in resolved]
