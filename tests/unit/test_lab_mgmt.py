"""The lab's management network plan and the inventory that reaches the lab over it (pure: the root namespace's
addresses are given, nothing is created)."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

import pytest

from ha_ops.cluster.inventory import load_inventory
from ha_ops.lab import mgmt
from ha_ops.lab.context import LabContext
from ha_ops.lab.inventory import ssh_inventory
from ha_ops.lab.paths import LabPaths
from ha_ops.spec import compute_layout, load_spec
from ha_ops.util.proc import CommandResult

REPO = Path(__file__).resolve().parents[2]


def lab(tmp_path: Path, name: str) -> LabContext:
    spec = load_spec(REPO / "examples" / "lab.yaml").model_copy(update={"name": name})
    return LabContext(spec, compute_layout(spec), LabPaths.for_lab(name, base=tmp_path))


@pytest.fixture
def root_addresses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The root namespace's IPv4 addresses, as `ip -j -4 addr show` would list them."""
    addresses: list[str] = []

    def ip(*args: str, **_: object) -> CommandResult:
        assert args == ("-j", "-4", "addr", "show")
        listing = [{"ifname": f"if{i}", "addr_info": [{"local": a, "prefixlen": 24}]} for i, a in enumerate(addresses)]
        return CommandResult(["ip", *args], 0, json.dumps(listing), "")

    monkeypatch.setattr(mgmt.netns, "ip", ip)
    return addresses


def test_each_lab_takes_a_subnet_no_other_lab_and_no_local_address_uses(tmp_path: Path, root_addresses) -> None:  # type: ignore[no-untyped-def]
    first = mgmt.subnet(lab(tmp_path, "one"))
    root_addresses.append("169.254.7.1")  # e.g. something else on this machine
    taken = {first.network_address.packed[2], 7}
    for name in ("two", "three", "four"):
        subnet = mgmt.subnet(lab(tmp_path, name))
        third = subnet.network_address.packed[2]
        assert third not in taken | {0, 169, 255} and subnet.prefixlen == 24
        taken.add(third)
    assert mgmt.subnet(lab(tmp_path, "one")) == first  # kept: the same on every later call


def test_every_node_and_switch_has_its_own_address_and_the_operator_the_first(tmp_path: Path, root_addresses) -> None:  # type: ignore[no-untyped-def]
    ctx = lab(tmp_path, "one")
    addresses = [mgmt.address(ctx, n) for n in mgmt.nodes(ctx)]
    assert len(set(addresses)) == len(addresses) == len(ctx.switch_names()) + len(ctx.host_names())
    assert all(a in mgmt.subnet(ctx) and a != mgmt.operator_address(ctx) for a in addresses)
    assert mgmt.operator_address(ctx) == mgmt.subnet(ctx).network_address + 1
    assert len(mgmt.root_interface(ctx.name)) <= 15 and mgmt.namespace(ctx).startswith("hao-one-")


def test_the_lab_inventory_for_ssh_reaches_every_node_on_the_management_network(tmp_path: Path, root_addresses) -> None:  # type: ignore[no-untyped-def]
    import yaml

    ctx = lab(tmp_path, "one")
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(ssh_inventory(ctx)))
    inventory = load_inventory(path)
    assert set(inventory.hosts) == set(ctx.host_names()) | set(ctx.switch_names())
    assert inventory.spec == ctx.paths.etc / "spec.yaml" and load_spec(inventory.spec).name == "one"
    for name, host in inventory.hosts.items():
        assert ipaddress.ip_address(host.address) == mgmt.address(ctx, name)
        assert host.known_hosts == ctx.paths.ssh / "known_hosts"
    gpu = inventory.hosts["gpu1"]
    assert gpu.gpu_injection == "fake" and gpu.fake_gpu_dir == str(ctx.node_dir("gpu1") / "gpus")
    assert gpu.bmc is not None and gpu.bmc.system == "/redfish/v1/Systems/gpu1" and gpu.bmc.password_file
    assert inventory.hosts["leaf1"].bmc is None and "switches" in inventory.hosts["leaf1"].groups
    # The lab serves the controllers' API over mutual TLS: the operator's certificate for it, from the lab's CA.
    assert ctx.spec.remediation is not None and ctx.spec.remediation.tls
    assert gpu.vars["ha_ops_tls"] == {"ca_file": str(ctx.paths.root / "pki" / "ca.crt"),
                                      "cert_file": str(ctx.paths.root / "pki" / "operator.crt"),
                                      "key_file": str(ctx.paths.root / "pki" / "operator.key")}  # fmt: skip
