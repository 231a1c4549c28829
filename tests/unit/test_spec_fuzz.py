"""Fuzzing the spec reader: whatever the input, the result is a ClusterSpec or a SpecError listing problems.

Anything else (a TypeError, a KeyError from the layout, a bare ValueError from YAML) would reach the user as a
traceback instead of a message naming the field.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ha_ops.errors import SpecError
from ha_ops.spec import ClusterSpec, compute_layout, load_spec, parse_spec

LAB_TEXT = (Path(__file__).resolve().parents[2] / "examples" / "lab.yaml").read_text()
LAB: dict[str, Any] = yaml.safe_load(LAB_TEXT)

FUZZ = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    if isinstance(value, list):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


# Values that are nearly right reach the cross-field rules and the layout, not only the type checks.
PLAUSIBLE = [*_leaves(LAB), 0, 1, 2, 3, -1, 0.5, 0.51, 100_000, "rack1", "rack2", "gpu1", "spine1", "leaf2"]
PLAUSIBLE += ["10.77.0.1", "10.77.0.10", "10.77.1.10", "10.76.0.0/30", "10.77.0.0/24", "0.0.0.0/0", ""]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=12),
    st.binary(max_size=4),  # YAML's !!binary
    st.dates(),  # YAML's timestamps
    st.sampled_from(PLAUSIBLE),
)
keys = st.one_of(st.text(max_size=8), st.sampled_from(["name", "domain", "address", "leaf", "count"]), st.integers())
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3),
    max_leaves=8,
)


def _slots(node: Any) -> list[tuple[Any, Any]]:
    """Every (container, key or index) in the tree, so that a mutation can pick any place."""
    found: list[tuple[Any, Any]] = []
    if isinstance(node, dict):
        for key, child in node.items():
            found.append((node, key))
            found += _slots(child)
    elif isinstance(node, list):
        for index, child in enumerate(node):
            found.append((node, index))
            found += _slots(child)
    return found


def _containers(node: Any) -> list[Any]:
    found: list[Any] = [node] if isinstance(node, dict | list) else []
    children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else []
    for child in children:
        found += _containers(child)
    return found


def _mutate(data: st.DataObject, spec: dict[str, Any]) -> None:
    op = data.draw(st.sampled_from(["delete", "replace", "insert"]))
    if op == "insert":
        container = data.draw(st.sampled_from(_containers(spec)))
        if isinstance(container, dict):
            container[data.draw(keys)] = data.draw(values)
        else:
            container.insert(data.draw(st.integers(0, len(container))), data.draw(values))
        return
    slots = _slots(spec)
    if not slots:
        return
    container, key = data.draw(st.sampled_from(slots))
    if op == "delete":
        del container[key]
    else:
        container[key] = data.draw(values)


def _check(parse: Any) -> None:
    try:
        spec = parse()
    except SpecError as exc:
        assert isinstance(exc.problems, list)
        assert exc.problems
        assert all(isinstance(p, str) and p.strip() for p in exc.problems), exc.problems
    else:
        assert isinstance(spec, ClusterSpec)
        assert compute_layout(spec).problems == []  # a valid spec always has a consistent layout


@FUZZ
@given(data=st.data())
def test_mutated_lab_spec(data: st.DataObject) -> None:
    spec = copy.deepcopy(LAB)
    for _ in range(data.draw(st.integers(1, 4))):
        _mutate(data, spec)
    _check(lambda: parse_spec(spec))


@FUZZ
@given(top=values)
def test_any_top_level_value(top: Any) -> None:
    _check(lambda: parse_spec(top))


@settings(FUZZ, max_examples=150)
@given(
    lines=st.lists(st.sampled_from(LAB_TEXT.splitlines()), max_size=40),
    noise=st.text(max_size=6),
    at=st.integers(0),
)
def test_mangled_yaml_text(tmp_path_factory: pytest.TempPathFactory, lines: list[str], noise: str, at: int) -> None:
    """Lines of the lab spec, reordered and repeated, with a few random characters spliced in."""
    text = "\n".join(lines)
    at = at % (len(text) + 1)
    path = tmp_path_factory.getbasetemp() / "fuzz.yaml"
    path.write_text(text[:at] + noise + text[at:], encoding="utf-8")
    _check(lambda: load_spec(path))
