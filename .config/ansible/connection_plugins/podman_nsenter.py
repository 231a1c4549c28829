# The Molecule scenarios' connection to their podman containers: enter the container's namespaces with nsenter
# instead of `podman exec`. Same container, same systemd, same files; what changes is the cost of a task. The
# containers.podman connection runs `podman mount` for every task and one `podman exec` (a Go program that loads
# podman's whole state: ~0.17 s here) for every command, and cannot pipeline; Ansible needs about four commands per
# module, so a template task cost ~1.4 s. nsenter costs ~0.04 s and passes stdin through, so modules are pipelined:
# one command per module, as over SSH to a real host. Commands run as root with the container's own environment
# (read from its init), as `podman exec` gives them, and with full root rights, as Ansible has over SSH.
#
# The container's init PID comes from `podman inspect` once and is cached per container name with the container's
# ID; a cached PID is used only while its cgroup still names that container, so a recreated container is looked up
# again.
from __future__ import annotations

import json
import os
import shlex
import subprocess
import tempfile
from pathlib import Path

from ansible.errors import AnsibleConnectionFailure, AnsibleError
from ansible.module_utils.common.text.converters import to_bytes, to_text
from ansible.plugins.connection import ConnectionBase
from ansible.utils.display import Display

DOCUMENTATION = """
name: podman_nsenter
short_description: run commands in a local podman container through nsenter (pipelining supported)
description:
  - Enters the namespaces of the container's init process; the container is the inventory host's name.
author: ha-ops
options:
  podman_executable:
    description: The podman program, for looking up the container's init PID.
    default: podman
    vars:
      - name: ansible_podman_executable
"""

display = Display()
CACHE = Path(tempfile.gettempdir()) / "ha-ops-podman-nsenter"


def _cgroup_names(pid: int, container_id: str) -> bool:
    try:
        return f"libpod-{container_id}" in Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return False


class Connection(ConnectionBase):
    transport = "podman_nsenter"
    has_pipelining = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._pid = None
        self._env = []

    def _lookup(self, name: str) -> int:
        cached = CACHE / name
        try:
            pid, container_id = cached.read_text().split()
            if _cgroup_names(int(pid), container_id):
                return int(pid)
        except (OSError, ValueError):
            pass
        podman = self.get_option("podman_executable")
        out = subprocess.run([podman, "inspect", "--type", "container", "--format", "{{json .State.Pid}} {{.Id}}",
                              name], capture_output=True, text=True, timeout=60)  # fmt: skip
        if out.returncode != 0:
            raise AnsibleConnectionFailure(f"container {name}: podman inspect failed: {out.stderr.strip()}")
        pid_text, container_id = out.stdout.split()
        pid = json.loads(pid_text)
        if not pid or not _cgroup_names(pid, container_id):
            raise AnsibleConnectionFailure(f"container {name} is not running")
        CACHE.mkdir(mode=0o700, exist_ok=True)
        scratch = CACHE / f".{name}.{os.getpid()}"
        scratch.write_text(f"{pid} {container_id}\n")
        scratch.replace(cached)
        return pid

    def _connect(self):
        if not self._connected:
            name = self._play_context.remote_addr
            self._pid = self._lookup(name)
            environ = Path(f"/proc/{self._pid}/environ").read_bytes()
            self._env = [to_text(kv) for kv in environ.split(b"\0") if kv]
            display.vvv(f"NSENTER into {name} (init pid {self._pid})", host=name)
            self._connected = True
        return self

    def _argv(self, argv: list[str]) -> list[str]:
        return ["nsenter", "-t", str(self._pid), "-a", "--", "env", "-i", *self._env, *argv]

    def exec_command(self, cmd, in_data=None, sudoable=False):
        super().exec_command(cmd, in_data=in_data, sudoable=sudoable)
        argv = self._argv(shlex.split(to_text(cmd, errors="surrogate_or_strict")))
        display.vvv(f"EXEC {argv[-1][:200]}", host=self._play_context.remote_addr)
        proc = subprocess.run(argv, input=in_data, capture_output=True)
        return proc.returncode, proc.stdout, proc.stderr

    def put_file(self, in_path, out_path):
        super().put_file(in_path, out_path)
        with open(to_bytes(in_path, errors="surrogate_or_strict"), "rb") as source:
            data = source.read()
        proc = subprocess.run(self._argv(["/bin/sh", "-c", 'cat > "$1"', "sh", out_path]), input=data,
                              capture_output=True)  # fmt: skip
        if proc.returncode != 0:
            raise AnsibleError(f"copying {in_path} to {out_path} failed: {to_text(proc.stderr).strip()}")

    def fetch_file(self, in_path, out_path):
        super().fetch_file(in_path, out_path)
        proc = subprocess.run(self._argv(["cat", in_path]), capture_output=True)
        if proc.returncode != 0:
            raise AnsibleError(f"fetching {in_path} failed: {to_text(proc.stderr).strip()}")
        with open(to_bytes(out_path, errors="surrogate_or_strict"), "wb") as target:
            target.write(proc.stdout)

    def close(self):
        self._connected = False
