"""Suite-wide rule: under ``make test`` a skipped test fails the run.

``make test`` installs every real component the suite exercises (the pinned
CLI, LibreOffice, bubblewrap, Chromium), so a skip there means a real part
went untested; it sets ``PILOT_FORBID_SKIPS=1``. A developer running a
subset without them still sees skips as skips.
"""

from __future__ import annotations

import os

import pytest


def _skipped(config: pytest.Config) -> list:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    return list(reporter.stats.get("skipped", [])) if reporter is not None else []


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if os.environ.get("PILOT_FORBID_SKIPS") == "1" and _skipped(config):
        terminalreporter.write_line(
            f"FAILED: {len(_skipped(config))} test(s) skipped under PILOT_FORBID_SKIPS=1 "
            "(make test installs every real component; a skipped test is not a passing one)", red=True)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if os.environ.get("PILOT_FORBID_SKIPS") == "1" and _skipped(session.config) and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
