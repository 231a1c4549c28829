"""Loading a pydantic model from a YAML file, with every problem reported as a SpecError naming the field."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from ha_ops.errors import SpecError
from ha_ops.spec.load import validation_problems
from ha_ops.util.parsing import parse_yaml, read_text

M = TypeVar("M", bound=BaseModel)


def load_model(path: Path, model: type[M]) -> M:
    data = parse_yaml(read_text(path), str(path)) or {}
    if not isinstance(data, dict):
        raise SpecError(str(path), ["the top level must be a mapping"])
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise SpecError(str(path), validation_problems(exc)) from None
    except RecursionError:
        raise SpecError(str(path), ["nested too deeply"]) from None
