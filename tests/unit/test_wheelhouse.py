"""`ha-ops wheelhouse hash`: a folder of wheels pinned with their sha256 for `pip install --require-hashes`, and
each kind of folder it refuses (exit 2, naming the file)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from ha_ops.errors import SpecError
from ha_ops.util.wheelhouse import pin, write_requirements
from tests.unit.cli_helpers import run_main


def wheel(folder: Path, name: str, body: bytes = b"PK") -> Path:
    path = folder / name
    path.write_bytes(body)
    return path


def test_every_wheel_is_pinned_by_its_normalised_name_with_its_hash(tmp_path: Path) -> None:
    wheel(tmp_path, "ha_ops-0.1.0-py3-none-any.whl", b"ours")
    wheel(tmp_path, "Pydantic_Core-2.33.2-cp311-cp311-manylinux_2_17_x86_64.whl", b"core")
    wheel(tmp_path, "typing_extensions-4.14.0-1-py3-none-any.whl", b"with a build tag")
    path, pinned = write_requirements(tmp_path)
    lines = path.read_text().splitlines()
    assert lines[0].startswith("#")
    assert lines[1:] == [
        f"ha-ops==0.1.0 --hash=sha256:{hashlib.sha256(b'ours').hexdigest()}",
        f"pydantic-core==2.33.2 --hash=sha256:{hashlib.sha256(b'core').hexdigest()}",
        f"typing-extensions==4.14.0 --hash=sha256:{hashlib.sha256(b'with a build tag').hexdigest()}",
    ]
    assert pinned[0].file == "ha_ops-0.1.0-py3-none-any.whl"


def test_a_folder_that_cannot_be_pinned_is_named(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no wheels in it"):
        pin(tmp_path)
    wheel(tmp_path, "ha_ops-0.1.0-py3-none-any.whl")
    wheel(tmp_path, "ha_ops-0.2.0-py3-none-any.whl")
    wheel(tmp_path, "broken.whl")
    with pytest.raises(SpecError) as caught:
        pin(tmp_path)
    assert caught.value.problems == [
        "broken.whl: not a wheel's file name (PEP 427)",
        "ha_ops-0.2.0-py3-none-any.whl: ha-ops is there twice (ha_ops-0.1.0-py3-none-any.whl)",
    ]
    assert not (tmp_path / "requirements.txt").exists()  # nothing half written


def test_the_cli_writes_them_and_exits_2_on_a_bad_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    wheel(tmp_path, "ha_ops-0.1.0-py3-none-any.whl")
    assert run_main(monkeypatch, "wheelhouse", "hash", str(tmp_path), "--json") == 0
    assert json.loads(capsys.readouterr().out)["wheels"][0]["name"] == "ha-ops"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run_main(monkeypatch, "wheelhouse", "hash", str(empty)) == 2
    assert "no wheels in it" in capsys.readouterr().err
