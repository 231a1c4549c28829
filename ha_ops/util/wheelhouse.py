"""A wheelhouse's pinned, hashed requirements: every wheel in a folder as `name==version --hash=sha256:...`, so
that `pip install --no-index --find-links DIR --require-hashes -r DIR/requirements.txt` installs exactly those
files and refuses any other (a wheel swapped or changed after the wheelhouse was made). The ha_ops_agent role
installs the agent this way by default."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from ha_ops.errors import SpecError
from ha_ops.util.atomic import write_atomic

REQUIREMENTS = "requirements.txt"
# name-version(-build)?-python-abi-platform.whl (PEP 427); names and versions carry no "-" in a wheel's file name.
WHEEL = re.compile(r"^(?P<name>[A-Za-z0-9_.]+)-(?P<version>[A-Za-z0-9_.!+]+)(-\d[^-]*)?-[^-]+-[^-]+-[^-]+\.whl$")


@dataclass(frozen=True)
class Pinned:
    name: str  # normalised (PEP 503)
    version: str
    sha256: str
    file: str

    def line(self) -> str:
        return f"{self.name}=={self.version} --hash=sha256:{self.sha256}"


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pin(folder: Path) -> list[Pinned]:
    """Every wheel in `folder`, pinned and hashed, by name; SpecError naming what is not a wheel or pinned twice."""
    wheels = sorted(folder.glob("*.whl"))
    if not wheels:
        raise SpecError(str(folder), ["no wheels in it (build them with `pip wheel --wheel-dir DIR ha-ops`)"])
    pinned: dict[str, Pinned] = {}
    problems = []
    for path in wheels:
        match = WHEEL.match(path.name)
        if match is None:
            problems.append(f"{path.name}: not a wheel's file name (PEP 427)")
            continue
        name = normalise(match["name"])
        if name in pinned:
            problems.append(f"{path.name}: {name} is there twice ({pinned[name].file})")
            continue
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        pinned[name] = Pinned(name, match["version"], digest, path.name)
    if problems:
        raise SpecError(str(folder), problems)
    return [pinned[n] for n in sorted(pinned)]


def write_requirements(folder: Path) -> tuple[Path, list[Pinned]]:
    """`folder`/requirements.txt from its wheels, written whole."""
    pinned = pin(folder)
    text = "# Written by `ha-ops wheelhouse hash`: install with --no-index --require-hashes -r this file.\n"
    text += "".join(p.line() + "\n" for p in pinned)
    path = folder / REQUIREMENTS
    write_atomic(path, text)
    return path, pinned
