"""Runbook front matter and structure (no lab)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ha_ops.errors import SpecError
from ha_ops.runbooks.verify import load_runbook

RUNBOOKS = Path(__file__).resolve().parents[2] / "runbooks"


@pytest.mark.parametrize("name", sorted(p.name for p in RUNBOOKS.glob("*.md") if p.name != "README.md"))
def test_shipped_runbooks_load(name: str) -> None:
    runbook, body = load_runbook(RUNBOOKS / name)
    assert runbook.trigger.experiment.exists()
    assert runbook.checks and "## Manual steps" in body


def test_a_runbook_without_front_matter_or_sections_is_refused(tmp_path: Path) -> None:
    plain = tmp_path / "plain.md"
    plain.write_text("# no front matter\n")
    with pytest.raises(SpecError, match="front matter"):
        load_runbook(plain)
    text = (RUNBOOKS / "gpu-failure.md").read_text().replace("## Impact", "## Effects")
    text = text.replace("experiment: ../chaos/", f"experiment: {RUNBOOKS.parent}/chaos/")
    missing = tmp_path / "missing.md"
    missing.write_text(text)
    with pytest.raises(SpecError, match="## Impact"):
        load_runbook(missing)
    bad = tmp_path / "bad.md"
    bad.write_text("---\nid: x\ntitle: y\ntrigger: {experiment: nope.yaml}\nchecks: []\n---\n")
    with pytest.raises(SpecError) as info:
        load_runbook(bad)
    assert any(p.startswith("checks") for p in info.value.problems)


def test_every_shipped_runbook_loads_with_its_sections_and_experiment() -> None:
    folder = Path(__file__).resolve().parents[2] / "runbooks"
    books = sorted(p for p in folder.glob("*.md") if p.name != "README.md")
    assert len(books) == 10
    for path in books:
        runbook, _body = load_runbook(path)
        assert runbook.trigger.experiment.exists() and runbook.checks, path.name
