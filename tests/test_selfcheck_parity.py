"""The A4 self-check agrees with the oracle on form: it never passes what the oracle's form checks fail.

Each case is a form defect the workspace tool once let through while the
oracle failed it (a completion record listing a path outside outputs/, a
memo whose words are split over Word runs, a stale cached value hiding an
error, a value taken from another workbook) or a form defect of every
other kind. The tool is run as the worker runs it (the workspace copy,
alone) and as the controller runs it (the pristine copy plus the oracle's
form criteria); both must fail, as the oracle does.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import docx
import pytest

from pilot import defects
from pilot.oracles import Recalculator, evaluate, install_selfcheck, run_selfcheck
from pilot.oracles.evaluate import FORM_KINDS, workbooks_to_recalculate
from pilot.oracles.readers import docx_lines, word_count
from pilot.scenarios import build_gold_workspace, load_scenario

pytestmark = pytest.mark.usefixtures("soffice")

BOOK = "bank_reconciliation_2026-10.xlsx"
MEMO = "reconciliation_memo.docx"


def _rezip(path: Path, change) -> None:
    src = zipfile.ZipFile(path)
    parts = {i.filename: src.read(i) for i in src.infolist()}
    change(parts)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in parts.items():
            z.writestr(name, data)
    path.write_bytes(buf.getvalue())


def record_lists_a_path(ws: Path) -> None:
    rec = json.loads((ws / "outputs" / "completion_record.json").read_text())
    rec["deliverables"].append("../inputs/bank_statement_2026-10.pdf")
    (ws / "outputs" / "completion_record.json").write_text(json.dumps(rec))


def substitute_outside_outputs(ws: Path) -> None:
    rec = json.loads((ws / "outputs" / "completion_record.json").read_text())
    rec["substitutions"].append({"requested": MEMO, "delivered": "../BRIEF.md", "reason": "no Word here"})
    (ws / "outputs" / "completion_record.json").write_text(json.dumps(rec))


def words_split_over_runs(ws: Path, words: int = 239) -> None:
    """A memo with every required heading and ``words`` words, each word written as one run per letter."""
    sections = load_scenario("ACC-01").deliverable(MEMO).required_sections
    doc = docx.Document()
    per = words // len(sections)
    for i, heading in enumerate(sections):
        doc.add_heading(heading, level=1)
        p = doc.add_paragraph()
        n = per - len(heading.split()) if i else per - len(heading.split()) + words % len(sections)
        for k in range(n):
            for ch in f"word{k}":
                p.add_run(ch)
            p.add_run(" ")
    doc.save(ws / "outputs" / MEMO)


def stale_cached_value(ws: Path) -> None:
    """An error formula whose cached value says 0: only a recalculation shows the #DIV/0!."""
    defects.inject_error_value(ws, BOOK, "Reconciliation")

    def cache(parts):
        for name in [n for n in parts if re.match(r"xl/worksheets/sheet\d+\.xml$", n)]:
            xml = parts[name].decode("utf-8")
            parts[name] = re.sub(r"(<f>[^<]*</f>)(<v>[^<]*</v>|<v\s*/>)?", r"\1<v>0</v>", xml).encode("utf-8")

    _rezip(ws / "outputs" / BOOK, cache)


def external_link(ws: Path) -> None:
    def add(parts):
        parts["xl/externalLinks/externalLink1.xml"] = (
            '<externalLink xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><externalBook>'
            '<sheetNames><sheetName val="Sheet1"/></sheetNames></externalBook></externalLink>'
        )

    _rezip(ws / "outputs" / BOOK, add)


# name -> (mutation, oracle form criterion that fails)
PARITY = {
    "record_lists_a_path": (record_lists_a_path, "record_valid"),
    "substitute_outside_outputs": (substitute_outside_outputs, "record_valid"),
    "words_split_over_runs": (words_split_over_runs, "memo_length"),
    "stale_cached_value": (stale_cached_value, "recon_no_errors"),
    "external_link": (external_link, "recon_no_errors"),
}


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("parity")
    with Recalculator(root / "recalc") as r:
        yield {"gold": build_gold_workspace("ACC-01", root / "gold"), "recalc": r, "root": root}


def _worker_run(ws: Path) -> subprocess.CompletedProcess:
    install_selfcheck(load_scenario("ACC-01"), ws)
    return subprocess.run([sys.executable, "-I", "selfcheck.py"], cwd=ws, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("name", list(PARITY))
def test_self_check_fails_what_the_oracle_fails_on_form(env, tmp_path, name):
    mutate, cid = PARITY[name]
    ws = defects.copy_workspace(env["gold"], tmp_path / "ws")
    mutate(ws)
    sc = load_scenario("ACC-01")
    by = {c.id: c for c in evaluate(sc, ws, recalculator=env["recalc"]).criteria}
    assert not by[cid].passed, by[cid].reason
    worker = _worker_run(ws)
    assert worker.returncode == 1 and "SELF-CHECK FAILED" in worker.stdout, worker.stdout
    controller = run_selfcheck(ws, sc, recalculator=env["recalc"])
    assert not controller.passed, controller.text


def test_words_are_counted_per_paragraph_as_the_oracle_counts_them(env, tmp_path):
    ws = defects.copy_workspace(env["gold"], tmp_path / "ws")
    words_split_over_runs(ws, 420)
    lines, _ = docx_lines(ws / "outputs" / MEMO)
    oracle_words = word_count(lines)
    out = _worker_run(ws).stdout
    found = re.search(rf"{re.escape(MEMO)} is a valid document of (\d+) words", out)
    assert found and int(found.group(1)) == oracle_words, out


def test_every_form_defect_of_every_scenario_fails_the_controllers_self_check(env, tmp_path):
    """For each oracle form criterion (presence aside) of each scenario, its defect fails the self-check."""
    cases = []
    for sid in ("ACC-01", "LEGAL-01", "PROC-01", "OPS-01"):
        sc = load_scenario(sid)
        gold = build_gold_workspace(sc, tmp_path / sid / "gold")
        for crit in sc.oracle.criteria:
            if crit.kind not in FORM_KINDS or crit.kind == "present":
                continue
            ws = defects.copy_workspace(gold, tmp_path / sid / crit.id)
            defects.defect_for_criterion(sc, crit, ws, recalculator=env["recalc"])
            cases.append((sid, crit.id, sc, ws))
    # The oracle's form checks read every defective workbook recalculated: one LibreOffice batch for all of them, as the
    # oracle batches a study's workspaces (evaluate_many); the recalculator caches by content, so each check reads its
    # own copy.
    env["recalc"].recalculate([p for _, _, sc, ws in cases for p in workbooks_to_recalculate(sc, ws)])
    for sid, cid, sc, ws in cases:
        report = run_selfcheck(ws, sc, recalculator=env["recalc"])
        assert not report.passed, f"{sid}:{cid}\n{report.text}"
    assert len(cases) >= 15
