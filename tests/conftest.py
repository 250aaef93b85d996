"""Shared pytest setup: hypothesis profiles.

`make test` runs the default profile; `pytest --hypothesis-profile=thorough` runs every
property test with many more examples (a soak for the codecs and crash recovery).
"""

import re
from collections.abc import Generator
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "default", deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
settings.register_profile(
    "thorough", max_examples=3000, deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture])
settings.load_profile("default")


# --- `make test` (and so CI) passes --require-extras: a test skipped because a client, an
# extra or a tool is missing fails instead, so a broken install cannot pass as green.
_MISSING = re.compile(r"could not import|is not installed|not installed:")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--require-extras", action="store_true",
                     help="fail (not skip) tests whose client library, extra or tool is missing")


def _missing_part(report: pytest.CollectReport | pytest.TestReport) -> str | None:
    if not report.skipped or not isinstance(report.longrepr, tuple):
        return None
    reason = str(report.longrepr[2])
    return reason if _MISSING.search(reason) else None


def _fail_instead(report: pytest.CollectReport | pytest.TestReport, reason: str) -> None:
    report.outcome = "failed"
    report.longrepr = f"--require-extras: skipped for a missing part: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    reason = _missing_part(report)
    if reason and collector.config.getoption("--require-extras"):
        _fail_instead(report, reason)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    reason = _missing_part(report)
    if reason and item.config.getoption("--require-extras"):
        _fail_instead(report, reason)
