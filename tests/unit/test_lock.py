"""requirements.lock (scripts/lock.sh) pins the environment `make setup` installs: every requirement of
pyproject.toml is in it, every pin carries its hashes, and the running environment is exactly the lock's."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^ \\]+)")


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins() -> dict[str, tuple[str, int]]:
    """name -> (version, number of hashes)."""
    found: dict[str, tuple[str, int]] = {}
    current = ""
    for line in (REPO / "requirements.lock").read_text().splitlines():
        match = PIN.match(line)
        if match:
            current = normalized(match.group(1))
            found[current] = (match.group(2), 0)
        elif line.strip().startswith("--hash=sha256:") and current:
            version, hashes = found[current]
            found[current] = (version, hashes + 1)
    return found


def test_every_requirement_of_pyproject_is_pinned_with_its_hashes() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = list(project["dependencies"]) + [r for extra in project["optional-dependencies"].values() for r in extra]
    names = {normalized(re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0]) for r in wanted} - {"ha-ops"}
    locked = pins()
    assert names <= set(locked), f"not in requirements.lock (run scripts/lock.sh): {sorted(names - set(locked))}"
    assert len(locked) > 100 and all(hashes >= 1 for _, hashes in locked.values())


def test_the_environment_is_the_locks() -> None:
    """What `make setup` installed: a package at another version means the lock changed after the environment was
    made (run `make setup`), or the environment was changed by hand."""
    wrong = {}
    for name, (version, _) in pins().items():
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            installed = "missing"
        if installed != version:
            wrong[name] = (version, installed)
    assert not wrong, f"locked vs installed: {wrong}"
