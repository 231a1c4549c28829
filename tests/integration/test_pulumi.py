"""The Pulumi engine offline (ha_ops.iac.engine): the CLI and Python language host built by scripts/tools.sh, a file
backend, passphrase secrets, plugins installed from the built binaries. `pulumi up` and `pulumi destroy` of a program
with a Python dynamic provider that manages real files."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from ha_ops.iac.engine import PulumiEngine

pytestmark = pytest.mark.tools

PROGRAM = Path(__file__).parent / "pulumi_program"


def test_up_changes_and_destroys_a_dynamic_provider_program_offline(tmp_path: Path) -> None:
    engine = PulumiEngine(tmp_path / "state")
    folder = tmp_path / "managed"
    folder.mkdir()
    engine.select_stack(PROGRAM, "check")
    engine.set_config(PROGRAM, "check", {"folder": str(folder), "count": "3", "token": "s3cret"}, frozenset({"token"}))

    first = engine.up(PROGRAM, "check")
    assert first["result"] == "succeeded" and first["resourceChanges"] == {"create": 4}, first
    contents = {p.name: p.read_text() for p in sorted(folder.iterdir())}
    assert contents == {f"node-{i}.txt": f"node {i} one\n" for i in range(3)}
    outputs = engine.outputs(PROGRAM, "check")
    assert outputs["digests"] == [hashlib.sha256(contents[f"node-{i}.txt"].encode()).hexdigest() for i in range(3)]
    assert outputs["token"] == "s3cret"
    # Secrets are encrypted with the passphrase in the state file, never stored in the clear.
    state_files = list((tmp_path / "state" / ".pulumi" / "stacks").rglob("check.json"))
    assert state_files and "s3cret" not in state_files[0].read_text()

    again = engine.up(PROGRAM, "check")
    assert again["resourceChanges"] == {"same": 4}, again  # nothing to do: no changes

    engine.set_config(PROGRAM, "check", {"generation": "two"})
    changed = engine.up(PROGRAM, "check")
    assert changed["resourceChanges"] == {"same": 1, "update": 3}, changed
    assert (folder / "node-1.txt").read_text() == "node 1 two\n"

    gone = engine.destroy(PROGRAM, "check")
    assert gone["result"] == "succeeded" and gone["resourceChanges"] == {"delete": 4}, gone
    assert list(folder.iterdir()) == []
    assert engine.resources(PROGRAM, "check") == []
    # Nothing was fetched: the only plugin in PULUMI_HOME is the one ha-ops installed from the built binary.
    plugins = json.loads(engine.pulumi(["plugin", "ls", "--json"], project=PROGRAM).stdout)
    assert {(p["kind"], p["name"], p["version"]) for p in plugins} == {("resource", "kubernetes", "4.25.0")}, plugins
