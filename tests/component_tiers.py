"""Test tiers: every test is marked with the components it needs, from what it uses, and caught when it uses more.

The components (each a marker; ``make check`` runs the tests that carry none, ``make test`` runs them all):

========== ===================================================================================================
soffice    LibreOffice headless: recalculates workbooks, renders documents and decks (confined: brings bwrap)
bwrap      the agent's sandbox: bubblewrap and the socat bridges into it
real_cli   the pinned Claude Code CLI (the ``agent`` extra)
browser    Chromium driven by Playwright
dask       a dask.distributed cluster (scheduler and workers)
latex      LaTeX and poppler (latexmk, pdflatex, pdftotext)
notebook   a Jupyter kernel running a stage notebook (papermill, nbval, ``pilot stage``)
slow       needs none of the above but runs long: whole simulated studies, wide simulations
========== ===================================================================================================

How a test gets its markers (never by hand in the test file):

- from the fixtures it requests, directly, through other fixtures or with ``pytest.mark.usefixtures``:
  each component has a fixture of its name here that hands the test the component (its program, its
  browser) after checking that it is installed; a test that uses a component asks for it, so the marker
  follows from what the test uses (:data:`FIXTURES`); a component that runs inside another asks for that one
  in turn (:data:`NEEDS`: LibreOffice runs confined by bubblewrap, as the oracles run it);
- from the support modules its file imports (:data:`SUPPORT_MODULES`): a file that imports
  ``notebook_helpers`` runs notebooks;
- ``slow`` from :data:`SLOW`: the tests that the fast tier cannot afford, each with its reason.

What catches a missing marker: while a test runs, starting a component's program is refused unless the
test carries that component's marker. In this process an audit hook sees every new process
(``subprocess``, ``os.exec*``, ``os.posix_spawn``, ``os.system``) and every dask cluster or client; for
child processes a folder of stand-ins for the components' programs goes first on ``PATH``. The test then
fails with a line naming the component, the program and the fixture to request
(``tests/test_component_tiers.py`` proves both routes).

Collection is cheap under ``-m``: a test file whose own markers (the support modules it imports and the
component fixtures its ``pytestmark`` requests, read from its source without importing it) deselect every
test it could hold is not imported at all.
"""

from __future__ import annotations

import ast
import importlib.abc
import importlib.machinery
import itertools
import os
import resource
import shlex
import shutil
import stat
import sys
import tempfile
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import pytest

#: Each component's marker and what it stands for (registered with pytest; ``--strict-markers`` refuses others).
COMPONENTS: dict[str, str] = {
    "soffice": "needs LibreOffice headless (soffice)",
    "bwrap": "needs the agent sandbox (bubblewrap, socat)",
    "real_cli": "needs the pinned Claude Code CLI (the agent extra)",
    "browser": "needs Chromium under Playwright",
    "dask": "needs a dask.distributed cluster",
    "latex": "needs LaTeX and poppler (latexmk, pdflatex, pdftotext)",
    "notebook": "executes a stage notebook in a Jupyter kernel",
    "slow": "runs long although it needs none of the components (tests/component_tiers.py SLOW)",
}
GUARDED = tuple(c for c in COMPONENTS if c != "slow")

#: Fixtures that hand a test a component: requesting one (in any way) marks the test.
FIXTURES: dict[str, str] = {c: c for c in GUARDED}

#: The components a component runs inside, whose fixtures its own fixture requests: the harness starts LibreOffice
#: only confined by bubblewrap (pilot.confined), so a test of it uses bwrap too.
NEEDS: dict[str, frozenset[str]] = {"soffice": frozenset({"bwrap"})}


def with_needs(components: Iterable[str]) -> frozenset[str]:
    """``components`` with what each runs inside (:data:`NEEDS`)."""
    found = set(components)
    for c in list(found):
        found |= NEEDS.get(c, frozenset())
    return frozenset(found)


#: Support modules whose importers use a component in every test (the module's own purpose).
SUPPORT_MODULES: dict[str, frozenset[str]] = {
    "notebook_helpers": frozenset({"notebook"}),  # runs the stage notebooks under nbval and `pilot stage`
    "mutation_support": frozenset({"soffice"}),  # evaluates mutated gold packages, workbooks recalculated
    # builds finished simulated studies (shared by the run), whose oracles recalculate workbooks with LibreOffice
    "view_support": frozenset({"soffice"}),
}

#: The tests the fast tier leaves out although they need no component: a test file, or a test (file::name, every
#: parametrization of it), and why. The rule: a test that takes a CPU-second or more, or a family of parametrized
#: tests that takes several, as ``pytest --fast-tier --cpu-durations=100`` lists them (CPU time, so that a loaded
#: machine does not move a test in or out).
SLOW: dict[str, str] = {
    # measured with --cpu-durations on the fast tier (CPU seconds, children included)
    "test_stats_degraded.py": "both statistics stages on each degraded run table (4 CPU-s each)",
    "test_stats_exact_scores.py::test_every_grade_vector_single_judge": "every grade vector of every rubric (8 CPU-s)",
    "test_blinding.py::test_real_scenarios_gold_packages_with_every_arms_tells": "every scenario's gold package (28 s)",
    "test_power.py::test_vectorised_pvalues_equal_scipy": "vectorised p-values against scipy (12 s)",
    "test_stats_properties.py::test_stages_on_random_degraded_tables": "the stages on random tables (hypothesis, 5 s)",
    "test_schedule.py::test_a_crashing_attempt_harms_no_other_and_is_rerun": "crashing attempts in processes (5 s)",
    "test_stats_resampling.py::test_batched_holm_equals_statsmodels_row_by_row": "statsmodels row by row (3 s)",
    "test_stats_resampling.py::test_holm_equals_statsmodels_and_a_hand_example": "statsmodels on many families (2 s)",
    "test_judges.py::test_simulated_judge_reads_the_observable_features": "the simulated panel on many packages (3 s)",
    "test_portal_scenarios.py": "generates every portal scenario's content and compares it (4 s)",
    "test_scenario_consistency.py::test_judge_blinding_passes_on_every_bundle": "every bundle's blinding check (3 s)",
    "test_model_proxy.py::test_any_json_is_either_checked_or_refused_cleanly": "random JSON (hypothesis, 2 s)",
    "test_model_proxy.py::test_two_thousand_refusals_leave_a_bounded_record": "two thousand requests (1 s)",
    "test_simulated_agent.py::test_a4_sometimes_fails_its_first_self_check_and_recovers": "many simulated runs (2 s)",
    "test_stats_synthetic.py::test_estimator_recovers_the_planted_contrast_on_a_large_synthetic_study": "2 CPU-s",
    "test_dry_run.py::test_what_the_derivation_gives_without_running_anything": "the derivation's grid (2 CPU-s)",
    "test_portal_server.py::test_portal_serve_command_prints_url_and_credentials": "a portal through the CLI (1 s)",
    # whole studies, each run in its own process tree, killed and resumed
    "test_chaos.py": "kills the scheduler with SIGKILL at many seeded moments and resumes each time",
    "test_kill_resume.py": "kills a running study with SIGKILL and resumes it",
    "test_process_lifetime.py": "runs attempts' process trees to their end and sweeps what a killed one left",
    "test_schedule_study.py": "creates, runs and exports a whole simulated study through the command line",
    "test_study_faults.py": "runs studies through the command line into full and read-only disks and lost schedulers",
    "test_study_create_concurrency.py": "races several `pilot study` processes on one study",
    "test_view.py": "builds simulated studies to serve and export",
    "test_view_pages.py": "builds simulated studies to serve",
    "test_freeze.py::test_cli_takes_manifest_at_pilot_start_and_export_refuses_to_pool_a_changed_protocol": (
        "runs a pilot wave and a later wave through the command line"
    ),
    "test_dry_run.py::test_planted_acceptance_matches_the_simulated_pipeline": "runs the whole simulated pipeline",
    "test_dry_run.py::test_each_model_defect_breaks_D_or_sets_E_and_the_selfcheck_reports_it": (
        "evaluates a package per defect of the simulated agent's model"
    ),
    "test_model_proxy.py::test_the_harness_memory_stays_bounded_under_a_flood_of_bodies": (
        "floods the proxy with large bodies in a child process"
    ),
    "test_scenarios.py::test_inputs_regenerate_byte_for_byte": "regenerates every scenario's inputs",
    # component tests that are also long (their component markers keep them out of `make check` already)
    "test_dask_executor.py": "starts local dask clusters",
    "test_dask_share_nothing.py": "a study on dask workers in their own processes",
    "test_grading_browser.py": "serves the grading site to Chromium",
    "test_portal_browser.py": "serves the portal to Chromium",
    "test_view_browser.py": "serves the viewer to Chromium",
    "test_record_witness.py": "runs the real CLI through a stream filter",
    "test_rehearsal.py": "a whole rehearsal through the real CLI, sandbox and judges",
    "test_rehearsal_controller.py": "a whole rehearsal of A4 through the real harness",
    "test_rehearsal_dask.py": "a whole rehearsal on two dask workers",
    "test_sandbox_adversarial.py": "every arm's access tried through the real CLI in the sandbox",
    "test_sandbox_privilege.py": "the sandbox tried with every privilege, through the real CLI",
    "test_manuscript_rehearsal_pdf.py": "typesets the manuscript from a rehearsal's outputs",
    "test_scale_rule.py::test_stage_writes_decision_inputs_and_amendment": "runs the scale-rule stage notebook",
    "test_scripted_judges.py::test_the_panel_over_the_real_cli_keeps_j2s_retry_its_own": (
        "three judges' real CLI sessions"
    ),
    "test_scripted_server.py::test_a4_self_check_fails_and_the_recovery_session_repairs": "two real CLI sessions",
    "test_scripted_server.py::test_a_judge_session_through_the_real_cli_gets_the_simulated_judges_grade": (
        "a real CLI judge session"
    ),
    "test_model_proxy.py::test_the_pinned_cli_streams_through_the_proxy_and_costs_agree": "a real CLI session",
    "test_model_proxy.py::test_the_pinned_cli_stops_at_the_first_cap_refusal": "a real CLI session",
    "test_model_proxy.py::test_the_pinned_cli_with_a_wrong_token_is_refused_once": "a real CLI session",
    "test_witness.py::test_the_real_cli_agrees_with_the_record_and_each_tampering_is_caught": "real CLI sessions",
    "test_witness.py::test_the_real_cli_across_a_turn_cap_and_a_resume_is_honest": "real CLI sessions",
}

#: The programs of each guarded component, by the name a process is started with.
PROGRAMS: dict[str, frozenset[str]] = {
    "soffice": frozenset({"soffice", "soffice.bin", "libreoffice", "localc", "lowriter", "loimpress"}),
    "bwrap": frozenset({"bwrap", "socat"}),
    "real_cli": frozenset({"claude"}),
    "browser": frozenset({"chromium", "chromium-browser", "chrome", "google-chrome", "headless_shell"}),
    "dask": frozenset({"dask", "dask-scheduler", "dask-worker"}),
    "latex": frozenset(
        {"latexmk", "pdflatex", "lualatex", "xelatex", "kpsewhich", "bibtex", "pdftotext", "pdfinfo", "pdftoppm"}
    ),
    "notebook": frozenset({"jupyter", "jupyter-execute", "papermill"}),
}


# ------------------------------------------------------------------ what a test file uses, read from its source
@dataclass(frozen=True)
class FileUses:
    imports: frozenset[str]  # every module the file imports at its top, dotted
    fixtures: frozenset[str]  # fixtures its module-level pytestmark requests with usefixtures

    @property
    def components(self) -> frozenset[str]:
        found = {FIXTURES[f] for f in self.fixtures if f in FIXTURES}
        for mod in self.imports:
            found |= SUPPORT_MODULES.get(mod, frozenset())
        return with_needs(found)


def _usefixtures(node: ast.AST) -> Iterator[str]:
    for call in ast.walk(node):
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "usefixtures":
            yield from (a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str))


@cache
def _file_uses(path: str, mtime_ns: int) -> FileUses:
    tree = ast.parse(Path(path).read_text(encoding="utf-8"), path)
    imports: set[str] = set()
    fixtures: set[str] = set()
    for node in tree.body:  # a function's own import is that test's business, not the file's
        if isinstance(node, ast.Import):
            imports.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imports.add(node.module)
        targets = node.targets if isinstance(node, ast.Assign) else []
        if any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in targets):
            fixtures.update(_usefixtures(node))
    return FileUses(frozenset(imports), frozenset(fixtures))


def file_uses(path: Path) -> FileUses:
    return _file_uses(str(path), path.stat().st_mtime_ns)


def slow_reason(nodeid: str) -> str | None:
    """Why a test is slow, from :data:`SLOW` (its file's entry, or its own without parameters)."""
    file, _, name = nodeid.partition("::")
    base = Path(file).name
    return SLOW.get(base) or SLOW.get(f"{base}::{name.split('[')[0]}")


# ------------------------------------------------------------------ markers and cheap collection under -m
#: What ``--fast-tier`` (``make check``) selects: the tests with no component marker.
FAST_TIER = "not (" + " or ".join(COMPONENTS) + ")"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("component tiers")
    group.addoption(
        "--fast-tier",
        action="store_true",
        help=f"run only the tests that need no external component and are not slow (-m '{FAST_TIER}')",
    )
    group.addoption(
        "--cpu-durations",
        type=int,
        default=0,
        metavar="N",
        help="list the N tests that took the most CPU time (with their child processes): what SLOW is decided on, "
        "since a loaded machine stretches wall time but not CPU time",
    )


def pytest_configure(config: pytest.Config) -> None:
    for name, text in COMPONENTS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    if config.getoption("fast_tier"):
        given = config.option.markexpr
        config.option.markexpr = f"({given}) and {FAST_TIER}" if given else FAST_TIER
    config.pluginmanager.register(_Guard(), "component_tiers_guard")


def _never_selected(markexpr: str, markers: frozenset[str]) -> bool:
    """Whether ``-m markexpr`` deselects a test carrying ``markers`` whatever other markers it gets."""
    try:
        from _pytest.mark.expression import Expression
    except ImportError:  # pytest moved its parser: collect everything, as without this plugin
        return False
    expr = Expression.compile(markexpr)
    names = [n for n in COMPONENTS if n not in markers]
    for k in range(len(names) + 1):
        for extra in itertools.combinations(names, k):
            if expr.evaluate(_matcher(markers | set(extra))):
                return False
    return True


def _matcher(markers: set[str] | frozenset[str]) -> Any:
    return lambda name, **_: name in markers


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    markexpr = config.getoption("markexpr", "")
    if not markexpr or not collection_path.name.startswith("test_") or collection_path.suffix != ".py":
        return None
    markers = file_uses(collection_path).components | ({"slow"} if SLOW.get(collection_path.name) else set())
    if markers and _never_selected(markexpr, frozenset(markers)):
        config.stash.setdefault(_UNCOLLECTED, []).append(collection_path.name)
        return True
    return None


_UNCOLLECTED = pytest.StashKey[list[str]]()


def item_components(item: pytest.Item) -> set[str]:
    found = {FIXTURES[f] for f in getattr(item, "fixturenames", ()) if f in FIXTURES}
    found |= file_uses(item.path).components
    if slow_reason(item.nodeid):
        found.add("slow")
    return found


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for name in sorted(item_components(item)):
            item.add_marker(name)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    skipped = config.stash.get(_UNCOLLECTED, [])
    if skipped:
        terminalreporter.write_line(
            f"component tiers: {len(skipped)} test file(s) not imported, every test in them deselected by -m"
        )
    n = config.getoption("cpu_durations")
    spent = _CPU_SPENT
    if n and spent:
        terminalreporter.write_sep("=", f"{n} tests with the most CPU time (setup to teardown, children included)")
        for nodeid, cpu in sorted(spent.items(), key=lambda kv: -kv[1])[:n]:
            terminalreporter.write_line(f"{cpu:8.2f}s  {nodeid}")
        terminalreporter.write_line(f"{sum(spent.values()):8.2f}s  in all, {len(spent)} tests")


def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    item.stash[_CPU_START] = _cpu_seconds()
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    try:
        return (yield)
    finally:
        # On the test's own report, so that pytest-xdist carries it to the process that prints the summary.
        item.user_properties.append(("cpu_s", _cpu_seconds() - item.stash.get(_CPU_START, _cpu_seconds())))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "teardown":
        for key, value in report.user_properties:
            if key == "cpu_s":
                _CPU_SPENT.setdefault(report.nodeid, 0.0)
                _CPU_SPENT[report.nodeid] += value


_CPU_START = pytest.StashKey[float]()
_CPU_SPENT: dict[str, float] = {}


# ------------------------------------------------------------------ the component fixtures
def _need(what: str, where: str | None, how: str) -> str:
    if not where:
        pytest.skip(f"{what} is not installed: {how}")
    return where


@pytest.fixture(scope="session")
def soffice(bwrap: str) -> str:
    """The LibreOffice program the oracles run (``PILOT_SOFFICE`` or ``soffice`` on PATH), in its confinement."""
    from pilot.oracles.recalc import soffice_binary

    return _need("LibreOffice", soffice_binary(), "tools/ensure-system-packages.sh office (make test does it)")


@pytest.fixture(scope="session")
def bwrap() -> str:
    """bubblewrap, with socat for the bridges into the sandbox."""
    from pilot.agents import sandbox

    _need("socat", shutil.which("socat"), "tools/ensure-system-packages.sh sandbox (make test does it)")
    return _need("bubblewrap", sandbox.bwrap_available(), "tools/ensure-system-packages.sh sandbox")


@pytest.fixture(scope="session")
def real_cli() -> Path:
    """The pinned Claude Code CLI: ``PILOT_TEST_CLAUDE_BIN``, else the one bundled in ``claude-agent-sdk``."""
    from real_cli_support import real_cli as find

    return Path(_need("the real Claude Code CLI", str(find() or ""), "pip install -e '.[agent]' (make test does it)"))


@pytest.fixture(scope="session")
def latex() -> str:
    """latexmk and pdflatex (and poppler's pdftotext, which reads a typeset PDF back)."""
    for prog in ("pdflatex", "pdftotext"):
        _need(prog, shutil.which(prog), "tools/ensure-system-packages.sh latex (make test does it)")
    return _need("latexmk", shutil.which("latexmk"), "tools/ensure-system-packages.sh latex")


@pytest.fixture(scope="session")
def notebook() -> str:
    """The Jupyter kernel the stages run in (ipykernel in this environment)."""
    import importlib.util

    return _need(
        "ipykernel", "ipykernel" if importlib.util.find_spec("ipykernel") else None, "pip install -e '.[test]'"
    )


@pytest.fixture(scope="session")
def dask() -> str:
    """dask.distributed, for the tests that start a cluster."""
    import importlib.util

    return _need("distributed", "distributed" if importlib.util.find_spec("distributed") else None, "pip install -e .")


# The distribution's Chromium under Playwright (`make test` installs it through tools/ensure-system-packages.sh
# browser; Playwright's own downloads are never used).
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium per test module."""
    from pilot import paths

    if not paths.CHROMIUM_BIN.exists():
        pytest.skip(f"{paths.CHROMIUM_BIN} missing: run `tools/ensure-system-packages.sh browser` (make test does it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(paths.CHROMIUM_BIN), args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


# ------------------------------------------------------------------ the guard
class ComponentNotDeclared(RuntimeError):
    """A test started a component's program without the component's marker."""


def component_of(executable: str | None, argv: Iterable[str]) -> tuple[str, str] | None:
    """(component, program) when starting ``executable`` with ``argv`` uses a guarded component."""
    args = [str(a) for a in argv]
    prog = str(executable or (args[0] if args else ""))
    base = os.path.basename(prog)
    for comp, names in PROGRAMS.items():
        if base in names:
            if comp == "real_cli" and "/" in prog and not _is_real_cli(prog):
                continue  # another program called claude (the tests' double): not the pinned CLI
            return comp, base
    if "/libreoffice/program/" in prog:
        return "soffice", base
    if "playwright/driver" in prog or "ms-playwright" in prog:
        return "browser", base
    if _is_real_cli(prog):
        return "real_cli", base
    joined = " ".join(args)
    if "ipykernel_launcher" in joined or "--nbval" in joined:
        return "notebook", base
    if "distributed.cli" in joined:
        return "dask", base
    # The study's own command line, in a child process: `pilot stage ...` runs a notebook, a run on the real
    # backends starts the real CLI in the sandbox, `--executor dask` a cluster's client.
    if _runs_pilot(args):
        words = args[args.index("pilot") + 1 :] if "pilot" in args else args[1:]
        if words[:1] == ["stage"]:
            return "notebook", "pilot stage"
        for flag, value, comp in (
            ("--backend", "rehearsal", "real_cli"),
            ("--backend", "claude-code", "real_cli"),
            ("--executor", "dask", "dask"),
        ):
            if any(a == flag and b == value for a, b in itertools.pairwise(words)) or f"{flag}={value}" in words:
                return comp, f"pilot {' '.join(words[:2])} {flag} {value}"
    return None


def _runs_pilot(args: list[str]) -> bool:
    return bool(args) and (
        os.path.basename(args[0]) == "pilot" or any(a == "-m" and b == "pilot" for a, b in itertools.pairwise(args))
    )


@cache
def _real_cli_paths() -> frozenset[str]:
    from real_cli_support import real_cli as find

    cli = find()
    return frozenset({str(cli), os.path.realpath(cli)}) if cli else frozenset()


def _is_real_cli(prog: str) -> bool:
    return "/_bundled/claude" in prog or prog in _real_cli_paths()


_STAND_IN = """#!/bin/sh
printf '%s\\t%s\\n' "{component}" "{program} $*" >> "${{PILOT_TIER_LOG:-/dev/null}}"
echo "component_tiers: {program} is the {component} component, and this test is not marked {component}" >&2
exit 127
"""


@dataclass
class _State:
    allowed: frozenset[str] = frozenset(GUARDED)
    nodeid: str = ""
    log: Path | None = None
    seen: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Guard:
    """Refuses a component's programs to a test without its marker (see the module's docstring)."""

    def __init__(self) -> None:
        self.state = _State()
        self.root = Path(tempfile.mkdtemp(prefix="pilot-tiers-"))
        self.stand_ins: dict[frozenset[str], Path] = {}
        self.count = 0
        sys.addaudithook(self._audit)
        _install_dask_watch(self)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    # -- what a test may start
    def _stand_in_dir(self, refused: frozenset[str]) -> Path:
        if refused not in self.stand_ins:
            d = self.root / ("-".join(sorted(refused)) or "none")
            d.mkdir(exist_ok=True)
            for comp in refused:
                for prog in PROGRAMS[comp]:
                    p = d / prog
                    p.write_text(_STAND_IN.format(component=comp, program=prog))
                    p.chmod(p.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
            self.stand_ins[refused] = d
        return self.stand_ins[refused]

    def refuse(self, component: str, program: str) -> None:
        """Record and refuse a use of ``component`` by the running test, unless it is marked."""
        st = self.state
        if component in st.allowed:
            return
        with st.lock:
            st.seen.append(f"{component}: {program}")
        raise ComponentNotDeclared(
            f"{st.nodeid} started {program}, the {component} component, without the {component} marker: "
            f"request the `{component}` fixture (tests/component_tiers.py)"
        )

    def _audit(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.state.nodeid or event not in _PROCESS_EVENTS:
            return
        try:
            executable, argv = _PROCESS_EVENTS[event](args)
            found = component_of(executable, argv)
        except Exception:  # noqa: BLE001 - an event this reader does not understand is not a component's
            return
        if found:
            self.refuse(*found)

    # -- around each test
    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
        allowed = frozenset(m.name for m in item.iter_markers() if m.name in GUARDED)
        refused = frozenset(GUARDED) - allowed
        self.count += 1
        log = self.root / f"log-{self.count}"  # a process a test leaves behind cannot blame the next one
        saved = {k: os.environ.get(k) for k in ("PATH", "PILOT_TIER_LOG", "PILOT_SOFFICE")}
        os.environ["PATH"] = f"{self._stand_in_dir(refused)}{os.pathsep}{saved['PATH'] or ''}"
        os.environ["PILOT_TIER_LOG"] = str(log)
        if "soffice" in refused:
            os.environ["PILOT_SOFFICE"] = str(self._stand_in_dir(refused) / "soffice")
        self.state = _State(allowed, item.nodeid, log)
        try:
            return (yield)
        finally:
            self.state = _State()
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def _check(self) -> None:
        st = self.state
        if st.log is not None and st.log.exists():
            for line in st.log.read_text().splitlines():
                comp, _, prog = line.partition("\t")
                st.seen.append(f"{comp}: {prog} (a child process)")
            st.log.unlink()
        if st.seen:
            seen, st.seen = list(dict.fromkeys(st.seen)), []
            comps = sorted({s.split(":")[0] for s in seen})
            pytest.fail(
                f"uses {', '.join(comps)} without the marker ({'; '.join(seen)}): request the component's "
                "fixture (tests/component_tiers.py), so that `make check` leaves the test to `make test`",
                pytrace=False,
            )

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Iterator[None]:
        try:
            return (yield)
        finally:
            self._check()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Iterator[None]:
        try:
            return (yield)
        finally:
            self._check()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
        try:
            return (yield)
        finally:
            self._check()


def _popen(args: tuple[Any, ...]) -> tuple[Any, list[str]]:
    executable, argv = args[0], args[1]
    if isinstance(argv, (str, bytes)):
        argv = shlex.split(os.fsdecode(argv))
    return executable, [os.fsdecode(a) if isinstance(a, bytes) else str(a) for a in argv]


_PROCESS_EVENTS = {
    "subprocess.Popen": _popen,
    "os.exec": lambda a: (a[0], list(a[1])),
    "os.posix_spawn": lambda a: (a[0], list(a[1])),
    "os.spawn": lambda a: (a[1], list(a[2])),
    "os.system": lambda a: (None, shlex.split(os.fsdecode(a[0]))),
}


#: Where distributed defines the classes that start or reach a cluster.
_DASK_CLASSES = {"distributed.deploy.spec": "SpecCluster", "distributed.client": "Client"}


def _watch_dask(klass: Any, guard: _Guard) -> None:
    """Make ``klass()`` (a cluster or a client) a use of the dask component."""
    original = klass.__init__
    if getattr(original, "tier_watched", False):
        return

    def __init__(self: Any, *args: Any, **kw: Any) -> None:
        if guard.state.nodeid:
            guard.refuse("dask", f"distributed.{klass.__name__}")
        original(self, *args, **kw)

    __init__.tier_watched = True
    klass.__init__ = __init__


class _WatchDaskOnImport(importlib.abc.MetaPathFinder):
    """Watches distributed's cluster and client as their modules load (the plugin itself never imports them)."""

    def __init__(self, guard: _Guard) -> None:
        self.guard = guard

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in _DASK_CLASSES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_watch(module: Any) -> None:
            exec_module(module)
            _watch_dask(getattr(module, _DASK_CLASSES[name]), self.guard)

        spec.loader.exec_module = exec_and_watch
        return spec


def _install_dask_watch(guard: _Guard) -> None:
    for name, klass in _DASK_CLASSES.items():
        if name in sys.modules:
            _watch_dask(getattr(sys.modules[name], klass), guard)
    sys.meta_path.insert(0, _WatchDaskOnImport(guard))
