"""Shell command templates from configuration: `{name}` placeholders, checked when the configuration loads and filled
with shell-quoted values when run.

A node name is data, never shell: `gpu7;touch /tmp/x;#` filled into `ipmitool -H {node}-bmc ...` stays one word
(`'gpu7;touch /tmp/x;#'-bmc`), so it cannot run a second command. A template naming a placeholder its command does
not have (`{gpus}` for `{gpu}`) is refused at load time, naming the field, instead of failing at repair time.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from string import Formatter
from typing import Annotated, Any

from pydantic import AfterValidator


def placeholders(template: str) -> list[str]:
    """The placeholders a template names, in order; ValueError for one that is not a plain `{name}` (an index, an
    attribute, a format spec or a conversion: nothing a command needs) or for unbalanced braces."""
    names = []
    for _, field, spec, conversion in Formatter().parse(template):
        if field is None:
            continue
        if not field.isidentifier() or spec or conversion:
            raise ValueError(f"{{{field}{'!' + conversion if conversion else ''}{':' + spec if spec else ''}}} is not "
                             "a plain {name} placeholder (write a literal brace as {{ or }})")  # fmt: skip
        names.append(field)
    return names


def _checker(allowed: tuple[str, ...]) -> Callable[[str], str]:
    def check(template: str) -> str:
        try:
            names = placeholders(template)
        except ValueError as exc:
            raise ValueError(f"not a command template: {exc}") from None
        unknown = sorted(set(names) - set(allowed))
        if unknown:
            offered = ", ".join(f"{{{a}}}" for a in allowed) or "none"
            raise ValueError(f"unknown placeholder(s) {', '.join(f'{{{u}}}' for u in unknown)}; it may use {offered}")
        return template

    return check


def command_template(*allowed: str) -> Any:
    """A pydantic field type: a command template whose placeholders are among `allowed`."""
    return Annotated[str, AfterValidator(_checker(allowed))]


def fill(template: str, **values: object) -> str:
    """The template with each placeholder replaced by its value, shell-quoted."""
    return template.format(**{name: shlex.quote(str(value)) for name, value in values.items()})


# The templates ha-ops' configurations take: a command about one node, and one about one of its GPUs.
NodeCommand = command_template("node")
GpuCommand = command_template("gpu", "node")
