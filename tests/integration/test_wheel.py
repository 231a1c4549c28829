"""The ha-ops wheel outside the checkout: built from the project's files, installed into a fresh virtual environment
(with the locked versions of its dependencies, offline from uv's cache), it runs `rollout plan`, `gameday run
--dry-run` and `runbook verify --dry-run` from its own package data (ha_ops/shipped.py), with no path into a
source tree."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.tools, pytest.mark.timeout(300)]  # uv from make setup's cache

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("HA_OPS_CACHE", Path.home() / ".cache" / "ha-ops"))
UV = CACHE / "uv-0.13.8" / "bin" / "uv"
SHIPPED = ("chaos", "examples", "playbooks", "roles", "runbooks")


def run(argv: list[str | Path], cwd: Path) -> str:
    env = dict(os.environ, UV_CACHE_DIR=os.environ.get("UV_CACHE_DIR", str(CACHE / "uv")), NO_COLOR="1")
    env.pop("VIRTUAL_ENV", None)
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=240, cwd=cwd, env=env)
    assert done.returncode == 0, f"{argv}: {done.stdout[-2000:]}{done.stderr[-3000:]}"
    return done.stdout


def test_the_wheel_runs_from_its_own_package_data_outside_the_checkout(tmp_path: Path) -> None:
    # Built from a copy (setuptools writes build/ beside the sources), links and all: ha_ops/_data points at the
    # shipped folders, and the wheel must carry their files.
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "ha_ops", *SHIPPED):
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, src / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, src / name)
    run([UV, "build", "--wheel", "--offline", "-q", "-o", tmp_path / "dist", src], tmp_path)
    (wheel,) = (tmp_path / "dist").glob("ha_ops-*.whl")

    env_dir = tmp_path / "venv"
    run([UV, "venv", "-q", "--python", REPO / ".venv" / "bin" / "python", env_dir], tmp_path)
    python = env_dir / "bin" / "python"
    run(
        [UV, "pip", "install", "-q", "--offline", "--python", python, "-c", REPO / "requirements.lock", wheel], tmp_path
    )
    site = next((env_dir / "lib").glob("python3*/site-packages"))
    data = site / "ha_ops" / "_data"
    assert sorted(p.name for p in data.iterdir()) == sorted(SHIPPED)
    assert not any(p.is_symlink() for p in data.rglob("*")), "the wheel carries links, not files"
    assert (data / "roles" / "ha_ops_controller" / "tasks" / "main.yml").is_file()
    assert not list(data.glob("roles/*/molecule")), "the roles' Molecule scenarios are not shipped"

    work = tmp_path / "elsewhere"  # no checkout here or above
    work.mkdir()
    ha_ops = env_dir / "bin" / "ha-ops"
    where = run([python, "-c", "from ha_ops.shipped import shipped; print(shipped())"], work)
    assert where.strip() == str(data) and str(REPO) not in where

    planned = run([ha_ops, "rollout", "plan", "driver", "--to", "570.86.15", "--spec", "production", "--json"], work)
    assert '"target_version": "570.86.15"' in planned
    gameday = run([ha_ops, "gameday", "run", "gpu", "--dry-run"], work)
    assert gameday.startswith("GPU XID 79 on gpu3: gpu-xid79.yaml; detected when ")
    runbooks = run([ha_ops, "runbook", "verify", "--all", "--dry-run"], work)
    assert "gpu-failure.md: inject gpu-xid79.yaml;" in runbooks and "node-loss.md: inject " in runbooks
