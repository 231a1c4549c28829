"""Every role's README carries the input table generated from its argument_specs.yml, and the specs agree with the
role defaults."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ROLES = sorted(p for p in (REPO / "roles").iterdir() if p.is_dir())


def test_role_readmes_are_up_to_date() -> None:
    result = subprocess.run([sys.executable, str(REPO / "scripts" / "role_docs.py"), "--check"],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_every_default_is_a_documented_input_with_the_same_value(role: Path) -> None:
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text()) or {}
    spec = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    assert set(defaults) <= set(spec), f"undocumented inputs: {set(defaults) - set(spec)}"
    for name, value in defaults.items():
        assert name.startswith(role.name + "_"), f"{name} is not prefixed with {role.name}_"
        assert spec[name].get("default") == value, (
            f"{name}: defaults/main.yml says {value!r}, argument_specs says {spec[name].get('default')!r}"
        )


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_every_role_has_the_standard_parts(role: Path) -> None:
    for part in ("defaults/main.yml", "meta/argument_specs.yml", "meta/main.yml", "tasks/main.yml", "README.md",
                 "molecule/default/molecule.yml"):  # fmt: skip
        assert (role / part).exists(), f"{role.name} has no {part}"
    # Handlers and templates where the tasks use them (a role that only copies files has neither).
    tasks = "".join(p.read_text() for p in (role / "tasks").glob("*.yml"))
    if "notify:" in tasks:
        assert (role / "handlers" / "main.yml").exists(), f"{role.name} notifies handlers it does not have"
    if "ansible.builtin.template:" in tasks:
        assert list((role / "templates").glob("*.j2")), f"{role.name} has no templates"
    assert list((role / "molecule" / "default" / "tests").glob("test_*.py")), f"{role.name} has no testinfra tests"
