from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator

import pytest

from ha_ops.lab.cluster import Lab
from tests.labkit import leftovers, make_lab, running_lab
from tests.module_times import module_of, pytest_runtest_logreport, pytest_runtest_protocol, pytest_terminal_summary

__all__ = ["pytest_runtest_logreport", "pytest_runtest_protocol", "pytest_terminal_summary"]  # the time per module

LAB_NAME = "itest"


# Modules that bring their own lab (or none) first, then those sharing the session's lab, in their usual order: the
# session lab then stays up only while it is used, instead of idling under the full lab's timed game day. Molecule's
# scenarios run in the background of the modules from MOLECULE_FROM on (below); its module, last, waits for them. A
# module not listed runs just before it. test_gameday comes after the short session-lab modules and test_rollout:
# its partitions game day waits for Molecule to end (molecule_done), and by then little is left to wait for (152 s
# right after test_chaos, 58 s after test_fleet). test_rollout has no timed assertion to mind Molecule beside it.
MODULE_ORDER = [
    "test_containers", "test_lab_teardown", "test_pulumi", "test_infra_lab", "test_full_lab",
    "test_storage", "test_kubernetes",
    "test_agent", "test_chaos", "test_lab", "test_remediation", "test_checkpoint_jobs", "test_fleet", "test_rollout",
    "test_gameday", "test_partitions", "test_runbooks",
]  # fmt: skip
LAST = "test_molecule"
MOLECULE_FROM = "test_kubernetes"


def _rank(item: pytest.Item) -> int:
    module = module_of(item.nodeid).removesuffix(".py")
    if module == LAST:
        return len(MODULE_ORDER) + 1
    return MODULE_ORDER.index(module) if module in MODULE_ORDER else len(MODULE_ORDER)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_rank)  # stable: a module's tests keep their order
    # Lab tests must run in CI; without root they fail loudly instead of being skipped silently.
    if os.geteuid() != 0:
        for item in items:
            if item.get_closest_marker("lab"):
                item.add_marker(pytest.mark.xfail(reason="lab tests need root", run=False, strict=True))


def labs_built(items: list[pytest.Item]) -> list[str]:
    """Every lab the run builds: the session's, and each module's own (a module that builds one names it LAB_NAME)."""
    modules = {getattr(item, "module", None) for item in items}
    return [LAB_NAME, *sorted({m.LAB_NAME for m in modules if m is not None and hasattr(m, "LAB_NAME")} - {LAB_NAME})]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if os.geteuid() != 0:
        return
    # Nothing of any lab the run built may outlive it.
    left = [f"lab {name}: {what}" for name in labs_built(session.items) for what in leftovers(name)]
    if left:
        sys.stderr.write("\nthe integration run left these behind:\n  " + "\n  ".join(left) + "\n")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


START_MOLECULE = pytest.StashKey[Callable[[], object]]()


@pytest.fixture(scope="session", autouse=True)
def molecule_in_the_background(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """When Molecule's scenarios are among the tests, they run in the background of the lab modules from
    MOLECULE_FROM on, at the lowest CPU priority (test_molecule.py), and the session waits for them to end (each
    with its own destroy). Not beside the full lab and the storage tests: their MooseFS and SSH game days were what
    Molecule's disk work slowed most (nice orders the CPU only; this machine's disks have no I/O scheduler)."""
    ours = [i for i in request.session.items if "scenarios" in getattr(i, "fixturenames", ())]
    if os.geteuid() != 0 or not ours:
        yield
        return
    from tests.integration.test_molecule import Background

    chosen = {i.callspec.params["role"] for i in ours if hasattr(i, "callspec") and "role" in i.callspec.params}
    request.config.stash[START_MOLECULE] = lambda: Background.start(tmp_path_factory.mktemp("molecule"),
                                                                      chosen or None)  # fmt: skip
    try:
        yield
    finally:
        Background.finish()


@pytest.fixture(autouse=True)
def _molecule_from_here(request: pytest.FixtureRequest, molecule_in_the_background: None) -> None:
    start = request.config.stash.get(START_MOLECULE, None)
    if start is not None and _rank(request.node) >= MODULE_ORDER.index(MOLECULE_FROM):
        del request.config.stash[START_MOLECULE]
        start()


@pytest.fixture
def molecule_done() -> None:
    """For a test whose timings fail under load: Molecule's background scenarios end first (the partitions game day
    failed in 2 of 3 full runs while the last scenarios ran beside it, never alone). Each scenario's own test reports
    its result; here only the wait."""
    from concurrent.futures import wait

    from tests.integration.test_molecule import Background

    wait(list(Background.futures.values()))


@pytest.fixture(scope="session")
def lab() -> Iterator[Lab]:
    with running_lab(make_lab(LAB_NAME)) as handle:
        yield handle


@pytest.fixture
def clean_lab(lab: Lab) -> Iterator[None]:
    """A test that injects faults starts from every node in service with fresh controllers, and leaves it so."""
    from ha_ops.chaos import faults
    from tests.labkit import cluster, reset_remediation

    reset_remediation(lab)
    yield
    faults.cleanup(cluster(lab))
    reset_remediation(lab)
