"""Rendering deliverables as text for the judges: every format, substitutes, bounds, broken files."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from judge_files import MEMO_PARAGRAPHS, write_csv, write_memo, write_pdf, write_record, write_workbook

from pilot.judges.render import RenderLimits, find_delivered, render_deliverable, render_package, sections_found


def test_workbook_is_rendered_sheet_by_sheet_with_formulas_and_values(tmp_path: Path) -> None:
    write_workbook(tmp_path / "budget.xlsx", cached=True)
    d = render_deliverable("budget.xlsx", tmp_path)
    assert d.status == "delivered" and d.format == "workbook"
    lines = d.text.splitlines()
    assert lines[0] == "### budget.xlsx"
    summary, notes = (
        lines.index("Sheet 'Summary' (5 rows x 4 columns)"),
        lines.index("Sheet 'Notes' (1 rows x 1 columns)"),
    )
    assert summary < notes
    # A formula shows as written and with the value it computed.
    assert "| 5 | Total | =SUM(B2:B4) -> 1300 | =SUM(C2:C4) -> 1250 | =SUM(D2:D4) -> -50 |" in lines
    assert "| 3 | Travel | 100 | 112 | =C3-B3 -> 12 |" in lines
    assert "| 1 | Source: ledger extract of 30 September |" in lines
    assert d.features["n_formulas"] == 6 and d.features["n_formulas_uncomputed"] == 0
    assert d.features["n_sheets"] == 2 and d.features["n_error_values"] == 0


def test_workbook_without_cached_values_shows_the_formulas(tmp_path: Path) -> None:
    write_workbook(tmp_path / "budget.xlsx", cached=False)
    d = render_deliverable("budget.xlsx", tmp_path)
    assert "| 5 | Total | =SUM(B2:B4) | =SUM(C2:C4) | =SUM(D2:D4) |" in d.text
    assert d.features["n_formulas_uncomputed"] == 6


def test_workbook_error_values_and_hard_coded_totals_are_visible(tmp_path: Path) -> None:
    write_workbook(tmp_path / "budget.xlsx", cached=True, error=True)
    d = render_deliverable("budget.xlsx", tmp_path)
    assert "=1/0 -> #DIV/0!" in d.text and d.features["n_error_values"] == 1
    write_workbook(tmp_path / "flat.xlsx", formulas=False)
    flat = render_deliverable("flat.xlsx", tmp_path)
    assert "| 5 | Total | 1300 | 1250 | -50 |" in flat.text and flat.features["n_formulas"] == 0


def test_large_workbook_is_bounded(tmp_path: Path) -> None:
    write_workbook(tmp_path / "budget.xlsx", extra_rows=500)
    lim = RenderLimits(max_rows=20, max_cols=3)
    d = render_deliverable("budget.xlsx", tmp_path, lim)
    assert "(first 20 rows and 3 columns shown)" in d.text
    assert "| 21 |" not in d.text and "| 20 |" in d.text
    assert "Variance" not in d.text  # column D is beyond the bound
    tiny = render_deliverable("budget.xlsx", tmp_path, RenderLimits(max_total_chars=600))
    assert tiny.truncated and len(tiny.text) <= 700
    assert tiny.text.endswith("[... the rest of this deliverable is not shown: length limit]")


def test_document_keeps_headings_paragraphs_tables_in_order(tmp_path: Path) -> None:
    write_memo(tmp_path / "memo.docx")
    d = render_deliverable("memo.docx", tmp_path)
    lines = d.text.splitlines()
    assert lines[1] == "# Third-quarter budget review"
    order = [lines.index(f"## {h}") for h in MEMO_PARAGRAPHS]
    assert order == sorted(order)
    assert lines[lines.index("## Findings") + 1] == MEMO_PARAGRAPHS["Findings"]
    assert "| Travel | 100 | 112 |" in lines
    assert lines.index("Table (3 rows):") > lines.index("## Recommendation")
    assert "- Prepared for the finance committee." in lines
    assert d.features["n_headings"] == 4 and d.features["n_tables"] == 1
    assert d.features["n_words"] > 60


def test_pdf_text_page_by_page(tmp_path: Path) -> None:
    write_pdf(tmp_path / "report.pdf", ["Quarterly review", "Spending 1,250 thousand"], pages=3)
    d = render_deliverable("report.pdf", tmp_path)
    assert d.format == "pdf" and d.features["n_pages"] == 3
    assert "--- page 2 of 3 ---" in d.text and "Spending 1,250 thousand" in d.text and "Page 3" in d.text
    bounded = render_deliverable("report.pdf", tmp_path, RenderLimits(max_pages=1))
    assert "--- page 2 of 3 ---" not in bounded.text and "the first 1 are shown" in bounded.text


def test_csv_is_a_table(tmp_path: Path) -> None:
    write_csv(tmp_path / "ledger.csv", [["id", "amount"], ["1", "10.5"], ["2", "=A1*2"], ["3", "#REF!"]])
    d = render_deliverable("ledger.csv", tmp_path)
    assert "(4 rows x 2 columns)" in d.text and "| 1 | 10.5 |" in d.text
    assert d.features["n_formulas"] == 1 and d.features["n_error_values"] == 1


def test_text_substitute_is_rendered_under_the_requested_name(tmp_path: Path) -> None:
    write_csv(tmp_path / "budget.Summary.csv", [["Line", "Budget"], ["Total", "1300"]])
    write_csv(tmp_path / "budget.Notes.csv", [["Source: ledger"]])
    (tmp_path / "memo.md").write_text("# Memo\n\n## Summary\nSpend was 1,250 thousand.\n", encoding="utf-8")
    pkg = render_package(tmp_path, ["budget.xlsx", "memo.docx", "completion_record.json"])
    names = [d.requested for d in pkg.deliverables]
    assert names == ["budget.xlsx", "memo.docx", "completion_record.json"]
    book, memo, record = pkg.deliverables
    assert record.status == "missing"
    assert book.status == "substitute" and book.text.startswith("### budget.xlsx\n(received as ")
    assert "Part 'Summary' (2 rows x 2 columns)" in book.text and "Part 'Notes'" in book.text
    assert book.features["substitute"] and book.features["n_formulas"] == 0
    assert memo.status == "substitute" and memo.text.startswith("### memo.docx\n(received as memo.md: plain text)")
    assert "## Summary" in memo.text and memo.features["n_headings"] == 2


def test_declared_substitution_is_followed(tmp_path: Path) -> None:
    (tmp_path / "q3_figures.txt").write_text("Total 1300", encoding="utf-8")
    write_record(
        tmp_path,
        ["q3_figures.txt"],
        substitutions=[{"requested": "budget.xlsx", "delivered": "q3_figures.txt", "reason": "x"}],
    )
    status, files = find_delivered("budget.xlsx", tmp_path)
    assert status == "substitute" and [f.name for f in files] == ["q3_figures.txt"]


def test_exact_name_wins_and_is_case_insensitive(tmp_path: Path) -> None:
    write_workbook(tmp_path / "Budget.XLSX")
    write_csv(tmp_path / "budget.csv", [["x"]])
    status, files = find_delivered("budget.xlsx", tmp_path)
    assert status == "delivered" and files[0].name == "Budget.XLSX"


def test_missing_deliverable_is_shown_as_missing(tmp_path: Path) -> None:
    d = render_deliverable("memo.docx", tmp_path)
    assert d.status == "missing" and "not delivered" in d.text and not d.present
    d2 = render_deliverable("memo.docx", tmp_path / "no-such-folder")
    assert d2.status == "missing"


@pytest.mark.parametrize(
    "name, payload, reason",
    [
        # Refused by the guarded reader the oracle uses, with the oracle's reason.
        ("budget.xlsx", b"this is not a zip archive", "(refused: budget.xlsx is not a zip archive"),
        ("memo.docx", b"PK\x03\x04 broken", "(refused: memo.docx is a corrupt or truncated zip archive"),
        ("report.pdf", b"%PDF-1.4 garbage without objects", "(refused: report.pdf cannot be read (PdfStreamError"),
        ("memo.docx", b"", "(refused: memo.docx is empty (0 bytes))"),
        ("chart.png", b"\x89PNG\r\n\x1a\n" + b"\x00" * 64, "cannot be shown as text"),
    ],
)
def test_unrenderable_file_is_shown_never_raised(tmp_path: Path, name: str, payload: bytes, reason: str) -> None:
    (tmp_path / name).write_bytes(payload)
    d = render_deliverable(name, tmp_path)
    assert d.status == "unreadable" and d.features["unreadable"]
    assert reason in d.text
    assert str(tmp_path) not in d.text  # an error message never carries the file's path


def test_zip_that_is_not_a_workbook(tmp_path: Path) -> None:
    with zipfile.ZipFile(tmp_path / "budget.xlsx", "w") as z:
        z.writestr("hello.txt", "not a workbook")
    d = render_deliverable("budget.xlsx", tmp_path)
    assert d.status == "unreadable"


def test_total_budget_is_shared_between_deliverables(tmp_path: Path) -> None:
    write_workbook(tmp_path / "budget.xlsx", extra_rows=300)
    (tmp_path / "notes.md").write_text("word " * 20000, encoding="utf-8")
    write_memo(tmp_path / "memo.docx")
    pkg = render_package(tmp_path, ["budget.xlsx", "notes.md", "memo.docx"], RenderLimits(max_total_chars=9000))
    assert pkg.n_chars <= 9000 + 3 * 100
    assert "## Recommendation" in pkg.deliverables[2].text  # a long file does not crowd out the others
    assert pkg.deliverables[1].truncated


def test_sections_found_counts_headings_and_lines() -> None:
    text = "# Report\n## 1. Summary\ntext\nFindings\nmore"
    assert sections_found(text, ["Summary", "Findings", "Recommendation"]) == 2


def test_completion_record_is_shown_without_substitution_reasons(tmp_path: Path) -> None:
    write_record(
        tmp_path,
        ["budget.csv"],
        substitutions=[
            {"requested": "budget.xlsx", "delivered": "budget.csv", "reason": "binary formats cannot be produced here"}
        ],
        questions=["Should capital items deferred to January be accrued?"],
        notes="Travel overrun traced to the September conference.",
    )
    d = render_deliverable("completion_record.json", tmp_path)
    assert d.status == "delivered"
    assert "in another format: requested budget.xlsx, delivered budget.csv (a reason is given)" in d.text
    assert "- Should capital items deferred to January be accrued?" in d.text
    assert "notes:\nTravel overrun traced to the September conference." in d.text
    assert "cannot be produced" not in d.text and d.features["n_questions"] == 1
    (tmp_path / "completion_record.json").write_text("{not json", encoding="utf-8")
    bad = render_deliverable("completion_record.json", tmp_path)
    assert bad.status == "unreadable" and "not a valid JSON object" in bad.text
