"""What a host's network manager (systemd-networkd, NetworkManager) does for the lab: when the uplink comes up
again, its default route is put back (the kernel drops routes through a link that goes down). A lab service per
host, so that `ip link set eth0 up` sent over SSH restores a lab host as it restores a real one.

Standard library only, run by path (`python -IS netwatch.py IF GATEWAY`): it starts in a few milliseconds and
imports nothing of ha-ops. It follows `ip monitor link`; the monitor dies with it (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import ctypes
import signal
import subprocess
import sys


def _die_with_parent() -> None:
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def restore_route(gateway: str) -> None:
    subprocess.run(["ip", "route", "replace", "default", "via", gateway], check=False, stderr=subprocess.DEVNULL)


def link_came_up(line: str, interface: str) -> bool:
    """`ip -o monitor link` lines: "3: eth0@if7: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu ..." (or "Deleted ...")."""
    parts = line.split(":", 2)
    if line.startswith("Deleted") or len(parts) < 3 or "<" not in parts[2]:
        return False
    if parts[1].strip().split("@")[0] != interface:
        return False
    return "UP" in parts[2].split("<", 1)[1].split(">", 1)[0].split(",")


def main(interface: str, gateway: str) -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    monitor = subprocess.Popen(["ip", "-o", "monitor", "link"], stdout=subprocess.PIPE, text=True,
                               preexec_fn=_die_with_parent)  # fmt: skip
    assert monitor.stdout is not None
    restore_route(gateway)  # whatever happened before this started
    try:
        for line in monitor.stdout:
            if link_came_up(line, interface):
                restore_route(gateway)
    finally:
        monitor.terminate()
    return monitor.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
