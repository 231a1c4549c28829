"""What no string of a cluster spec may hold, anywhere in its tree: every one may reach the Ansible inventory.
Pure: the spec's model (spec/model.py) runs it over the whole spec once it is read."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel

# Jinja's delimiters: Ansible templates any inventory value holding one, and `{{ lookup('pipe', ...) }}` runs a
# command on the Ansible control node (issue 44, finding 9). No spec string needs them, nor a control character (a
# newline in a rack's name starts a new line in every file it is written to).
TEMPLATE_SYNTAX = re.compile(r"\{\{|\{%|\{#")
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
FIELD_PROBLEMS = "field_problems"  # (an error whose lines each start with a field of the model that raised it)


def string_problems(value: Any, where: str) -> list[str]:
    """One line per string under `where` that holds template syntax or a control character."""
    if isinstance(value, str):
        if TEMPLATE_SYNTAX.search(value):
            return [f"{where}: template syntax ({{{{, {{% or {{#}}) is not allowed: Ansible would evaluate it"]
        if found := CONTROL.search(value):
            return [f"{where}: control characters ({found.group()!r}) are not allowed"]
        return []
    if isinstance(value, BaseModel):
        return [p for name, item in value for p in string_problems(item, f"{where}.{name}")]
    if isinstance(value, list | tuple):
        return [p for i, item in enumerate(value) for p in string_problems(item, f"{where}[{i}]")]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in string_problems(k, where) + string_problems(v, f"{where}.{k}")]
    return []
