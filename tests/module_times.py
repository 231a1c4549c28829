"""A pytest plugin for the integration suite: the wall time of each test module (its tests with their setup and
teardown, including the module and session fixtures that run there), printed at the end of the run and, when
HA_OPS_PHASES names a file (scripts/phases.sh), appended to it as one phase per module for CI's summary."""

from __future__ import annotations

import os
import time
from collections import defaultdict
from collections.abc import Generator

import pytest

_seconds: dict[str, float] = defaultdict(float)


def module_of(nodeid: str) -> str:
    """The test module's file name in a node id ("tests/integration/test_lab.py::test_x" -> "test_lab.py")."""
    return nodeid.split("::", 1)[0].rsplit("/", 1)[-1]


_tests: dict[str, int] = defaultdict(int)
_failed: dict[str, int] = defaultdict(int)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
    started = time.monotonic()
    yield
    module = module_of(item.nodeid)
    _seconds[module] += time.monotonic() - started
    _tests[module] += 1


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.failed:
        _failed[module_of(report.nodeid)] += 1


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _seconds:
        return
    terminalreporter.section("time per module")
    for module, seconds in _seconds.items():
        failed = f", {_failed[module]} failed" if _failed[module] else ""
        terminalreporter.write_line(f"{seconds:7.0f} s  {module} ({_tests[module]} tests{failed})")
    terminalreporter.write_line(f"{sum(_seconds.values()):7.0f} s  in all")
    phases = os.environ.get("HA_OPS_PHASES")
    if phases:
        with open(phases, "a") as out:
            for module, seconds in _seconds.items():
                status = f"{_failed[module]} failed" if _failed[module] else "ok"
                out.write(f"  integration: {module} ({_tests[module]} tests)\t{seconds:.0f}\t{status}\n")
