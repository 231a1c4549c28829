"""Reading text, YAML and JSON from outside, with every failure a SpecError naming the source: unreadable files,
bytes that are not UTF-8, YAML or JSON that does not parse, scalars the parser resolves but cannot build
(`2024-02-30`, a 5,000-digit integer) and nesting too deep for the parser (a RecursionError, not a traceback)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from ha_ops.errors import SpecError


def read_text(path: str | Path, source: str | None = None) -> str:
    """A file's text; SpecError when it cannot be read or is not UTF-8."""
    where = source or str(path)
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise SpecError(where, [f"cannot read: {exc.strerror}"]) from None
    except UnicodeDecodeError as exc:
        raise SpecError(where, [f"cannot read: not UTF-8 text ({exc.reason} at byte {exc.start})"]) from None


def existing_file(base: Path, named: Path, field: str, source: str) -> Path:
    """`named` (relative to the folder `base`) resolved, when it names a file that exists; SpecError naming `field`
    otherwise, a path no file can have too (a NUL byte, a name over the file system's limit), never a traceback."""
    shown = repr(str(named)[:120]) + ("..." if len(str(named)) > 120 else "")
    try:
        resolved = (base / named).resolve()
        if resolved.is_file():
            return resolved
        why = "is not a file" if resolved.exists() else "does not exist"
        problem = f"{field}: {resolved} {why}"
    except ValueError:  # (a NUL byte)
        problem = f"{field}: {shown} is not a path (it holds a NUL byte)"
    except OSError as exc:  # (ENAMETOOLONG: a name over 255 bytes, a path over 4,096)
        problem = f"{field}: {shown} is not a path this system can hold ({exc.strerror})"
    raise SpecError(source, [problem])


def parse_yaml(text: str, source: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError(source, [f"{where}not valid YAML ({problem})"]) from None
    except ValueError as exc:
        # PyYAML's constructors raise plain ValueError for scalars it resolves but cannot build (2024-02-30).
        raise SpecError(source, [f"not valid YAML ({str(exc)[:200]})"]) from None
    except RecursionError:
        raise SpecError(source, ["not valid YAML (nested too deeply)"]) from None


def parse_json(text: str | bytes, source: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:  # (UnicodeDecodeError and int's digit limit are ValueErrors too)
        raise SpecError(source, [f"not valid JSON ({str(exc)[:200]})"]) from None
    except RecursionError:
        raise SpecError(source, ["not valid JSON (nested too deeply)"]) from None
