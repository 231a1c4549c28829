"""Cluster specs for the ha_ops.iac tests: the examples, and copies changed in one place."""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from ha_ops.spec import ClusterSpec, parse_spec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DIGEST = "sha256:" + "0123456789abcdef" * 4
AGENT_IMAGE = f"registry.example/ha-ops/agent@{DIGEST}"
CONTROLLER_IMAGE = f"registry.example/ha-ops/controller:1.0@{DIGEST}"


@functools.cache
def _data(name: str) -> dict[str, Any]:
    return yaml.safe_load((EXAMPLES / name).read_text())


def example_data(name: str) -> dict[str, Any]:
    return copy.deepcopy(_data(name))


def example(name: str) -> ClusterSpec:
    return parse_spec(example_data(name), name)


def changed(name: str, change: Callable[[dict[str, Any]], None]) -> ClusterSpec:
    """The example with `change` applied to its data, validated as the spec model validates any file."""
    data = example_data(name)
    change(data)
    return parse_spec(data, name)


def unvalidated(spec: ClusterSpec, **update: Any) -> ClusterSpec:
    """A copy the spec model never checked (model_copy does not validate): what code may build by hand."""
    return spec.model_copy(update=update)
