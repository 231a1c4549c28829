"""Every role's Molecule scenario, in real podman containers with systemd: converge, idempotence, side effects,
testinfra verification. Each runs through scripts/molecule.sh, as a developer would run it.

The scenarios run side by side (HA_OPS_MOLECULE_PARALLEL at once, longest first): their containers spend much of
a scenario waiting on apt, systemd and Ansible's round trips. And they run in the background of the integration
run's lab modules, at the lowest CPU priority (nice 19): the session starts them after the full lab (conftest.py)
and this module, which runs last, waits for them. The lab modules leave a core idle most of the time (they wait for
faults to be detected and recovered), which Molecule's work fills, while the lab's daemons keep the CPU whenever
they want it.
Each scenario has its own containers, apt cache folders and shared folder, and each test still checks its own
scenario's outcome."""

from __future__ import annotations

import os
import subprocess
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.labkit import REPO, script_env

pytestmark = pytest.mark.lab

ROLES = sorted(p.parents[2].name for p in (REPO / "roles").glob("*/molecule/default/molecule.yml"))
PARALLEL = int(os.environ.get("HA_OPS_MOLECULE_PARALLEL", "3"))
# Measured scenario times (s, one at a time on 2 cores): the longest start first, so the last to finish is short.
LONGEST_FIRST = ["gpu_driver", "slurm_controller", "slurm_compute", "ha_ops_agent", "ha_ops_controller", "etcd_backup",
                 "monitoring", "moosefs", "nic_bonding", "ha_ops_audit_sink", "ha_ops_pki"]  # fmt: skip


@dataclass(frozen=True)
class ScenarioRun:
    role: str
    returncode: int
    seconds: float
    log: str


def podman_names(env: dict[str, str]) -> set[str]:
    """Every container's name. `podman ps -a` exits 1 when a container it listed is removed before it reads it
    (another scenario's destroy, side by side): that answer is asked again; any other failure is an error."""
    for _ in range(10):
        out = subprocess.run(["podman", "ps", "-a", "--format", "{{.Names}}"], capture_output=True, text=True,
                             env=env, timeout=60)  # fmt: skip
        if out.returncode == 0:
            return set(out.stdout.split())
        if not any(gone in out.stderr.lower() for gone in ("no such container", "does not exist")):
            break
        time.sleep(0.5)
    raise AssertionError(f"podman ps -a exited {out.returncode}: {out.stderr.strip()[-500:]}")


def platform_names(role: str) -> set[str]:
    """The containers a role's scenario creates (its own platforms, or the shared default's)."""
    scenario = yaml.safe_load((REPO / "roles" / role / "molecule" / "default" / "molecule.yml").read_text()) or {}
    shared = yaml.safe_load((REPO / ".config" / "molecule" / "config.yml").read_text())
    return {p["name"] for p in scenario.get("platforms") or shared["platforms"]}


def run_scenario(role: str, env: dict[str, str], logs: Path) -> ScenarioRun:
    log = logs / f"molecule-{role}.log"
    started = time.monotonic()
    # The lowest CPU priority: behind the lab's daemons and the tests' own timing, in the time they leave idle.
    command = ["nice", "-n", "19", str(REPO / "scripts" / "molecule.sh"), role, "test"]
    with log.open("w") as out:
        result = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env, timeout=2400)
    text = log.read_text(errors="replace")
    artifacts = os.environ.get("HA_OPS_ARTIFACTS")
    if artifacts:
        (Path(artifacts) / "molecule").mkdir(parents=True, exist_ok=True)
        (Path(artifacts) / "molecule" / log.name).write_text(text)
    return ScenarioRun(role, result.returncode, time.monotonic() - started, text)


def molecule_env() -> dict[str, str]:
    return script_env("ansible.sh") | {"NO_COLOR": "1", "ANSIBLE_NOCOLOR": "1", "PY_COLORS": "0",
                                       "ANSIBLE_FORCE_COLOR": "0"}  # fmt: skip


class Background:
    """Every scenario started at once on a pool of PARALLEL workers, in the background of the session; each test
    waits for its own."""

    pool: ThreadPoolExecutor | None = None
    futures: dict[str, Future] = {}

    @classmethod
    def start(cls, logs: Path, roles: set[str] | None = None) -> dict[str, Future]:
        """Start the scenarios of `roles` (default: every role's), unless the session did already."""
        if cls.pool is None:
            env = molecule_env()
            wanted = [r for r in ROLES if roles is None or r in roles]
            order = [r for r in LONGEST_FIRST if r in wanted] + [r for r in wanted if r not in LONGEST_FIRST]
            cls.pool = ThreadPoolExecutor(max_workers=max(1, PARALLEL), thread_name_prefix="molecule")
            cls.futures = {role: cls.pool.submit(run_scenario, role, env, logs) for role in order}
        return cls.futures

    @classmethod
    def finish(cls) -> None:
        """A scenario that started always ends with its own destroy; those not started yet (an interrupted run)
        never start."""
        if cls.pool is not None:
            cls.pool.shutdown(wait=True, cancel_futures=True)
            cls.pool = None


@pytest.fixture(scope="module")
def scenarios(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Future]:
    """The scenarios the session started in the background (conftest.py), started now if it has not yet."""
    from tests.integration.conftest import START_MOLECULE

    start = request.config.stash.get(START_MOLECULE, None)
    if start is not None:
        del request.config.stash[START_MOLECULE]
        start()
    return Background.start(tmp_path_factory.mktemp("molecule"))


def test_every_role_has_a_scenario() -> None:
    roles = sorted(p.name for p in (REPO / "roles").iterdir() if p.is_dir())
    assert roles == ROLES


@pytest.mark.parametrize("role", ROLES)
def test_molecule_scenario(role: str, scenarios: dict[str, Future]) -> None:
    run: ScenarioRun = scenarios[role].result()
    print(f"molecule {role}: exit {run.returncode} in {run.seconds:.0f} s")
    assert run.returncode == 0, run.log[-6000:]
    assert "Idempotence completed successfully" in run.log or "idempotence: Executed: Successful" in run.log
    assert " passed" in run.log  # testinfra ran and its tests passed
    # Nothing installed outside the project (Molecule's prerun would install the project, a collection by its
    # galaxy.yml, into ~/.ansible/collections, and side-by-side scenarios raced on it).
    assert "Performing prerun" not in run.log and "collection install" not in run.log
    left = platform_names(role) & podman_names(molecule_env())
    assert not left, f"containers left behind: {left}"


def test_no_scenario_leaves_a_container_behind(scenarios: dict[str, Future]) -> None:
    for future in scenarios.values():
        future.result()
    leftovers = {n for n in podman_names(molecule_env()) if n.startswith("hao-")}
    assert not leftovers, f"containers left behind: {leftovers}"
