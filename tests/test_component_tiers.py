"""The test tiers (``tests/component_tiers.py``): markers follow from what a test uses, and a use without one fails.

The planted suites run in a pytest of their own with the plugin; none of them starts a real component: the guard
stops an unmarked test before the program starts, and the marked one runs a stand-in named ``soffice``.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import component_tiers as tiers
import pytest

TESTS = Path(__file__).resolve().parent


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider -p no:nbval\n")
    env = os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", env)
        mp.delenv("PILOT_FORBID_SKIPS", raising=False)
        return pytester.runpytest_subprocess("-p", "component_tiers", *args, timeout=300)


def _outcomes(result: pytest.RunResult) -> dict[str, str]:
    return dict(re.findall(r"::(\w+) (PASSED|FAILED|ERROR)", result.stdout.str()))


def test_libreoffice_started_by_an_unmarked_test_fails_it_and_a_marked_one_may(pytester: pytest.Pytester) -> None:
    stand_in = pytester.path / "bin" / "soffice"
    stand_in.parent.mkdir()
    stand_in.write_text("#!/bin/sh\necho 'LibreOffice (a stand-in)'\n")
    stand_in.chmod(0o755)
    pytester.makepyfile(
        test_planted="""
        import subprocess

        import pytest

        @pytest.fixture(scope="session")
        def bwrap():
            # The confinement the soffice fixture asks for, stood in for: this suite starts no real component.
            return "bwrap (a stand-in)"

        def test_in_this_process():
            subprocess.run(["soffice", "--headless", "--version"], check=False)

        def test_in_a_child_process():
            subprocess.run(["sh", "-c", "soffice --headless --version"], check=False)

        def test_with_the_fixture(soffice, request):
            out = subprocess.run([soffice, "--version"], capture_output=True, text=True, check=True).stdout
            assert "stand-in" in out
            # LibreOffice runs confined: the soffice fixture brings the sandbox's marker with it.
            assert {m.name for m in request.node.iter_markers()} >= {"soffice", "bwrap"}

        def test_a_dask_cluster_in_this_process():
            from distributed import LocalCluster

            LocalCluster(n_workers=0, processes=False, dashboard_address=None)
        """
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PILOT_SOFFICE", str(stand_in))
        result = _run(pytester, "-v")
    got = _outcomes(result)
    assert got == {
        "test_in_this_process": "FAILED",
        "test_in_a_child_process": "FAILED",
        "test_with_the_fixture": "PASSED",
        "test_a_dask_cluster_in_this_process": "FAILED",
    }, result.stdout.str()
    out = result.stdout.str()
    assert "uses soffice without the marker (soffice: soffice)" in out
    assert "uses soffice without the marker (soffice: soffice --headless --version (a child process))" in out
    assert "uses dask without the marker (dask: distributed.SpecCluster)" in out


def test_markers_follow_the_fixtures_and_support_modules_and_deselected_files_are_not_imported(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        test_fixtures="""
        import pytest

        def test_recalculates(soffice):
            pass

        @pytest.mark.usefixtures("bwrap", "real_cli")
        def test_runs_the_cli_in_the_sandbox():
            pass

        def test_plain():
            pass
        """,
        test_notebooks="""
        import notebook_helpers

        def test_a_stage():
            pass
        """,
        test_never_imported="""
        import pytest

        pytestmark = pytest.mark.usefixtures("soffice")
        raise RuntimeError("imported although every test in it is deselected")
        """,
    )
    fast = _run(pytester, "--collect-only", "-q", "-m", "not (soffice or bwrap or real_cli or notebook)")
    assert fast.ret == 0, fast.stdout.str()
    collected = [line for line in fast.stdout.lines if "::" in line]
    assert collected == ["test_fixtures.py::test_plain"]
    # Neither the file that imports notebook_helpers nor the one that raises when imported was imported.
    assert "2 test file(s) not imported" in fast.stdout.str()
    assert "imported although" not in fast.stdout.str()
    assert tiers.file_uses(pytester.path / "test_notebooks.py").components == {"notebook"}
    assert tiers.file_uses(pytester.path / "test_never_imported.py").components == {"soffice", "bwrap"}
    assert tiers.file_uses(pytester.path / "test_fixtures.py").components == set()


@pytest.mark.parametrize(
    "argv,expected",
    [
        (["soffice", "--headless", "--convert-to", "xlsx"], "soffice"),
        (["/usr/lib/libreoffice/program/soffice.bin", "--headless"], "soffice"),
        (["bwrap", "--unshare-all", "true"], "bwrap"),
        (["/usr/bin/chromium", "--headless"], "browser"),
        (["latexmk", "-pdf", "main.tex"], "latex"),
        ([sys.executable, "-m", "ipykernel_launcher", "-f", "kernel.json"], "notebook"),
        ([sys.executable, "-m", "pilot", "stage", "power", "-p", "seed", "1"], "notebook"),
        (["pilot", "study", "run", "x", "--backend", "rehearsal"], "real_cli"),
        ([sys.executable, "-m", "pilot", "study", "run", "x", "--executor", "dask"], "dask"),
        (["/venv/lib/python3.11/site-packages/claude_agent_sdk/_bundled/claude", "-p"], "real_cli"),
        ([str(TESTS / "fake_claude" / "claude"), "-p"], None),  # the tests' double of the CLI
        (["git", "status"], None),
        ([sys.executable, "-m", "pilot", "study", "run", "x", "--backend", "simulated"], None),
    ],
)
def test_the_programs_of_each_component(argv: list[str], expected: str | None) -> None:
    found = tiers.component_of(None, argv)
    assert (found[0] if found else None) == expected


def test_a_file_is_left_uncollected_only_when_no_marker_could_select_a_test_of_it() -> None:
    assert tiers._never_selected("not (soffice or slow)", frozenset({"soffice"}))
    assert not tiers._never_selected("not (soffice or slow)", frozenset())
    # A test of the file may add a marker: "soffice" selects it whatever the file says.
    assert not tiers._never_selected("soffice", frozenset())
    assert not tiers._never_selected("soffice or notebook", frozenset({"notebook"}))
    assert tiers._never_selected("notebook and not latex", frozenset({"latex"}))


def test_every_slow_entry_names_a_test_that_exists() -> None:
    for entry in tiers.SLOW:
        file, _, name = entry.partition("::")
        source = (TESTS / file).read_text(encoding="utf-8")
        assert not name or re.search(rf"^def {name}\(", source, re.M), entry
