"""Every role's Molecule scenario, in real podman containers with systemd: converge, idempotence, side effects,
testinfra verification. Each runs through scripts/molecule.sh, as a developer would run it."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.labkit import REPO, script_env

pytestmark = pytest.mark.lab

ROLES = sorted(p.parents[2].name for p in (REPO / "roles").glob("*/molecule/default/molecule.yml"))


def podman_names(env: dict[str, str]) -> set[str]:
    out = subprocess.run(["podman", "ps", "-a", "--format", "{{.Names}}"], capture_output=True, text=True, env=env,
                         check=True, timeout=60)  # fmt: skip
    return set(out.stdout.split())


def test_every_role_has_a_scenario() -> None:
    roles = sorted(p.name for p in (REPO / "roles").iterdir() if p.is_dir())
    assert roles == ROLES


@pytest.mark.parametrize("role", ROLES)
def test_molecule_scenario(role: str, tmp_path: Path) -> None:
    env = script_env("ansible.sh") | {"NO_COLOR": "1", "ANSIBLE_NOCOLOR": "1", "PY_COLORS": "0",
                                      "ANSIBLE_FORCE_COLOR": "0"}  # fmt: skip
    log = tmp_path / f"molecule-{role}.log"
    started = time.monotonic()
    with log.open("w") as out:
        result = subprocess.run([str(REPO / "scripts" / "molecule.sh"), role, "test"], stdout=out,
                                stderr=subprocess.STDOUT, env=env, timeout=900)  # fmt: skip
    took = time.monotonic() - started
    text = log.read_text(errors="replace")
    artifacts = os.environ.get("HA_OPS_ARTIFACTS")
    if artifacts:
        (Path(artifacts) / "molecule").mkdir(parents=True, exist_ok=True)
        (Path(artifacts) / "molecule" / log.name).write_text(text)
    print(f"molecule {role}: exit {result.returncode} in {took:.0f} s")
    assert result.returncode == 0, text[-6000:]
    assert "Idempotence completed successfully" in text or "idempotence: Executed: Successful" in text
    assert " passed" in text  # testinfra ran and its tests passed
    leftovers = {n for n in podman_names(env) if n.startswith("hao-")}
    assert not leftovers, f"containers left behind: {leftovers}"
