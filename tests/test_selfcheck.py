"""The A4 self-check: standalone, format-only, blind to the right answers."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import openpyxl
import pytest

from pilot import defects
from pilot.oracles import SELFCHECK_TOOL, evaluate, install_selfcheck, run_selfcheck
from pilot.scenarios import build_gold_workspace, load_scenario

STDLIB = set(sys.stdlib_module_names)


@pytest.fixture(scope="module")
def golds(tmp_path_factory):
    root = tmp_path_factory.mktemp("selfcheck")
    return {sid: build_gold_workspace(sid, root / sid) for sid in ("ACC-01", "OPS-01", "HEALTH-01", "LEGAL-01")}


def _copy(golds, sid, tmp_path, name="ws"):
    return defects.copy_workspace(golds[sid], tmp_path / name)


def test_tool_is_self_contained_and_knows_no_answers():
    src = SELFCHECK_TOOL.read_text(encoding="utf-8")
    tree = ast.parse(src)
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert imported - STDLIB <= {"pypdf", "__future__"}, imported - STDLIB
    for forbidden in ("import pilot", "from pilot", "oracle.yml", "rubric", "scenarios.library", "expected"):
        assert forbidden not in src


def test_spec_embedded_in_the_workspace_copy_holds_only_the_brief_requirements(golds):
    path = install_selfcheck(load_scenario("ACC-01"), golds["ACC-01"])
    text = path.read_text(encoding="utf-8")
    assert "183153" not in text and "labelled_value" not in text and "10448" not in text
    assert "bank_reconciliation_2026-10.xlsx" in text and '"requires_formulas": true' in text


@pytest.mark.usefixtures("bwrap")  # run_selfcheck runs the tool confined
@pytest.mark.parametrize("sid", ["OPS-01", "HEALTH-01", "LEGAL-01"])
def test_gold_passes(golds, sid):
    report = run_selfcheck(golds[sid], sid)
    assert report.passed, report.text
    assert report.lines[-1].startswith("SELF-CHECK PASSED")


@pytest.mark.usefixtures("bwrap")
def test_installed_copy_runs_alone_in_the_workspace(golds):
    ws = golds["OPS-01"]
    install_selfcheck(load_scenario("OPS-01"), ws)
    env = {"PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [sys.executable, "-I", "selfcheck.py"], cwd=ws, capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "PASS  reorder_plan.csv is a valid CSV" in proc.stdout
    # The controller's run takes the spec from the workspace copy when no scenario is named.
    assert run_selfcheck(ws).passed


@pytest.mark.usefixtures("bwrap")
def test_well_formed_wrong_answer_passes_the_self_check_but_not_the_oracle(golds, tmp_path):
    sc = load_scenario("OPS-01")
    ws = _copy(golds, "OPS-01", tmp_path)
    defects.change_csv_value(ws, "reorder_plan.csv", "sku", "HW-1180", "order_qty", 1)
    defects.drop_csv_rows(ws, "reorder_plan.csv", "sku", "HW-1555")
    assert run_selfcheck(ws, sc).passed
    ev = evaluate(sc, ws)
    assert not ev.D and {c.id for c in ev.failed} == {"plan_skus", "plan_qty_negative_stock", "plan_qty_case_pack"}


@pytest.mark.usefixtures("soffice")
def test_wrong_figures_in_a_workbook_pass_the_self_check(golds, tmp_path):
    ws = _copy(golds, "ACC-01", tmp_path)
    defects.misstate_labelled_value(
        ws, "bank_reconciliation_2026-10.xlsx", "adjusted bank balance", 99999.0, "Reconciliation"
    )
    report = run_selfcheck(ws, "ACC-01")
    assert report.passed, report.text
    assert any("recalculated with LibreOffice" in line for line in report.lines)


def _write_values_only_workbook(path: Path) -> None:
    wb = openpyxl.Workbook()
    wb.active.append(["Adjusted bank balance", 183153.53])
    wb.save(path)


MALFORMED = {
    "missing": (
        lambda ws: defects.drop_deliverable(ws, "clinic_access_report_2026-10.pdf"),
        "HEALTH-01",
        "clinic_access_report_2026-10.pdf missing",
    ),
    "empty": (lambda ws: defects.empty_file(ws, "reorder_plan.csv"), "OPS-01", "reorder_plan.csv is empty"),
    "corrupt_docx": (
        lambda ws: defects.corrupt_file(ws, "msa_review_memo.docx"),
        "LEGAL-01",
        "corrupt or truncated archive",
    ),
    "not_a_pdf": (lambda ws: defects.corrupt_file(ws, "clinic_access_report_2026-10.pdf"), "HEALTH-01", "is not a PDF"),
    "too_short": (
        lambda ws: defects.truncate_document(ws, "msa_review_memo.docx"),
        "LEGAL-01",
        "at least 450 are required",
    ),
    "ragged_csv": (
        lambda ws: (ws / "outputs" / "issues_log.csv").write_text("clause,issue,risk_rating,proposed_change\n8.2,x\n"),
        "LEGAL-01",
        "different number of fields",
    ),
    "no_formulas": (
        lambda ws: _write_values_only_workbook(ws / "outputs" / "bank_reconciliation_2026-10.xlsx"),
        "ACC-01",
        "contains no formulas",
    ),
    "bad_record": (lambda ws: defects.break_completion_record(ws), "OPS-01", "status must be one of"),
    "record_lists_missing_file": (
        lambda ws: (ws / "outputs" / "reorder_plan.csv").rename(ws / "outputs" / "plan.csv"),
        "OPS-01",
        "lists reorder_plan.csv, which is not in outputs/",
    ),
}


@pytest.mark.usefixtures("soffice")
@pytest.mark.parametrize("name", list(MALFORMED))
def test_malformed_deliverable_fails_with_a_reason(golds, tmp_path, name):
    act, sid, words = MALFORMED[name]
    ws = _copy(golds, sid, tmp_path)
    act(ws)
    report = run_selfcheck(ws, sid)
    assert not report.passed and report.exit_code == 1
    fails = [line for line in report.lines if line.startswith("FAIL")]
    assert any(words in line for line in fails), report.text
    assert report.lines[-1].startswith("SELF-CHECK FAILED")


@pytest.mark.usefixtures("soffice")
def test_error_value_in_an_openpyxl_workbook_is_found_by_recalculation(golds, tmp_path):
    ws = _copy(golds, "ACC-01", tmp_path)
    defects.inject_error_value(ws, "bank_reconciliation_2026-10.xlsx", "Reconciliation")
    report = run_selfcheck(ws, "ACC-01")
    assert not report.passed
    assert any("error values" in line and "#DIV/0!" in line for line in report.lines), report.text


def test_without_libreoffice_uncached_formulas_are_a_warning_not_a_pass_claim(golds, tmp_path):
    ws = _copy(golds, "ACC-01", tmp_path)
    spec = tmp_path / "spec.json"
    from pilot.oracles.selfcheck import selfcheck_spec

    spec.write_text(json.dumps(selfcheck_spec(load_scenario("ACC-01"))))
    env = dict(os.environ, PATH=str(tmp_path / "empty-bin"))
    proc = subprocess.run(
        [sys.executable, str(SELFCHECK_TOOL), str(ws), "--spec", str(spec)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout
    assert "WARN  bank_reconciliation_2026-10.xlsx: formulas have no cached values" in proc.stdout
