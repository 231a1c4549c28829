"""The lab hosts' network manager: which `ip -o monitor link` lines mean the uplink came up."""

from __future__ import annotations

import pytest

from ha_ops.lab.netwatch import link_came_up


@pytest.mark.parametrize(
    ("line", "up"),
    [
        ("3: eth0@if7: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc noqueue state UP", True),
        ("3: eth0@if7: <NO-CARRIER,BROADCAST,MULTICAST,UP> mtu 1500 qdisc noqueue state DOWN", True),
        ("3: eth0@if7: <BROADCAST,MULTICAST> mtu 1500 qdisc noqueue state DOWN", False),
        ("4: mgmt0@if9: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 state UP", False),
        ("Deleted 3: eth0@if7: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500", False),
        ("garbage", False),
    ],
)
def test_only_the_uplink_coming_up_counts(line: str, up: bool) -> None:
    assert link_came_up(line, "eth0") is up
