"""Node names as data: what a node may be called wherever ha-ops takes a name from outside (reports, alerts, API
paths, configurations, the command line).

The rule is Kubernetes' for a Node (an RFC 1123 DNS subdomain: lower-case letters, digits, `-` and `.`, at most 253
characters), which every name the spec's stricter hostname rule allows also meets, and which real clusters' names
(`ip-10-0-1-7.ec2.internal`) meet too. No shell metacharacter, space, slash or control character passes it.
And the base URLs of the controllers' API (BaseUrl), as configurations name them.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable
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


def _refusing(problem_of: Callable[[str], str | None]) -> Callable[[str], str]:
    """A pydantic validator from a function that says why a value is not good (a ValueError naming it)."""

    def check(value: str) -> str:
        if (problem := problem_of(value)) is not None:
            raise ValueError(problem)
        return value

    return check


NodeName = Annotated[str, AfterValidator(_refusing(node_name_problem))]


def base_url_problem(url: str) -> str | None:
    """Why `url` is not the base URL of an ha-ops API (http or https, a host, a port that exists; no credentials,
    query, fragment, space or control character), or None."""
    if not url or any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        return f"{url[:80]!r} is not a URL (empty, or with spaces or control characters)"
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = -1
    if parts.scheme not in ("http", "https") or not parts.hostname or port == -1:
        return f"{url[:80]!r} is not an http:// or https:// URL with a host (and a port from 1 to 65535)"
    if parts.username is not None or parts.query or parts.fragment or port == 0:
        return f"{url[:80]!r}: a base URL has no credentials, query or fragment, and a port from 1 to 65535"
    return None


BaseUrl = Annotated[str, AfterValidator(_refusing(base_url_problem))]
