"""A deliverable's decision table written as one line of text, as some PDF and Word writers flatten a table.

The flattened-table variants take a gold document, replace its decision table by one line of its
cells in reading order, and optionally give a row another verdict (its last cell rewritten). A PDF is
rewritten from its plain text, where the table's cells stand one a line (BANK-01's memo has one table). A Word
document may hold several tables: the one whose header row is given is replaced in place by one paragraph,
with python-docx, so the rest of the file stays byte for byte as it was.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from mutation_support import Mutation

from pilot import defects
from pilot.scenarios import load_scenario
from pilot.scenarios.officeio import normalize_zip


def flat_line(rows: Sequence[Sequence[str]], last_cells: Mapping[str, str] | None = None) -> str:
    """The table's cells in reading order on one line; ``last_cells`` (a row's first cell -> text) rewrites those rows'
    last cell.

    Every row named in ``last_cells`` must be in the table, or the variant would change nothing and pass for the wrong
    reason.
    """
    last_cells = dict(last_cells or {})
    missing = set(last_cells) - {row[0] for row in rows}
    assert not missing, f"no table row starts with {sorted(missing)}"
    return " ".join(c for row in rows for c in (list(row[:-1]) + [last_cells.get(row[0], row[-1])]) if c)


def pdf_table_rows(path: Path) -> list[list[str]]:
    """A PDF's table rows as the oracle reads them (laid out), each a list of cells."""
    from pilot.oracles.readers import document_lines

    lines, reason = document_lines(path, layout=True)
    assert reason is None, reason
    return [[cell.strip() for cell in line.split(" | ")] for line in lines if " | " in line]


def flatten_pdf_table(sid: str, name: str, last_cells: Mapping[str, str] | None = None) -> Mutation:
    """Scenario ``sid``'s PDF ``name`` with its only table written as one line of text (see :func:`flat_line`)."""

    def mutate(ws: Path) -> None:
        path = ws / "outputs" / name
        rows = pdf_table_rows(path)
        assert rows, f"{name} has no table"
        cells = [c for row in rows for c in row if c]
        flat = flat_line(rows, last_cells)

        def tr(lines: list[str]) -> list[str]:
            # Plain text has the table's cells one a line, in the same order: they become one line.
            stripped = [ln.strip() for ln in lines]
            at = next(i for i in range(len(lines)) if stripped[i : i + len(cells)] == cells)
            return lines[:at] + [flat] + lines[at + len(cells) :]

        defects._rewrite_document(path, tr, load_scenario(sid).deliverable(name).required_sections)
        assert not pdf_table_rows(path), f"{name} still has a table"

    return mutate


def docx_table_rows(path: Path) -> list[list[list[str]]]:
    """Every table of a Word document, in body order: its rows, each a list of cell texts."""
    from docx import Document

    return [[[cell.text.strip() for cell in row.cells] for row in table.rows] for table in Document(str(path)).tables]


def flatten_docx_table(name: str, header: Sequence[str], last_cells: Mapping[str, str] | None = None) -> Mutation:
    """The table of Word document ``name`` whose header row is ``header`` replaced by one paragraph of its cells.

    The paragraph takes the table's place with the body text's style; the document's other tables, paragraphs
    and parts are left as they were (python-docx writes back what it read, and the archive is normalised as the
    gold's was).
    """
    header = [h.strip() for h in header]

    def mutate(ws: Path) -> None:
        from docx import Document

        path = ws / "outputs" / name
        doc = Document(str(path))
        picked = [t for t in doc.tables if [c.text.strip() for c in t.rows[0].cells] == header]
        assert len(picked) == 1, f"{name}: {len(picked)} tables with the header {header}"
        table = picked[0]
        rows = [[cell.text.strip() for cell in row.cells] for row in table.rows]
        # A new paragraph is added at the body's end with the default style, as the gold's paragraphs were,
        # then moved to where the table stood.
        paragraph = doc.add_paragraph(flat_line(rows, last_cells))
        table._element.addprevious(paragraph._p)
        table._element.getparent().remove(table._element)
        doc.save(str(path))
        normalize_zip(path)
        assert header not in [t[0] for t in docx_table_rows(path) if t], f"{name} still has the table {header}"

    return mutate
