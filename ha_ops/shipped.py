"""The files ha-ops ships beside its code: the Ansible roles and playbooks, the chaos experiments and game days, the
runbooks and the example specs. Found through importlib.resources, so they are the installed package's own (a
wheel carries copies: pyproject.toml's package-data) and never a path into a source checkout; in a checkout,
ha_ops/_data links to its folders."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

KINDS = {"gameday": ("chaos", "gamedays"), "experiment": ("chaos", "experiments"), "spec": ("examples",),
         "runbook": ("runbooks",)}  # fmt: skip


def shipped(*parts: str) -> Path:
    """A shipped file or folder, e.g. shipped("playbooks", "driver-rollout.yml")."""
    return Path(str(resources.files("ha_ops").joinpath("_data", *parts)))


def resolve(given: Path, kind: str) -> Path:
    """`given` when it exists; else, for a bare name (`gpu`, `lab`), the shipped file of that kind and name (game
    days, experiments, specs as .yaml; runbooks as .md); else `given`, for its reader to report as missing."""
    if given.exists() or given.parent != Path(".") or kind not in KINDS:
        return given
    suffix = ".md" if kind == "runbook" else ".yaml"
    candidate = shipped(*KINDS[kind], given.name if given.suffix else given.name + suffix)
    return candidate if candidate.is_file() else given
