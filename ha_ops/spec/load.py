"""Reading a ClusterSpec from YAML, turning every failure into a SpecError that names the field and the rule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ha_ops.errors import SpecError
from ha_ops.spec.model import ClusterSpec
from ha_ops.spec.strings import FIELD_PROBLEMS
from ha_ops.util.parsing import parse_yaml, read_text


def _field_path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def validation_problems(exc: ValidationError) -> list[str]:
    problems = []
    for err in exc.errors(include_url=False):
        loc = tuple(err["loc"])
        path = _field_path(loc)
        message = err["msg"]
        if err["type"] == "invalid_key" and loc:
            # The key itself ends the location; written as an index it would read like a list position.
            path, message = _field_path(loc[:-1]), f"key {loc[-1]!r} is not a string"
        if err["type"] == "value_error" and not path:
            # Cross-field rules already name their fields, one per line.
            problems += message.removeprefix("Value error, ").splitlines()
            continue
        if err["type"] == FIELD_PROBLEMS:
            # A model's rule over its own fields: each line names one, under the model's place in the document.
            problems += [f"{path}.{line}" if path else line for line in message.splitlines()]
            continue
        if err["type"] == "extra_forbidden":
            message = "unknown key"
        elif err["type"] == "missing":
            message = "required key is missing"
        problems.append(f"{path}: {message}" if path else message)
    return problems


def parse_spec(data: Any, source: str = "<spec>") -> ClusterSpec:
    if data is None:
        raise SpecError(source, ["the spec is empty; the top level must be a mapping"])
    if not isinstance(data, dict):
        raise SpecError(source, [f"the top level must be a mapping, got {type(data).__name__}"])
    try:
        return ClusterSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(source, validation_problems(exc)) from None


def load_spec(path: str | Path) -> ClusterSpec:
    """The spec in `path`; a bare name that is no file here names a shipped example (`lab`, `production`)."""
    from ha_ops.shipped import resolve

    path = resolve(Path(path), "spec")
    return parse_spec(parse_yaml(read_text(path), str(path)), str(path))
