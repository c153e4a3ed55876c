"""Read deliverables that passed screening: workbooks, documents, CSV, text.

Each reader returns ``(value, None)`` or ``(None, reason)``; a library error
on a damaged file becomes a reason, never an exception. Documents are read
as a list of lines (paragraphs, table rows, PDF text lines) so that length,
section and content checks work the same on docx, PDF and Markdown.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from typing import Any

from pilot.oracles.safety import decode_utf8

MAX_PDF_PAGES = 200
ERROR_VALUES = (
    "#DIV/0!",
    "#REF!",
    "#NAME?",
    "#VALUE!",
    "#N/A",
    "#NUM!",
    "#NULL!",
    "#SPILL!",
    "#CALC!",
    "#GETTING_DATA",
    "Err:",
)


def load_workbook(path: Path, *, data_only: bool) -> tuple[Any, str | None]:
    import warnings

    import openpyxl

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return openpyxl.load_workbook(path, data_only=data_only, read_only=False), None
    except Exception as exc:  # noqa: BLE001 - any library failure is a finding
        return None, f"{path.name} cannot be opened as a workbook ({type(exc).__name__}: {exc})"


def is_formula(cell) -> bool:
    v = cell.value
    if getattr(cell, "data_type", None) == "f":
        return True
    if isinstance(v, str) and v.startswith("="):
        return True
    return type(v).__name__ in ("ArrayFormula", "DataTableFormula")


def is_error_value(cell) -> bool:
    v = cell.value
    if getattr(cell, "data_type", None) == "e":
        return True
    return isinstance(v, str) and v.strip().startswith(ERROR_VALUES)


def docx_lines(path: Path) -> tuple[list[str] | None, str | None]:
    try:
        from docx import Document

        doc = Document(str(path))
    except Exception as exc:  # noqa: BLE001
        return None, f"{path.name} cannot be opened as a Word document ({type(exc).__name__}: {exc})"
    lines: list[str] = []
    # Body order: paragraphs and tables interleaved as they appear.
    from docx.table import Table as _Table
    from docx.text.paragraph import Paragraph as _Paragraph

    try:
        for block in doc.iter_inner_content():
            if isinstance(block, _Paragraph):
                lines.append(block.text)
            elif isinstance(block, _Table):
                for row in block.rows:
                    cells = []
                    for c in row.cells:
                        if not cells or c.text != cells[-1]:
                            cells.append(c.text)
                    lines.append(" | ".join(cells))
    except Exception as exc:  # noqa: BLE001
        return None, f"{path.name}: document body cannot be read ({type(exc).__name__}: {exc})"
    return lines, None


#: A cell of a line extracted in layout mode: words one space apart (two or more spaces end a cell).
_LAYOUT_CELL = re.compile(r"\S+(?: \S+)*")
#: A table cell is short; a line with a longer run of words is prose.
TABLE_CELL_MAX = 48


def _layout_cells(line: str) -> list[tuple[int, int, str]]:
    return [(m.start(), m.end(), m.group()) for m in _LAYOUT_CELL.finditer(line)]


def _is_row(cells: list[tuple[int, int, str]]) -> bool:
    return len(cells) >= 2 and all(len(t) <= TABLE_CELL_MAX for _, _, t in cells)


def _place_row(cells: list[tuple[int, int, str]], header: list[tuple[int, int, str]]) -> list[str] | None:
    """A row's cells under the header's columns (by the centre of each cell), or None when two share a column."""
    import bisect

    bounds = [(header[k][1] + header[k + 1][0]) / 2 for k in range(len(header) - 1)]
    row = [""] * len(header)
    for start, end, text in cells:
        j = bisect.bisect_right(bounds, (start + end) / 2)
        if row[j]:
            return None
        row[j] = text
    return row


def layout_rows(lines: list[str]) -> list[str]:
    """Lines of a PDF extracted in layout mode, with its tables as ``a | b | c`` rows and its prose as plain lines.

    A table is two or more lines in a row (blank lines between them allowed)
    whose text stands in short cells two or more spaces apart; its first line
    is the header, and each later line's cells are placed under the header's
    columns by position, so a row with an empty cell keeps its columns. Every
    other line is its words, one space apart; blank lines are dropped, as
    plain extraction has none.
    """
    parsed = [_layout_cells(line) for line in lines]
    out: list[str] = []
    header: list[tuple[int, int, str]] | None = None
    for i, cells in enumerate(parsed):
        if not cells:
            # Layout mode marks vertical space with blank lines, which plain lines do not have: a wrapped
            # sentence of a widely spaced paragraph stays one sentence.
            continue
        if header is not None and _is_row(cells):
            row = _place_row(cells, header)
            if row is not None:
                out.append(" | ".join(row))
                continue
        header = None
        if _is_row(cells) and _is_row(next((p for p in parsed[i + 1 :] if p), [])):
            header = cells
            out.append(" | ".join(t for _, _, t in cells))
            continue
        out.append(" ".join(t for _, _, t in cells))
    return out


def _page_layout_rows(page) -> list[str]:
    try:
        text = page.extract_text(extraction_mode="layout")
    except MemoryError:
        raise
    except Exception:  # noqa: BLE001 - a page layout mode cannot lay out is read as plain text lines
        return (page.extract_text() or "").splitlines()
    return layout_rows((text or "").splitlines())


def pdf_lines(path: Path, *, layout: bool = False) -> tuple[list[str] | None, str | None]:
    """A PDF's text lines; ``layout`` keeps its tables' columns (:func:`layout_rows`)."""
    import logging

    try:
        from pypdf import PdfReader

        logging.getLogger("pypdf").setLevel(logging.ERROR)
        reader = PdfReader(str(path), strict=False)
        if reader.is_encrypted:
            return None, f"{path.name} is an encrypted (password-protected) PDF"
        n = len(reader.pages)
        if n == 0:
            return None, f"{path.name} has no pages"
        if n > MAX_PDF_PAGES:
            return None, f"{path.name} has {n} pages, above the limit of {MAX_PDF_PAGES}"
        lines: list[str] = []
        for page in reader.pages:
            lines.extend(_page_layout_rows(page) if layout else (page.extract_text() or "").splitlines())
    except Exception as exc:  # noqa: BLE001
        return None, f"{path.name} cannot be read as a PDF ({type(exc).__name__}: {exc})"
    return lines, None


def text_lines(path: Path) -> tuple[list[str] | None, str | None]:
    text, reason = decode_utf8(path)
    if reason:
        return None, reason
    return text.splitlines(), None


def document_lines(path: Path, *, layout: bool = False) -> tuple[list[str] | None, str | None]:
    """Lines of a docx, PDF, Markdown or text file; ``layout`` reads a PDF's tables as rows (a docx's always are)."""
    suffix = path.suffix.lower()
    if suffix == ".docx":
        return docx_lines(path)
    if suffix == ".pdf":
        return pdf_lines(path, layout=layout)
    return text_lines(path)


def read_csv(path: Path) -> tuple[tuple[list[str], list[list[str]]] | None, str | None]:
    text, reason = decode_utf8(path)
    if reason:
        return None, reason
    if "\x00" in text:
        return None, f"{path.name} contains NUL bytes: not a text CSV"
    try:
        rows = list(csv.reader(io.StringIO(text)))
    except csv.Error as exc:
        return None, f"{path.name} is not parseable CSV ({exc})"
    rows = [r for r in rows if any(c.strip() for c in r)]
    if not rows:
        return None, f"{path.name} has no rows"
    header = [h.strip() for h in rows[0]]
    body = rows[1:]
    if not body:
        return None, f"{path.name} has a header and no data rows"
    for i, r in enumerate(body, start=2):
        if len(r) != len(header):
            return None, f"{path.name} row {i} has {len(r)} fields, the header has {len(header)}"
    return (header, body), None


_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'’.,%$-]*")


def word_count(lines: list[str]) -> int:
    return sum(len(_WORD.findall(line)) for line in lines)


_NUMBER = re.compile(r"(?<![\w.])[-−(]?[$€£]?\d[\d,]*(?:\.\d+)?%?\)?")


def numbers_in(text: str) -> list[tuple[float, str, int]]:
    """Every number written in ``text``: (value, token, offset). 1,234.5 and (12.0) are read."""
    out = []
    for m in _NUMBER.finditer(text):
        tok = m.group(0)
        neg = tok.startswith(("-", "−", "(")) and not (tok.startswith("(") and not tok.endswith(")"))
        core = re.sub(r"[^\d.]", "", tok.replace(",", ""))
        if not core or core.count(".") > 1:
            continue
        try:
            val = float(core.rstrip("."))
        except ValueError:
            continue
        out.append((-val if neg else val, tok, m.start()))
    return out


def parse_number(value: object) -> float | None:
    """A cell or CSV value as a number: numbers, and strings like '1,234.50', '(12)', '12.4%'."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        s = value.strip()
        found = numbers_in(s)
        if len(found) == 1 and len(found[0][1]) >= len(s.replace(" ", "")) - 1:
            v = found[0][0]
            return v / 100.0 if s.endswith("%") else v
    return None
