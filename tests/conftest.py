"""Suite-wide test settings.

In CI (``CI`` set, as `.ci/run` runs) a skipped test is a failure: CI installs every test dependency (verl, lm-eval,
rliable, Debian's chromium), so a skip there means a missing install, which must not pass silently. On a developer's
machine a test whose optional dependency is missing is skipped with its reason (``pytest -ra`` lists them).
"""

from __future__ import annotations

import os

import pytest


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and _in_ci() and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped in CI (every test dependency is installed there): {reason}"
