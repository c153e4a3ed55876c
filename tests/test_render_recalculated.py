"""Workbooks reach the judges as a spreadsheet program shows them, from the oracle's own LibreOffice pass.

The same workbook written by openpyxl (formulas, no stored values) and saved
again by LibreOffice (formulas with stored values) must render to the same
judges' text, byte for byte: each formula cell as the value it computes, its
formula beside it, an error value as the program shows it. The copies come
from the oracle's recalculator (one LibreOffice process for the run, however
many of its parts ask), and the rendering before A-027 (``stored``) is kept
for the rejudge sensitivity, where the two files differ.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from openpyxl import Workbook

from pilot.judges import recalculated
from pilot.judges.prompt import prompt_for_run, requested_names
from pilot.judges.render import NOT_COMPUTED_NOTE, RECALCULATED_NOTE, keep_recalculated, render_package
from pilot.oracle_formats.evaluate import evaluate
from pilot.oracles.recalc import Recalculator
from pilot.scenarios import build_gold_workspace, load_scenario
from pilot.simulated.agent import save_with_libreoffice

SCENARIO = "BANK-01"


def openpyxl_workbook(path: Path) -> Path:
    """A small analysis as a shell arm's script writes it: formulas (one in lower case), an error, two sheets."""
    wb = Workbook()
    ws = wb.active
    ws.title = "Ratios"
    ws.append(["Item", "Amount"])
    ws.append(["Revenue", 1234.5])
    ws.append(["Cost", 987.25])
    ws.append(["Margin", "=ROUND((B2-B3)/B2,2)"])
    ws.append(["Cover", "=B2/0"])
    ws.append(["Total", "=sum(B2:B3)"])
    wb.create_sheet("Notes")["A1"] = "Prepared from the October ledger."
    path.parent.mkdir(parents=True, exist_ok=True)
    wb.save(path)
    return path


def formula_values(path: Path) -> list[object]:
    """The value each formula cell of the workbook stores (None where it stores none)."""
    from openpyxl import load_workbook

    formulas, values = load_workbook(path), load_workbook(path, data_only=True)
    return [
        values[ws.title][c.coordinate].value
        for ws in formulas.worksheets
        for row in ws.iter_rows()
        for c in row
        if isinstance(c.value, str) and c.value.startswith("=")
    ]


def stored_values(path: Path) -> list[object]:
    from openpyxl import load_workbook

    return [c.value for c in load_workbook(path, data_only=True)["Ratios"]["B"]]


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory, soffice):
    """Two runs of one scenario whose workbooks differ only in the program that saved them."""
    base = tmp_path_factory.mktemp("recalc-render")
    sc = load_scenario(SCENARIO)
    book = next(n for n in requested_names(sc) if n.endswith(".xlsx"))
    made = openpyxl_workbook(base / "made" / book)
    runs = {}
    for who in ("openpyxl", "libreoffice"):
        run = base / who
        ws = build_gold_workspace(sc, run / "workspace")
        shutil.copy(made, ws / "outputs" / book)
        if who == "libreoffice":  # opened and saved with LibreOffice, as a worker with it hands it in
            assert save_with_libreoffice(ws / "outputs" / book, base / "lo-save")
        runs[who] = run
    # The premise: one file stores no value for any formula, the other stores them all.
    assert stored_values(runs["openpyxl"] / "workspace" / "outputs" / book)[3:6] == [None, None, None]
    assert stored_values(runs["libreoffice"] / "workspace" / "outputs" / book)[3:6] == [0.2, "#DIV/0!", 2221.75]
    kept, processes = {}, []
    with Recalculator(base / "recalc") as r:
        for who, run in runs.items():
            kept[who] = keep_recalculated(run, run / "workspace" / "outputs", requested_names(sc), r)
            processes.append(r.processes)
            # The oracle, with the same recalculator, reads the values from that pass: no LibreOffice process more.
            evaluate(sc, run / "workspace", recalculator=r)
            processes.append(r.processes)
    return sc, book, runs, kept, processes


def test_openpyxl_and_libreoffice_saves_render_to_the_same_judges_text(two_runs):
    sc, book, runs, kept, processes = two_runs
    prompts = {
        who: prompt_for_run(sc, run / "workspace" / "outputs", recalculated=kept[who]).text for who, run in runs.items()
    }
    assert prompts["openpyxl"] == prompts["libreoffice"]
    section = prompts["openpyxl"].split(f"### {book}")[1].split("\n### ")[0]
    # Values as a spreadsheet program computes them (hand-computed: (1234.5 - 987.25) / 1234.5 = 0.2003 -> 0.2;
    # 1234.5 + 987.25 = 2221.75), each formula beside its value, as LibreOffice writes it (SUM in capitals).
    assert RECALCULATED_NOTE in section
    assert "| 4 | Margin | 0.2 [=ROUND((B2-B3)/B2,2)] |" in section
    assert "| 5 | Cover | #DIV/0! [=B2/0] |" in section
    assert "| 6 | Total | 2221.75 [=SUM(B2:B3)] |" in section
    assert "Sheet 'Notes'" in section and "Prepared from the October ledger." in section
    # One LibreOffice process per run, shared by the rendering and the oracle.
    assert processes == [1, 1, 2, 2]


def test_the_rendering_before_the_amendment_differs_between_the_two_saves(two_runs):
    sc, book, runs, kept, _ = two_runs
    old = {
        who: prompt_for_run(sc, run / "workspace" / "outputs", recalculated=kept[who], rendering="stored").text
        for who, run in runs.items()
    }
    assert old["openpyxl"] != old["libreoffice"]
    assert "| 4 | Margin | =ROUND((B2-B3)/B2,2) |" in old["openpyxl"]
    assert "| 4 | Margin | =ROUND((B2-B3)/B2,2) -> 0.2 |" in old["libreoffice"]


def test_features_count_values_not_formulas_left_uncomputed(two_runs):
    sc, book, runs, kept, _ = two_runs
    new = render_package(runs["openpyxl"] / "workspace" / "outputs", [book], recalculated=kept["openpyxl"])
    old = render_package(runs["openpyxl"] / "workspace" / "outputs", [book], rendering="stored")
    f_new, f_old = new.deliverables[0].features, old.deliverables[0].features
    assert f_new["recalculated"] is True and f_new["n_formulas"] == f_old["n_formulas"] == 3
    assert (f_new["n_formulas_uncomputed"], f_old["n_formulas_uncomputed"]) == (0, 3)
    assert (f_new["n_error_values"], f_old["n_error_values"]) == (1, 0)


def test_a_copy_is_shown_only_for_the_bytes_it_was_computed_from(two_runs, tmp_path):
    sc, book, runs, kept, _ = two_runs
    run = shutil.copytree(runs["openpyxl"], tmp_path / "run")
    target = run / "workspace" / "outputs" / book
    wb_path = openpyxl_workbook(tmp_path / "other" / book)
    shutil.copy(wb_path, target)
    from openpyxl import load_workbook

    wb = load_workbook(target)
    wb["Ratios"]["B2"] = 2000
    wb.save(target)
    again = recalculated.Recalculated.load(run)
    assert again is not None and again.copies  # the manifest travels with the run folder
    text = render_package(run / "workspace" / "outputs", [book], recalculated=again).text
    # The kept copy answers other bytes: the workbook is shown as stored, with the line that says so.
    assert NOT_COMPUTED_NOTE in text and "=ROUND((B2-B3)/B2,2)" in text and "0.2 [" not in text


def test_the_manifest_names_each_copy_by_the_delivered_bytes(two_runs):
    import hashlib

    sc, book, runs, kept, _ = two_runs
    manifest = json.loads((runs["openpyxl"] / recalculated.FOLDER / recalculated.MANIFEST).read_text())
    (entry,) = [c for c in manifest["copies"] if c["name"] == book]
    delivered = (runs["openpyxl"] / "workspace" / "outputs" / book).read_bytes()
    assert entry["source_sha256"] == hashlib.sha256(delivered).hexdigest() and entry["error"] is None
    copy = runs["openpyxl"] / recalculated.FOLDER / entry["file"]
    assert entry["sha256"] == hashlib.sha256(copy.read_bytes()).hexdigest()


# ---------------------------------------------------------------- PDF tables


def test_the_tables_of_every_gold_pdf_reach_the_judges_as_rows_of_cells(tmp_path, monkeypatch):
    """Each table a reference solver put in its PDF (its own blocks, recorded as it writes them) is shown row by row."""
    import importlib
    import pkgutil

    from pilot.scenarios import library, list_scenarios, officeio

    written: dict[str, list] = {}
    original = officeio.write_pdf

    def recording(blocks, path, *, title=None):
        written[Path(path).name] = list(blocks)
        return original(blocks, path, title=title)

    # Every solver module imported first, so that none binds the recorder at import and keeps it after the test.
    modules = [importlib.import_module(f"{library.__name__}.{m.name}") for m in pkgutil.iter_modules(library.__path__)]
    monkeypatch.setattr(officeio, "write_pdf", recording)
    for module in modules:
        if getattr(module, "write_pdf", None) is original:
            monkeypatch.setattr(module, "write_pdf", recording)
    checked = []
    for sid in list_scenarios():
        sc = load_scenario(sid)
        pdfs = [d.name for d in sc.deliverables if d.kind == "pdf"]
        if not pdfs:
            continue
        written.clear()
        ws = build_gold_workspace(sc, tmp_path / sid)
        tables = [b for name in pdfs for b in written.get(name, []) if isinstance(b, officeio.Table)]
        new = render_package(ws / "outputs", pdfs).text.splitlines()
        old = render_package(ws / "outputs", pdfs, rendering="stored").text
        for table in tables:
            header = "| " + " | ".join(str(h) for h in table.header) + " |"
            assert header in new, f"{sid}: header {header!r} not a row of the rendering"
            assert header not in old  # the plain extraction ran the cells together
            for row in table.rows:
                line = "| " + " | ".join(officeio.cell_text(v) for v in row) + " |"
                assert line in new, f"{sid}: row {line!r} not in the rendering"
            checked.append(sid)
    # BANK-01's ratios, HEALTH-01's clinics and PROC-01's scores (scenario.yml asks each for a PDF memo).
    assert {"BANK-01", "HEALTH-01", "PROC-01"} <= set(checked)


@pytest.mark.parametrize("sid", ["ACC-01", "BANK-01"])
def test_a_gold_package_saved_through_libreoffice_keeps_its_verdict_and_its_judges_prompt(sid, tmp_path, soffice):
    """The simulated worker of an arm with LibreOffice saves its workbooks with it (stored values); nothing the
    oracle or the judges read may change (checked on every protocol scenario with a workbook when this was built)."""
    from pilot.simulated.agent import save_through_spreadsheet

    sc = load_scenario(sid)
    plain = build_gold_workspace(sc, tmp_path / "plain" / "workspace")
    saved = build_gold_workspace(sc, tmp_path / "saved" / "workspace")
    assert save_through_spreadsheet(sc, saved, cache=tmp_path / "cache")
    book = next(d.name for d in sc.file_deliverables if d.kind == "xlsx")
    stored = formula_values(saved / "outputs" / book)
    assert stored and all(v is not None for v in stored)  # every formula stores its value now
    assert all(v is None for v in formula_values(plain / "outputs" / book))  # openpyxl's stored none
    kept = {
        who: keep_recalculated(ws.parent, ws / "outputs", requested_names(sc))
        for who, ws in (("plain", plain), ("saved", saved))
    }
    assert (
        prompt_for_run(sc, plain / "outputs", recalculated=kept["plain"]).text
        == prompt_for_run(sc, saved / "outputs", recalculated=kept["saved"]).text
    )
    assert evaluate(sc, plain).D and evaluate(sc, saved).D
