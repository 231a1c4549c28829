"""The integration suite's leftover check covers every lab it builds (tests/integration/conftest.labs_built): a
module that builds a lab of its own names it LAB_NAME, and the session's check then looks for what it left."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import SimpleNamespace

from tests.integration import conftest

INTEGRATION = Path(__file__).resolve().parents[1] / "integration"
# What a module that builds its own lab calls (the session's lab is the conftest's; the Pulumi test writes a lab_spec).
BUILDS_A_LAB = ("make_lab(", "LabPaths.for_lab(", "running_lab(", "lab_spec(")


def test_every_module_that_builds_a_lab_names_it_and_the_session_checks_it() -> None:
    builders = [p for p in sorted(INTEGRATION.glob("test_*.py")) if any(c in p.read_text() for c in BUILDS_A_LAB)]
    assert builders, "no integration module builds a lab of its own: the pattern above is stale"
    modules = [importlib.import_module(f"tests.integration.{p.stem}") for p in builders]
    unnamed = [m.__name__ for m in modules if not isinstance(getattr(m, "LAB_NAME", None), str)]
    assert unnamed == [], f"modules that build a lab without naming it LAB_NAME (its leftovers go unchecked): {unnamed}"
    items = [SimpleNamespace(module=m) for m in modules] + [SimpleNamespace(module=None)]
    checked = conftest.labs_built(items)  # type: ignore[arg-type]
    assert checked[0] == conftest.LAB_NAME  # the session's own lab, always
    assert set(checked) == {conftest.LAB_NAME, *(m.LAB_NAME for m in modules)} and len(checked) == len(set(checked))
