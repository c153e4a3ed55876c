"""``pilot scenarios check``: every bundle's oracle passes the reference and fails each package as declared.

The design's ten bundles are checked once, in one batch (one LibreOffice), as the
command does. That a check can fail is shown on the same machinery: an
oracle criterion weakened so that it always passes (a test-only stand-in for
a criterion that checks nothing) makes its mutation row fail, naming it.
"""

from __future__ import annotations

import json
from pathlib import Path

import kit_support
import pytest

from pilot import protocol
from pilot.cli.main import main as cli_main
from pilot.oracles import criteria
from pilot.protocol.scenario import load_scenario
from pilot.scenario_kit.checks import check_scenarios

# The design's ten; the bundles the extension set adds are checked in test_scenario_check_extension.py,
# a file of its own so that the two batches run on different test workers.
SCENARIOS = protocol.study().scenario_set()

pytestmark = pytest.mark.usefixtures("soffice")


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    return check_scenarios(SCENARIOS, workdir=tmp_path_factory.mktemp("kit"))


def test_every_bundle_passes_every_check(report):
    kit_support.assert_every_check_passes(report, SCENARIOS)


@pytest.mark.parametrize("sid", SCENARIOS)
def test_each_bundle_gets_the_whole_matrix(report, sid):
    kit_support.assert_whole_matrix(report, sid)


def test_a_criterion_that_checks_nothing_is_caught(tmp_path, monkeypatch):
    # HR-01's total cost of increases: a labelled value. Weakened, it passes whatever the workbook says.
    real = criteria.CHECKS["labelled_value"]

    def weakened(ctx, c):
        return (True, "weakened for the test") if c.id == "book_total_cost" else real(ctx, c)

    monkeypatch.setitem(criteria.CHECKS, "labelled_value", weakened)
    rep = check_scenarios(["HR-01"], workdir=tmp_path, text_checks=False)
    failed = {r.check: r.reason for r in rep.failures}
    assert set(failed) == {"mutation:book_total_cost"}, failed
    assert "fails nothing on its own, not exactly [book_total_cost]" in failed["mutation:book_total_cost"]


def test_the_command_prints_a_row_per_check_and_exits_1_on_a_failure(tmp_path, monkeypatch, capsys):
    assert cli_main(["scenarios", "check", "OPS-01", "--keep", str(tmp_path / "ok")]) == 0
    out = capsys.readouterr().out
    assert "OPS-01: 0 of" in out and "pass mutation:" in out and "1 scenario(s)," in out and ", 0 failed" in out
    monkeypatch.setitem(criteria.CHECKS, "present", lambda ctx, c: (True, "weakened for the test"))
    assert cli_main(["scenarios", "check", "OPS-01", "--json", "--keep", str(tmp_path / "weak")]) == 1
    rows = json.loads(capsys.readouterr().out.splitlines()[0])
    bad = {r["check"] for r in rows if r["verdict"] != "pass"}
    assert {"no-op", "mutation:plan_present", "mutation:record_present"} <= bad


def test_a_trap_is_caught_only_by_required_content_criteria_that_break_alone():
    from dataclasses import replace

    from pilot.oracles.evaluate import CriterionResult, Evaluation
    from pilot.protocol.scenario import Trap
    from pilot.scenario_kit.checks import ScenarioPackages, _trap_rows
    from pilot.scenario_kit.report import CheckRow
    from pilot.scenario_kit.traps import Fallen, trap_row

    sc = load_scenario("HR-01")

    def fallen(trap: Trap, failing: set[str]) -> Fallen:
        # A fallen package as evaluated: the criteria named fail, the rest pass.
        results = [
            CriterionResult(c.id, c.kind, c.required, c.id not in failing, "as planted", c.file)
            for c in sc.oracle.criteria
        ]
        D = not any(r.required and not r.passed for r in results)
        return Fallen(trap, Path("fallen"), "edited", Evaluation("NEW-01", "ws", D, False, [], results))

    rows = {
        "mutation:book_payroll_2026": CheckRow("NEW-01", "mutation:book_payroll_2026", True, "restated"),
        "mutation:book_capped_at_maximum": CheckRow("NEW-01", "mutation:book_capped_at_maximum", True, "restated"),
        "mutation:book_total_cost": CheckRow(
            "NEW-01", "mutation:book_total_cost", False, "fails nothing on its own, not exactly [book_total_cost]"
        ),
        "mutation:book_present": CheckRow("NEW-01", "mutation:book_present", True, "dropped"),
    }
    payroll = Trap("payroll", "last year's payroll misread", ("book_payroll_2026",))
    capped = Trap("capped", "a raise above the band maximum", ("book_capped_at_maximum",))  # an optional criterion
    total = Trap("total", "the total cost misstated", ("book_total_cost",))
    present = Trap("present", "a trap said to be caught by a file's presence", ("book_present", "book_payroll_2026"))
    assert trap_row(sc, payroll, fallen(payroll, {"book_payroll_2026"}), rows).ok
    assert (
        "book_capped_at_maximum is not required"
        in trap_row(sc, capped, fallen(capped, {"book_capped_at_maximum"}), rows).reason
    )
    assert (
        "book_total_cost does not break alone" in trap_row(sc, total, fallen(total, {"book_total_cost"}), rows).reason
    )
    row = trap_row(sc, present, fallen(present, {"book_payroll_2026"}), rows)
    assert not row.ok and "book_present is a present criterion, which any delivered file satisfies" in row.reason
    assert "its fallen package passes book_present (as planted)" in row.reason
    # A fallen package that also fails a required criterion caught_by does not name, or that is accepted.
    beyond = trap_row(sc, payroll, fallen(payroll, {"book_payroll_2026", "book_payroll_2027"}), rows)
    assert "also fails book_payroll_2027 (as planted), which caught_by does not name" in beyond.reason
    accepted = trap_row(sc, capped, fallen(capped, {"book_capped_at_maximum"}), rows)
    assert "its fallen package is accepted (D=1)" in accepted.reason
    # An optional criterion it also fails is a note, not a failure.
    noted = trap_row(sc, payroll, fallen(payroll, {"book_payroll_2026", "book_capped_at_maximum"}), rows)
    assert noted.ok and "it also fails the optional book_capped_at_maximum" in noted.reason
    # A bundle outside the pilot's ten that declares no trap fails; the ten name theirs in prose.
    assert [(r.check, r.ok) for r in _trap_rows(ScenarioPackages(replace(sc, id="NEW-02")), [])] == [("traps", False)]
    assert [(r.check, r.ok) for r in _trap_rows(ScenarioPackages(sc), [])] == [("traps", True)]


def test_a_named_defect_is_held_to_what_it_declares(tmp_path):
    import numpy as np

    from pilot import defects
    from pilot.oracles.evaluate import evaluate
    from pilot.scenario_kit.checks import expect_declared
    from pilot.scenarios import build_gold_workspace

    sc = load_scenario("OPS-01")
    ws = defects.copy_workspace(build_gold_workspace(sc, tmp_path / "gold"), tmp_path / "dropped")
    planted = defects.plant_defect("drop_deliverable", sc, ws, np.random.default_rng(0))
    # Declared by the defect: the dropped file's presence criterion (OPS-01 has one deliverable besides the record).
    assert planted.breaks == ("plan_present",) and not planted.critical
    ev = evaluate(sc, ws)
    assert expect_declared(planted)(ev) is None
    wrong = defects.Planted(planted.description, ("record_valid",))
    assert "beyond what it declares (['record_valid'])" in expect_declared(wrong)(ev)
    assert "E=0" in expect_declared(defects.Planted("edited an input", critical=True))(ev)


def test_without_libreoffice_the_check_says_how_to_install_it_in_one_line(tmp_path):
    import os
    import subprocess
    import sys

    # A machine without soffice on PATH: the check stops before building anything, with the install step.
    env = {k: v for k, v in os.environ.items() if k != "PILOT_SOFFICE"}
    env["PATH"] = str(tmp_path)  # nothing there
    proc = subprocess.run(
        [sys.executable, "-m", "pilot", "scenarios", "check", "OPS-01", "--keep", str(tmp_path / "k")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("pilot scenarios check: LibreOffice (soffice) is not installed")
    assert "tools/ensure-system-packages.sh office" in lines[0] and "PILOT_SOFFICE" in lines[0]
    assert not (tmp_path / "k" / "OPS-01").exists()


def test_a_libreoffice_that_vanishes_mid_run_is_the_same_one_line(tmp_path, monkeypatch, capsys):
    from pilot.oracles import recalc
    from pilot.scenario_kit import checks

    def gone(*args, **kwargs):
        raise recalc.RecalcUnavailable("LibreOffice (soffice) is not installed; workbooks cannot be recalculated")

    monkeypatch.setattr(checks, "check_scenarios", gone)
    assert cli_main(["scenarios", "check", "OPS-01", "--keep", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "tools/ensure-system-packages.sh office" in err[0]
