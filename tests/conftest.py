"""Suite-wide rules: the test tiers, and under ``make test`` a skipped test fails the run.

The tiers (``tests/component_tiers.py``): each test is marked with the components it uses (LibreOffice, the
sandbox, the real CLI, Chromium, dask, LaTeX, a notebook kernel) or as slow; ``make check`` runs the tests
with no marker, ``make test`` all of them.

``make test`` installs every real component the suite exercises (the pinned
CLI, LibreOffice, bubblewrap, Chromium), so a skip there means a real part
went untested; it sets ``PILOT_FORBID_SKIPS=1``. A developer running a
subset without them still sees skips as skips.

Also the order of the test files (the longest first), the folder the workers of one run share
(``PILOT_TEST_SHARED_DIR``) and a stand-in worker environment (``worker_env``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest_plugins = ["pytester", "component_tiers"]


def _skipped(config: pytest.Config) -> list:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    return list(reporter.stats.get("skipped", [])) if reporter is not None else []


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if os.environ.get("PILOT_FORBID_SKIPS") == "1" and _skipped(config):
        terminalreporter.write_line(
            f"FAILED: {len(_skipped(config))} test(s) skipped under PILOT_FORBID_SKIPS=1 "
            "(make test installs every real component; a skipped test is not a passing one)",
            red=True,
        )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if os.environ.get("PILOT_FORBID_SKIPS") == "1" and _skipped(session.config) and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


#: The test files that take longest on a 2-core machine (summed --durations=0 of a whole run), slowest first. Collected
#: first, so that under `make test` (pytest-xdist, one file per worker at a time, in collection order: the Makefile
#: passes --no-loadscope-reorder, since xdist's own order, most tests first, sent the long files of few tests last
#: and left one worker busy minutes after the other had run out of files). Order only: every test still runs.
LONG_FILES = (
    "test_oracles.py",
    "test_stats_degraded.py",
    "test_scenario_skeleton.py",
    "test_runner_claude_code.py",
    "test_scenario_check.py",
    "test_scenario_check_extension.py",
    "test_scenario_newcomer.py",
    "test_model_proxy.py",
    "test_blinding.py",
    "test_study_faults.py",
    "test_view.py",
    "test_oracle_mutations.py",
    "test_dask_share_nothing.py",
    "test_sandbox_adversarial.py",
    "test_selfcheck_parity.py",
    "test_dry_run.py",
    "test_manuscript_rehearsal_pdf.py",
    "test_manuscript_dry_run_labels.py",
    "test_rehearsal.py",
    "test_rehearsal_controller.py",
    "test_study_create_concurrency.py",
    "test_stats_exact_scores.py",
    "test_sandbox_privilege.py",
    "test_chaos.py",
    "test_selfcheck.py",
    "test_harness_hands_render.py",
    "test_judges.py",
    "test_notebook_primary.py",
    "test_grading_stage.py",
    "test_grading_browser.py",
    "test_rejudge.py",
    "test_human_stage.py",
    "test_notebook_sensitivity.py",
    "test_reevaluate.py",
    "test_rehearsal_dask.py",
    "test_schedule_study.py",
)


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    rank = {name: k for k, name in enumerate(LONG_FILES)}
    # A stable sort keeps each file's tests in their own order; files not listed keep theirs, after the long ones.
    items.sort(key=lambda item: rank.get(item.path.name, len(LONG_FILES)))


# ------------------------------------------------------------------ a folder the workers of one run share
@pytest.fixture(scope="session", autouse=True)
def _shared_test_dir(tmp_path_factory: pytest.TempPathFactory) -> None:
    """``PILOT_TEST_SHARED_DIR``: beside every xdist worker's own base folder, so pytest prunes it with theirs.

    ``tests/view_support.py`` builds its studies there once per run; outside
    xdist it is not set (the base folder's parent is then shared across runs).
    """
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ["PILOT_TEST_SHARED_DIR"] = str(tmp_path_factory.getbasetemp().parent / "shared")


# ------------------------------------------------------------------ a stand-in worker environment
@pytest.fixture
def worker_env(tmp_path: Path) -> Path:
    """A fresh stand-in worker environment under the test's temporary folder (``worker_env_support``)."""
    from worker_env_support import make_worker_env

    return make_worker_env(tmp_path)
