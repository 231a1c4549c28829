"""Loading a pydantic model from a YAML file, with every problem reported as a SpecError naming the field."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from ha_ops.errors import SpecError
from ha_ops.spec.load import validation_problems

M = TypeVar("M", bound=BaseModel)


def load_model(path: Path, model: type[M]) -> M:
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except OSError as exc:
        raise SpecError(str(path), [f"cannot read: {exc.strerror}"]) from None
    except (yaml.YAMLError, ValueError) as exc:
        raise SpecError(str(path), [f"not valid YAML ({exc})"]) from None
    if not isinstance(data, dict):
        raise SpecError(str(path), ["the top level must be a mapping"])
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise SpecError(str(path), validation_problems(exc)) from None
