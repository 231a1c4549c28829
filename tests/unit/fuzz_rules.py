"""The words the fuzz's oracles (fuzz_oracles.py) are written in: places in a document (paths with wildcards) and
what a value there must never be (a non-finite or absurd duration, a count out of range, a URL that is not one, a
node name that is not one, a command template its command cannot fill...). Each says why a value is garbage, or
None: not known garbage (the parser may still refuse it)."""

from __future__ import annotations

import inspect
import math
import re
import string
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

Why = Callable[[Any], str | None]  # why a value is garbage, or None (not known garbage)
Rule = tuple[tuple[Any, ...], Why]
ANY, EACH, DEEP = "<any key>", "<each item>", "<anywhere below>"  # a path's wildcards

# No duration ha-ops takes comes near ten years; 1e308 s, NaN and infinity (which JSON and YAML both carry) are
# settings nobody meant, and a sleep or socket timeout that long fails at run time, if it does not wait forever.
ABSURD_S = 10 * 365 * 86_400.0
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
TEMPLATE = re.compile(r"\{\{|\{%|\{#")  # Jinja's delimiters: Ansible evaluates them in inventory values
NODE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")  # RFC 1123, as Kubernetes
SPEC_HOST = re.compile(r"[a-z][a-z0-9-]{0,30}")  # the spec's own (stricter) host names


def places(value: Any, pattern: tuple[Any, ...], path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """Each (path, value) in `value` that `pattern` names: keys, ANY key of a mapping, EACH item of a list, DEEP."""
    if not pattern:
        yield path, value
        return
    head, rest = pattern[0], pattern[1:]
    if head == DEEP:
        yield path, value
        children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        for key, child in children:
            yield from places(child, pattern, (*path, key))
    elif (head == ANY and isinstance(value, dict)) or (head == EACH and isinstance(value, list)):
        for key, child in value.items() if isinstance(value, dict) else enumerate(value):
            yield from places(child, rest, (*path, key))
    elif isinstance(value, dict) and head in value:
        yield from places(value[head], rest, (*path, head))


# The mutations of the fuzz (test_parsers_fuzz): every place in a document, and copies changed at one.
def paths_in(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every place in a document: the places a mutation may hit."""
    found = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            found += paths_in(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found += paths_in(v, (*prefix, i))
    return found


def replaced(value: Any, path: tuple, new: Any) -> Any:
    """A copy of `value` with `new` at `path`."""
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: replaced(value[head], rest, new)}
    out = list(value)
    out[head] = replaced(out[head], rest, new)
    return out


def dropped(value: Any, path: tuple) -> Any:
    """A copy of `value` without what is at `path`."""
    if not path:
        return value
    if len(path) == 1:
        if isinstance(value, dict):
            return {k: v for k, v in value.items() if k != path[0]}
        return [v for i, v in enumerate(value) if i != path[0]]
    return replaced(value, path[:-1], dropped(value_at(value, path[:-1]), path[-1:]))


def value_at(value: Any, path: tuple) -> Any:
    """What is at `path` in `value`."""
    for part in path:
        value = value[part]
    return value


def number_in(value: Any) -> float | None:
    """The number a field reading `value` as one gets (a numeric string too, as pydantic reads it); None otherwise."""
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        return float(value)
    except OverflowError:  # (an integer of 400 digits: as absurd as infinity)
        return math.inf if value > 0 else -math.inf


def _numeric(low: float, high: float, *, above: bool, whole: bool, unit: str) -> Why:
    def why(value: Any) -> str | None:
        if isinstance(value, list | dict):
            return f"a {type(value).__name__} where a number ({unit}) belongs"
        number = number_in(value)
        if number is None:
            return None
        if not math.isfinite(number) and isinstance(value, int):  # (an integer too long for a float: its bounds judge)
            if value > 0:  # (with no upper bound, a limit: so high a limit is none, which the field may mean)
                return None if high == math.inf else f"{str(value)[:20]}... {unit} is over {high:g}"
            return None if low == -math.inf else f"{str(value)[:20]}... {unit} is below {low:g}"
        if not math.isfinite(number):
            return f"{value!r:.40} {unit} is not a finite number"
        if whole and not number.is_integer():
            return f"{number:g} is not a whole number of {unit}"
        if number < low or (above and number == low):
            return f"{number:g} {unit} is {'at or ' if above else ''}below {low:g}"
        if number > high:
            return f"{number:g} {unit} is over {high:g}"
        return None

    return why


def seconds(low: float = 0.0, *, above: bool = False, high: float = ABSURD_S) -> Why:
    """A duration: garbage when not finite, below `low` (at it too, with `above`), or absurd."""
    return _numeric(low, high, above=above, whole=False, unit="s")


def count(low: int = 0, high: float = math.inf) -> Why:
    """A count of things, or (without `high`) a limit: garbage when not a finite whole number from `low` to `high`."""
    return _numeric(low, high, above=False, whole=True, unit="items")


def fraction(low: float = 0.0, high: float = 1.0, *, above: bool = False) -> Why:
    return _numeric(low, high, above=above, whole=False, unit="(a share)")


def one_of(*allowed: str) -> Why:
    return lambda v: None if isinstance(v, str) and v in allowed else f"{v!r:.40} is not one of {', '.join(allowed)}"


def plain_text(value: Any) -> str | None:
    """A string that reaches a file line by line, or an Ansible inventory: no control character, no template."""
    if isinstance(value, str) and (found := TEMPLATE.search(value) or CONTROL.search(value)):
        return f"{value!r:.40} holds {found.group()!r}"
    return None


def _named(pattern: re.Pattern[str], what: str, most: int) -> Why:
    def why(value: Any) -> str | None:
        if not isinstance(value, str):
            return f"{value!r:.40} is no {what} (not a string)"
        return None if len(value) <= most and pattern.fullmatch(value) else f"{value!r:.40} is not a {what}"

    return why


node_name = _named(NODE_NAME, "node name", 253)
spec_host = _named(SPEC_HOST, "spec host name", 31)


def url(value: Any) -> str | None:
    """A base URL of an HTTP API: http(s), a host, a port that exists; no credentials, query, fragment or space."""
    if value is None:
        return None  # (an optional URL left out)
    if not isinstance(value, str) or not value or CONTROL.search(value) or any(c.isspace() for c in value):
        return f"{value!r:.40} is not a URL"
    try:
        parts = urllib.parse.urlsplit(value)
        port = parts.port
    except ValueError:  # (`http://[::1`, a port that is no number)
        return f"{value!r:.40} is not a URL"
    if parts.scheme not in ("http", "https") or not parts.hostname or port == 0 or parts.query or parts.fragment:
        return f"{value!r:.40} is not an http(s) base URL with a host"
    return f"{value!r:.40} holds credentials" if parts.username is not None else None


def host(value: Any) -> str | None:
    """A host name or address something connects to: a non-empty word."""
    if not isinstance(value, str) or not value or any(c.isspace() or c < " " or c == "\x7f" for c in value):
        return f"{value!r:.40} is not a host (empty, or with a space or control character)"
    return None


def host_port(value: Any) -> str | None:
    """`host` or `host:port`, the port from 1 to 65535."""
    if (problem := host(value)) is not None:
        return problem
    name, _, port = value.rpartition(":")
    if name and port.isdigit() and not (port.isascii() and 0 < int(port) < 65536):
        return f"{value!r:.40}: port {port} does not exist"
    return None


def _placeholders(value: str) -> list[tuple[str, str, str | None]] | None:
    """A template's (name, format spec, conversion) fields; None when its braces are unbalanced."""
    try:
        return [(n, s, c) for _, n, s, c in string.Formatter().parse(value) if n is not None]
    except ValueError:
        return None


def command(*allowed: str) -> Why:
    """A configuration's command template: plain `{name}` placeholders among `allowed`, braces balanced."""

    def why(value: Any) -> str | None:
        if not isinstance(value, str):
            return None
        if (fields := _placeholders(value)) is None:
            return f"{value!r:.40} has an unbalanced brace"
        bad = [n for n, s, c in fields if n not in allowed or s or c]
        return f"{value!r:.40} names {bad[0]!r}, not one of {allowed}" if bad else None

    return why


def runbook_command(value: Any) -> str | None:
    """A runbook's `run`: every placeholder one of the cluster's, by plain name, a host given to those that take one
    (`{spec:>20}` pads, and is left to the parser)."""
    from ha_ops.runbooks.placeholders import NAMES, PER_HOST  # (the names a cluster fills: the domain, not the check)

    if not isinstance(value, str):
        return None
    if (fields := _placeholders(value)) is None:
        return f"{value!r:.40} has an unbalanced brace"
    for name, spec, conversion in fields:
        if name not in NAMES or conversion or (name in PER_HOST and not spec):
            return f"{value!r:.40}: {{{name}}} cannot be filled"
    return None


def experiment_file(folder: Path) -> Why:
    """A path, relative to the document's folder, that names a file which exists."""

    def why(value: Any) -> str | None:
        if not isinstance(value, str):
            return None
        if "\x00" in value or len(value.encode()) > 4096 or any(len(p.encode()) > 255 for p in value.split("/")):
            return f"{value[:40]!r} is no path a file can have"
        try:
            return None if (folder / value).is_file() else f"{value[:60]!r} names no file"
        except OSError as exc:  # (the folder and the name together past the system's limit)
            return f"{value[:40]!r} is no path this system can hold ({exc.strerror})"

    return why


def _takes(function: Callable[..., Any], arguments: Any, *extra: str, replaced: bool = False) -> str | None:
    """Why `function` cannot be called with `arguments` by name, and the `extra` ones its caller passes itself (which
    replace an argument of their name with `replaced`, as Chaos Toolkit's do; else one is given twice), or None."""
    if not isinstance(arguments, dict) or not all(isinstance(k, str) for k in arguments):
        return None
    signature = inspect.signature(function)
    passed = {e: None for e in extra if e in signature.parameters}
    try:
        if replaced:
            signature.bind(**{**arguments, **passed})
        else:
            signature.bind(**arguments, **passed)
    except TypeError as exc:
        return f"{function.__name__} cannot take {sorted(arguments)}: {exc}"
    return None


def condition(value: Any) -> str | None:
    """A game day's or a runbook's condition: a probe of ha_ops.chaos.probes, with arguments it takes."""
    from ha_ops.chaos import probes

    if not isinstance(value, dict) or not isinstance(value.get("probe"), str):
        return None
    if value["probe"] not in probes.__all__:
        return f"{value['probe']!r:.40} is not a probe"
    return _takes(getattr(probes, value["probe"]), value.get("arguments", {}), "configuration")


def python_provider(value: Any) -> str | None:
    """An experiment's python provider of ha-ops' chaos modules: a function the module has, with arguments it takes."""
    import importlib

    if not isinstance(value, dict) or value.get("type") != "python" or not isinstance(value.get("func"), str):
        return None
    if value.get("module") not in ("ha_ops.chaos.probes", "ha_ops.chaos.actions"):
        return None
    function = getattr(importlib.import_module(value["module"]), value["func"], None)
    if not callable(function):
        return f"{value['module']} has no function {value['func']!r:.40}"
    return _takes(function, value.get("arguments", {}), "configuration", "secrets", replaced=True)


def pause(value: Any) -> str | None:
    """Chaos Toolkit's pause: a number of seconds from 0 to a day, or a ${variable}."""
    if isinstance(value, str) and re.fullmatch(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}", value):
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"{value!r:.40} is not a number of seconds"
    return seconds(high=86_400)(value)


def amount(*, rest: bool) -> Why:
    """A rollout amount: a count from 1, a percentage above 0 up to 100, and for a wave 'rest'."""

    def why(value: Any) -> str | None:
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str):
            return f"{value!r:.40} is not an amount"
        text = value.strip().lower()
        if (rest and text == "rest") or (re.fullmatch(r"[0-9]+", text) and text.strip("0")):  # (from 1)
            return None
        if (percent := re.fullmatch(r"([0-9]+(\.[0-9]+)?)%", text)) and 0 < float(percent.group(1)) <= 100:
            return None
        return f"{value!r:.40} is not an amount"

    return why


def unique(pattern: tuple[Any, ...]) -> Callable[[Any], str | None]:
    """The list at `pattern` names each thing once."""

    def why(document: Any) -> str | None:
        for path, items in places(document, pattern):
            if isinstance(items, list):
                seen = [i for i in items if isinstance(i, str | int)]
                if twice := sorted({str(i) for i in seen if seen.count(i) > 1}):
                    return f"{path}: {twice[0]!r} is listed twice"
        return None

    return why
