"""Node names as data: what a node may be called wherever ha-ops takes a name from outside (reports, alerts, API
paths, configurations, the command line).

The rule is Kubernetes' for a Node (an RFC 1123 DNS subdomain: lower-case letters, digits, `-` and `.`, at most 253
characters), which every name the spec's stricter hostname rule allows also meets, and which real clusters' names
(`ip-10-0-1-7.ec2.internal`) meet too. No shell metacharacter, space, slash or control character passes it.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

NODE_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
NODE_NAME_MAX = 253
_NODE_NAME = re.compile(NODE_NAME_PATTERN)


def node_name_problem(name: str) -> str | None:
    """Why `name` is not a node name, or None when it is one."""
    if not name:
        return "a node name may not be empty"
    if len(name) > NODE_NAME_MAX:
        return f"a node name has at most {NODE_NAME_MAX} characters (got {len(name)})"
    if not _NODE_NAME.fullmatch(name):  # (not match: `$` also matches before a trailing newline)
        return (f"{name[:80]!r} is not a node name (lower-case letters, digits, '-' and '.', starting and ending "
                "with a letter or digit)")  # fmt: skip
    return None


def _checked(name: str) -> str:
    problem = node_name_problem(name)
    if problem is not None:
        raise ValueError(problem)
    return name


NodeName = Annotated[str, AfterValidator(_checked)]
