"""The edits the kit plants name what they change, and find the cells a formula reads as a spreadsheet does.

The workbooks are written here by hand in CUS-01's shape (a rate on a Summary sheet that every line's formula
multiplies by, ``=ROUND(I2*Summary!$B$3,2)``); every expected cell, old value and new value is written out by hand.
"""

from __future__ import annotations

import json
from pathlib import Path

import openpyxl
import pytest

from pilot import defects
from pilot.protocol.scenario import FallenEdit
from pilot.scenarios.officeio import Heading, Para, save_workbook, write_csv, write_document


@pytest.mark.parametrize(
    ("formula", "sheet", "refs"),
    [
        # A product of a cell and a cell of another sheet, as CUS-01 writes it: "G2*Summary" is no sheet name.
        ("ROUND(G2*Summary!$B$8,2)", "Lines", [("Lines", 7, 2, 7, 2), ("Summary", 2, 8, 2, 8)]),
        ("Summary!B8+Lines!C3-D4", "Lines", [("Summary", 2, 8, 2, 8), ("Lines", 3, 3, 3, 3), ("Lines", 4, 4, 4, 4)]),
        ("SUM('October pay'!K2:K15)", "Variance", [("October pay", 11, 2, 11, 15)]),
        ("'O''Brien''s'!A1*2", "X", [("O'Brien's", 1, 1, 1, 1)]),
        ("ROUND(SUM(Records!D2:D41),2)", "Summary", [("Records", 4, 2, 4, 41)]),
        # A function name with digits is no cell; a name ending in digits before "(" neither.
        ("LOG10(A1)+ATAN2(B2,C3)", "S", [("S", 1, 1, 1, 1), ("S", 2, 2, 2, 2), ("S", 3, 3, 3, 3)]),
        ("$A$1:$B$3*Rates!$C$9", "S", [("S", 1, 1, 2, 3), ("Rates", 3, 9, 3, 9)]),
    ],
)
def test_formula_references_read_sheet_qualified_cells_inside_expressions(formula, sheet, refs):
    assert defects.formula_references(formula, sheet) == refs


def _entry_book(path: Path) -> Path:
    """CUS-01's shape: Summary!B3 the rate, read by each line's customs value; Summary!B4 the total of the lines."""
    wb = openpyxl.Workbook()
    summary = wb.active
    summary.title = "Summary"
    lines = wb.create_sheet("Lines")
    lines.append(["Line", "Value (EUR)", "Customs value (USD)"])
    for k, value in enumerate([9321.20, 11840.30], start=2):
        lines.append([k - 1, value, f"=ROUND(B{k}*Summary!$B$3,2)"])
    summary.append(["Entry summary"])
    summary.append([])
    summary.append(["Exchange rate", 1.0823])
    summary.append(["Customs value", "=ROUND(SUM(Lines!C2:C3),2)"])
    return save_workbook(wb, path)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    out = tmp_path / "ws" / "outputs"
    out.mkdir(parents=True)
    _entry_book(out / "entry.xlsx")
    return tmp_path / "ws"


def test_a_rate_the_lines_read_through_a_product_is_not_overwritten(workspace: Path):
    # Summary!B3 feeds =ROUND(B2*Summary!$B$3,2): overwriting it would move every line. The line is retired and
    # restated at the bottom instead, and the description says where.
    wb = openpyxl.load_workbook(workspace / "outputs" / "entry.xlsx")
    assert defects._is_referenced(wb, wb["Summary"], wb["Summary"]["B3"])
    made = defects.misstate_labelled_value(workspace, "entry.xlsx", "exchange rate", 1.0824, "Summary")
    assert made == (
        "retitled Summary!A3 ('Exchange rate') in entry.xlsx 'Superseded line' and restated the line at "
        "Summary!A6:B6 as 1.0824"
    )
    wb = openpyxl.load_workbook(workspace / "outputs" / "entry.xlsx")
    assert wb["Summary"]["B3"].value == 1.0823 and wb["Lines"]["C2"].value == "=ROUND(B2*Summary!$B$3,2)"
    assert (wb["Summary"]["A6"].value, wb["Summary"]["B6"].value) == ("Exchange rate", 1.0824)


def test_an_overwritten_cell_is_named_with_its_old_and_new_content(workspace: Path):
    made = defects.misstate_labelled_value(workspace, "entry.xlsx", "customs value", 23216.87, "Summary")
    assert made == "overwrote Summary!B4 ('Customs value') in entry.xlsx: =ROUND(SUM(Lines!C2:C3),2) -> 23,216.87"


def test_a_restated_figure_is_kept_outside_the_tolerance_at_the_places_it_is_written(tmp_path: Path):
    out = tmp_path / "ws" / "outputs"
    out.mkdir(parents=True)
    write_document([Heading("Summary"), Para("The corrected ROAS is 3.89, against 4.86 before.")], out / "note.docx")
    # 3.8947 +- 0.006 accepts 3.89; one place beyond is 3.9008, which written to two places (3.90) is still
    # accepted, so the figure moves on to 3.91.
    made = defects.replace_number(tmp_path / "ws", "note.docx", 3.8947, 0.006, 3.9008)
    assert made == "restated the figures within 0.006 of 3.8947 in note.docx: '3.89' -> '3.91'"
    assert str(defects.outside_tolerance(3.8947, 0.006, 3.9008, 2)) == "3.91"
    assert str(defects.outside_tolerance(6135.90, 0.01, 6135.92, 2)) == "6135.92"


def test_csv_and_text_edits_say_what_they_changed(tmp_path: Path):
    ws = tmp_path / "ws"
    (ws / "outputs").mkdir(parents=True)
    write_csv(ws / "outputs" / "plan.csv", ["sku", "order_qty"], [["HW-1180", "850"], ["HW-1350", "560"]])
    assert defects.change_csv_value(ws, "plan.csv", "sku", "HW-1180", "order_qty", 851.0) == (
        "set order_qty of HW-1180 in plan.csv: row 2 '850' -> '851'"
    )
    assert defects.remove_text(ws, "plan.csv", "HW-13\\d0") == (
        "replaced 1 mention(s) of /HW-13\\d0/ in plan.csv ('HW-1350') by '(omitted)'"
    )
    with pytest.raises(defects.DefectNotApplicable, match="no row with sku = HW-9999"):
        defects.change_csv_value(ws, "plan.csv", "sku", "HW-9999", "order_qty", 1.0)


def test_fallen_edits_apply_each_form_and_refuse_text_that_is_not_there(tmp_path: Path):
    from pilot.protocol.scenario import load_scenario

    sc = load_scenario("PAY-01")
    ws = tmp_path / "ws"
    (ws / "outputs").mkdir(parents=True)
    book = ws / "outputs" / "october_variance.xlsx"
    wb = openpyxl.Workbook()
    wb.active.title = "October pay"
    wb.active["D7"] = 0
    save_workbook(wb, book)
    memo = ws / "outputs" / "variance_memo.docx"
    write_document([Heading("Corrections"), Para("Dale Fenwick's October pay must be corrected to nil.")], memo)
    assert defects.apply_fallen_edit(
        sc, ws, FallenEdit("cell", book.name, {"sheet": "October pay", "cell": "D7", "value": 31})
    ) == ("set October pay!D7 of october_variance.xlsx: 0 -> 31")
    made = defects.apply_fallen_edit(
        sc,
        ws,
        FallenEdit("text", memo.name, {"text": "must be corrected to nil.", "becomes": "is correct as drafted."}),
    )
    assert made == "reworded 'must be corrected to nil.' in variance_memo.docx (1x)"
    lines, _ = defects.document_lines(memo)
    assert "Dale Fenwick's October pay is correct as drafted." in lines
    date = defects.apply_fallen_edit(
        sc, ws, FallenEdit("cell", book.name, {"sheet": "October pay", "cell": "E7", "date": "2026-10-16"})
    )
    assert date.startswith("set October pay!E7 of october_variance.xlsx: None -> datetime.datetime(2026, 10, 16")
    with pytest.raises(defects.DefectNotApplicable, match="does not contain 'paid in lieu'"):
        defects.apply_fallen_edit(sc, ws, FallenEdit("text", memo.name, {"text": "paid in lieu", "becomes": "x"}))
    json.dumps(made)  # a description is plain text a report can carry
