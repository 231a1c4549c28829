"""Driver rollouts in the lab, as an operator runs them: Ansible and `ha-ops rollout` run on the first Slurm controller
node and reach the GPU nodes over their sshd; the gpu_driver role installs fake driver builds (ha_ops.lab.drivers);
the rollout drains and returns nodes in the lab's real Slurm. Used by the rollout lab tests, the rollout benchmark
and the `driver_rollout` chaos action behind runbooks/driver-rollout-failure.md."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ha_ops.errors import LabError
from ha_ops.lab.cluster import Lab
from ha_ops.lab.context import LabContext
from ha_ops.lab.drivers import NVIDIA_SMI, build_driver, lab_inventory, node_commands
from ha_ops.rollout.ansible import DEFAULT_PLAYBOOK
from ha_ops.shipped import shipped
from ha_ops.util.atomic import write_atomic
from ha_ops.util.proc import CommandResult

ANSIBLE_BIN = Path(sys.executable).parent  # ansible-playbook is installed beside ha-ops


@dataclass(frozen=True)
class RolloutFiles:
    """What a lab rollout reads and writes, all in the lab's folder."""

    inventory: Path
    spec: Path
    state_dir: Path
    home: Path  # HOME of the Ansible runs: ~/.ansible stays in the lab


def files(lab: Lab | LabContext) -> RolloutFiles:
    root = lab.paths.root
    return RolloutFiles(root / "inventory.yml", root / "spec.yaml", root / "rollout", root / "ansible-home")


def operator_node(ctx: LabContext) -> str:
    """Where the operator's commands run: the first Slurm controller (it reaches every node and runs Slurm's CLI)."""
    controllers = ctx.layout.nodes_with_role("controller")
    if not controllers:
        raise LabError(f"lab {ctx.name!r} has no controller node to run a rollout from")
    return controllers[0].name


def _env(ctx: LabContext) -> list[str]:
    """The node's own environment (SLURM_CONF, ...) and Ansible's, with HOME in the lab so ~/.ansible stays there."""
    env = {**ctx.node_env(), "ANSIBLE_ROLES_PATH": str(shipped("roles")), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_HOST_KEY_CHECKING": "True", "ANSIBLE_PIPELINING": "True", "HOME": str(files(ctx).home)}  # fmt: skip
    return ["env", *(f"{k}={v}" for k, v in env.items())]


def site(ctx: LabContext) -> dict[str, Any]:
    """The lab's rollout host, as the inventory's `ha_ops_rollout` names one (ha_ops.cluster.rollouts.RolloutSite):
    the operator node runs `ha-ops rollout` with the rollout's environment, files and node checks."""
    paths, checks = files(ctx), node_commands()
    return {
        "host": operator_node(ctx),
        "command": [*_env(ctx), sys.executable, "-m", "ha_ops", "rollout"],
        "state_dir": str(paths.state_dir),
        "driver_args": ["--spec", str(paths.spec), "--inventory", str(paths.inventory),
                        "--health-command", checks["health_command"], "--version-command", checks["version_command"],
                        *_controller_args(ctx)],
        # The GPU nodes' nvidia-smi (ha_ops.lab.drivers.install_nvidia_smi), by its path: a command entered through
        # the node's namespaces keeps this machine's PATH.
        "version_command": f"{NVIDIA_SMI} --query-gpu=driver_version --format=csv,noheader",
    }  # fmt: skip


def _controller_args(ctx: LabContext) -> list[str]:
    """The operator's certificate for the remediation controllers' API (the rollout announces its batches there);
    the controllers' URLs come from the spec."""
    from ha_ops.lab import tls

    if ctx.spec.remediation is None or not tls.enabled(ctx):
        return []
    files = tls.files(ctx, "operator")
    return ["--controller-cert", str(files.cert_file), "--controller-key", str(files.key_file),
            "--controller-ca", str(files.ca_file)]  # fmt: skip


def operator_argv(lab: Lab, *argv: str) -> list[str]:
    """A command line that runs `argv` on the operator node with the rollout's environment (for Popen)."""
    return [*lab.transport(operator_node(lab.ctx)).enter_prefix(), *_env(lab.ctx), *argv]


def on_operator_node(lab: Lab, *argv: str, timeout: float = 600) -> CommandResult:
    return lab.node(operator_node(lab.ctx)).run([*_env(lab.ctx), *argv], timeout=timeout, check=False)


def active_versions(lab: Lab) -> dict[str, str | None]:
    """Each GPU node's active driver version from the role's fact file (None before the role ran there)."""
    out: dict[str, str | None] = {}
    for node in lab.ctx.layout.nodes_with_role("gpu"):
        fact = lab.ctx.node_dir(node.name) / "ansible" / "gpu_driver.fact"
        out[node.name] = json.loads(fact.read_text()).get("active_version") if fact.exists() else None
    return out


def reported_versions(lab: Lab) -> dict[str, list[str]]:
    """The driver versions each GPU node's fake GPUs report (what nvidia-smi would print), distinct and sorted."""
    out = {}
    for node in lab.ctx.layout.nodes_with_role("gpu"):
        states = [json.loads(p.read_text()) for p in sorted((lab.ctx.node_dir(node.name) / "gpus").glob("gpu*.json"))]
        out[node.name] = sorted({s["driver_version"] for s in states})
    return out


def prepare(lab: Lab, base: str, builds: dict[str, bool]) -> RolloutFiles:
    """Write the inventory and spec, build the fake drivers (`builds`: version -> works), and install `base` through
    the role on every GPU node that has no driver from the role yet. Returns the rollout's files."""
    paths = files(lab)
    paths.home.mkdir(exist_ok=True)
    write_atomic(paths.inventory, yaml.safe_dump(lab_inventory(lab.ctx), sort_keys=False))
    write_atomic(paths.spec, yaml.safe_dump(lab.spec.model_dump(mode="json"), sort_keys=False))
    for version, works in {base: True, **builds}.items():
        build_driver(lab.ctx, version, works=works)
    bare = sorted(node for node, version in active_versions(lab).items() if version is None)
    if bare:
        # A first install on nodes that never ran the role: all of them at once (the playbook's one node at a time is
        # for nodes in service).
        playbook = [str(ANSIBLE_BIN / "ansible-playbook"), "-i", str(paths.inventory), "--limit", ",".join(bare),
                    "-e", f"ha_ops_rollout_serial={len(bare)}"]  # fmt: skip
        result = on_operator_node(lab, *playbook, str(DEFAULT_PLAYBOOK), "-e", f"gpu_driver_version={base}")
        if not result.ok:
            raise LabError(f"installing driver {base} on {', '.join(bare)} failed: {result.stdout[-1500:]}")
    return paths


def rollout_args(lab: Lab, to: str, from_version: str, *extra: str) -> list[str]:
    """`ha-ops rollout driver` for the lab: validation by the agent's health check and the fake GPUs' version."""
    lab_site = site(lab.ctx)
    return [sys.executable, "-m", "ha_ops", "rollout", "driver", "--to", to, "--from-version", from_version,
            *lab_site["driver_args"], "--state-dir", lab_site["state_dir"], "--json", *extra]  # fmt: skip


def start_rollout(lab: Lab, to: str, from_version: str, *extra: str, log: Path) -> subprocess.Popen[bytes]:
    """The rollout started in the background on the operator node; its PID is the rollout CLI's own (nsenter execs
    the command), so it can be signalled."""
    with log.open("wb") as out:
        return subprocess.Popen(
            operator_argv(lab, *rollout_args(lab, to, from_version, *extra)), stdout=out, stderr=subprocess.STDOUT
        )


def rollout_state(lab: Lab) -> dict:
    path = files(lab).state_dir / "state.json"
    return json.loads(path.read_text()) if path.exists() else {}
