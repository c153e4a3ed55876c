"""Byte-stable office files for scenario inputs and gold deliverables.

openpyxl, python-docx and reportlab stamp the current time into what they
write (zip entry dates, ``docProps/core.xml``, the PDF info dictionary). The
generators must regenerate the committed inputs byte for byte, so every file
written here has its timestamps pinned: zip archives are rewritten with a
fixed entry date and fixed core properties, PDFs are written in reportlab's
invariant mode.

Documents are described once as a list of blocks (:class:`Heading`,
:class:`Para`, :class:`Table`) and rendered to docx, PDF or Markdown, so a
solver states its memo once whatever format the brief asks for.
"""

from __future__ import annotations

import csv
import io
import re
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

FIXED_ZIP_DATE = (2026, 10, 1, 9, 0, 0)
FIXED_ISO = "2026-10-01T09:00:00Z"
AUTHOR = "Finance Shared Services"

_CORE_TIME = re.compile(rb"(<dcterms:(created|modified)[^>]*>)[^<]*(</dcterms:\2>)")


def normalize_zip(path: Path) -> Path:
    """Rewrite an OOXML archive with fixed entry dates and fixed core timestamps."""
    path = Path(path)
    with zipfile.ZipFile(path) as zin:
        entries = [(info.filename, zin.read(info.filename)) for info in zin.infolist()]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zout:
        for name, data in entries:
            if name == "docProps/core.xml":
                data = _CORE_TIME.sub(lambda m: m.group(1) + FIXED_ISO.encode() + m.group(3), data)
            info = zipfile.ZipInfo(name, date_time=FIXED_ZIP_DATE)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zout.writestr(info, data)
    path.write_bytes(buf.getvalue())
    return path


def save_workbook(wb, path: Path) -> Path:
    """Save an openpyxl workbook with pinned metadata."""
    import datetime as _dt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fixed = _dt.datetime(2026, 10, 1, 9, 0, 0)
    wb.properties.creator = AUTHOR
    wb.properties.lastModifiedBy = AUTHOR
    wb.properties.created = fixed
    wb.properties.modified = fixed
    wb.save(path)
    return normalize_zip(path)


def write_csv(path: Path, header: Sequence[str], rows: Iterable[Sequence[object]]) -> Path:
    """Write a UTF-8 CSV with ``\\n`` line ends (stable across platforms)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(header)
        for row in rows:
            w.writerow(row)
    return path


def write_text(path: Path, text: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.rstrip() + "\n", encoding="utf-8")
    return path


# --------------------------------------------------------------------------
# Documents as blocks
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Heading:
    text: str
    level: int = 1


@dataclass(frozen=True)
class Para:
    text: str


@dataclass(frozen=True)
class Table:
    header: Sequence[str]
    rows: Sequence[Sequence[object]] = field(default_factory=list)


Block = Heading | Para | Table


def cell_text(v: object) -> str:
    if isinstance(v, float):
        return f"{v:,.2f}"
    return str(v)


def pin_core_properties(cp) -> None:
    """Author, dates and revision of a Word document's or a deck's core properties, fixed so files regenerate byte for
    byte."""
    import datetime as _dt

    fixed = _dt.datetime(2026, 10, 1, 9, 0, 0)
    cp.author = AUTHOR
    cp.last_modified_by = AUTHOR
    cp.created = fixed
    cp.modified = fixed
    cp.revision = 1


def write_docx(blocks: Sequence[Block], path: Path, *, title: str | None = None) -> Path:
    """Render blocks to a Word document with pinned metadata."""
    from docx import Document

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = Document()
    cp = doc.core_properties
    pin_core_properties(cp)
    if title:
        cp.title = title
        doc.add_heading(title, level=0)
    for b in blocks:
        if isinstance(b, Heading):
            doc.add_heading(b.text, level=b.level)
        elif isinstance(b, Para):
            doc.add_paragraph(b.text)
        elif isinstance(b, Table):
            t = doc.add_table(rows=1, cols=len(b.header))
            t.style = "Table Grid"
            for i, h in enumerate(b.header):
                t.rows[0].cells[i].text = str(h)
            for row in b.rows:
                cells = t.add_row().cells
                for i, v in enumerate(row):
                    cells[i].text = cell_text(v)
    doc.save(path)
    return normalize_zip(path)


def write_pdf(blocks: Sequence[Block], path: Path, *, title: str | None = None) -> Path:
    """Render blocks to a PDF in reportlab's invariant (byte-stable) mode."""
    from xml.sax.saxutils import escape

    from reportlab.lib import colors
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.lib.units import cm
    from reportlab.platypus import Paragraph, SimpleDocTemplate, Spacer, TableStyle
    from reportlab.platypus import Table as RLTable

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    styles = getSampleStyleSheet()
    story: list = []
    if title:
        story.append(Paragraph(escape(title), styles["Title"]))
    for b in blocks:
        if isinstance(b, Heading):
            story.append(Paragraph(escape(b.text), styles["Heading1" if b.level <= 1 else "Heading2"]))
        elif isinstance(b, Para):
            story.append(Paragraph(escape(b.text), styles["BodyText"]))
            story.append(Spacer(1, 0.15 * cm))
        elif isinstance(b, Table):
            data = [[str(h) for h in b.header]] + [[cell_text(v) for v in row] for row in b.rows]
            t = RLTable(data, repeatRows=1)
            t.setStyle(TableStyle([("GRID", (0, 0), (-1, -1), 0.4, colors.grey), ("FONTSIZE", (0, 0), (-1, -1), 8)]))
            story.append(t)
            story.append(Spacer(1, 0.3 * cm))
    doc = SimpleDocTemplate(
        str(path),
        pagesize=A4,
        invariant=1,
        title=title or "",
        author=AUTHOR,
        creator=AUTHOR,
        producer=AUTHOR,
        leftMargin=2 * cm,
        rightMargin=2 * cm,
        topMargin=2 * cm,
        bottomMargin=2 * cm,
    )
    doc.build(story)
    return path


def write_markdown(blocks: Sequence[Block], path: Path, *, title: str | None = None) -> Path:
    """Render blocks to Markdown (the text substitute of a document)."""
    out: list[str] = []
    if title:
        out += [f"# {title}", ""]
    for b in blocks:
        if isinstance(b, Heading):
            out += ["#" * (b.level + 1) + " " + b.text, ""]
        elif isinstance(b, Para):
            out += [b.text, ""]
        elif isinstance(b, Table):
            out.append("| " + " | ".join(map(str, b.header)) + " |")
            out.append("|" + "---|" * len(b.header))
            out += ["| " + " | ".join(cell_text(v) for v in row) + " |" for row in b.rows]
            out.append("")
    return write_text(path, "\n".join(out))


def write_document(blocks: Sequence[Block], path: Path, *, title: str | None = None) -> Path:
    """Render blocks in the format the file name asks for (.docx, .pdf, .md)."""
    suffix = Path(path).suffix.lower()
    if suffix == ".docx":
        return write_docx(blocks, path, title=title)
    if suffix == ".pdf":
        return write_pdf(blocks, path, title=title)
    if suffix in (".md", ".txt"):
        return write_markdown(blocks, path, title=title)
    raise ValueError(f"{path}: no document writer for {suffix!r}")
