"""The files a grader downloads: what the judges were shown, and nothing that tells how the package was made.

The judges read a rendering from which every trace of the worker's
environment was scrubbed (:mod:`pilot.judges.blinding`). A downloaded file
carries more: an office file names the program that wrote it
(``docProps/app.xml``: ``Openpyxl``, ``LibreOffice``, ``Microsoft Excel``),
its author and times (``docProps/core.xml``), custom properties; a PDF names
its producer and creator in its information dictionary and its XMP stream; a
CSV or a note may say in words why it was made so. Any of these can tell a
grader the toolchain, and so the arm. Before a file leaves the site:

- a workbook is the oracle's recalculated copy when there is one for the
  delivered bytes (:mod:`pilot.judges.recalculated`): values in every formula
  cell, as a spreadsheet program or a previewer shows them, and one program's
  structure for every arm;
- an office file's core, app and custom properties are replaced by empty
  ones, and every zip entry gets one fixed date;
- a PDF is written again without its information dictionary and XMP stream;
- a text file (CSV, Markdown, text) loses the sentences and cells the
  judges' scrubber drops, with the run's own identifiers.

Every file is read through the bounded reader and admitted (screened, parsed
in a bounded child) before a library opens it here; a file that is not
admitted is not offered, with the reason.
"""

from __future__ import annotations

import csv
import io
import zipfile
from dataclasses import dataclass
from pathlib import Path

from pilot.judges.blinding import is_tell, scrub
from pilot.judges.render import csv_delimiter

OFFICE_SUFFIXES = {".xlsx", ".xlsm", ".docx", ".pptx"}
TEXT_SUFFIXES = {".csv", ".tsv", ".md", ".markdown", ".txt", ".text"}
FIXED_ZIP_DATE = (2000, 1, 1, 0, 0, 0)
NEUTRAL_CORE = (
    b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
    b'<cp:coreProperties xmlns:cp="http://schemas.openxmlformats.org/package/2006/metadata/core-properties" '
    b'xmlns:dc="http://purl.org/dc/elements/1.1/" xmlns:dcterms="http://purl.org/dc/terms/" '
    b'xmlns:dcmitype="http://purl.org/dc/dcmitype/" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"/>'
)
NEUTRAL_APP = (
    b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
    b'<Properties xmlns="http://schemas.openxmlformats.org/officeDocument/2006/extended-properties" '
    b'xmlns:vt="http://schemas.openxmlformats.org/officeDocument/2006/docPropsVTypes"/>'
)
NEUTRAL_CUSTOM = (
    b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
    b'<Properties xmlns="http://schemas.openxmlformats.org/officeDocument/2006/custom-properties" '
    b'xmlns:vt="http://schemas.openxmlformats.org/officeDocument/2006/docPropsVTypes"/>'
)
_NEUTRAL_PARTS = {
    "docProps/core.xml": NEUTRAL_CORE,
    "docProps/app.xml": NEUTRAL_APP,
    "docProps/custom.xml": NEUTRAL_CUSTOM,
}


class NotOffered(ValueError):
    """A delivered file that cannot be offered for download; the message says why (shown to the grader)."""


@dataclass(frozen=True)
class Offered:
    """A file as it leaves the site: its bytes, its type, and whether it is the recalculated copy of a workbook."""

    name: str
    data: bytes
    mimetype: str
    recalculated: bool = False


def neutral_office(data: bytes) -> bytes:
    """An Office Open XML archive with empty core, app and custom properties and one fixed date on every entry."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as zin, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            body = _NEUTRAL_PARTS.get(info.filename)
            if body is None:
                body = zin.read(info.filename)
            entry = zipfile.ZipInfo(info.filename, date_time=FIXED_ZIP_DATE)
            entry.compress_type = zipfile.ZIP_DEFLATED
            entry.external_attr = 0o644 << 16
            zout.writestr(entry, body)
    return out.getvalue()


def neutral_pdf(data: bytes) -> bytes:
    """A PDF written again without its information dictionary (producer, creator, author, dates) or XMP stream."""
    from pypdf import PdfReader, PdfWriter
    from pypdf.generic import NameObject

    reader = PdfReader(io.BytesIO(data), strict=False)
    writer = PdfWriter(clone_from=reader)
    writer.metadata = None
    root = writer._root_object
    if NameObject("/Metadata") in root:
        del root[NameObject("/Metadata")]
    buf = io.BytesIO()
    writer.write(buf)
    return buf.getvalue()


def neutral_text(name: str, data: bytes, withheld: list[str]) -> bytes:
    """A text file without what the judges' scrubber drops: a CSV cell by cell, any other text sentence by sentence."""
    text = data.decode("utf-8")
    if Path(name).suffix.lower() in (".csv", ".tsv"):
        delimiter = csv_delimiter(text, name)
        rows = list(csv.reader(io.StringIO(text), delimiter=delimiter))
        out = io.StringIO()
        writer = csv.writer(out, delimiter=delimiter, lineterminator="\n")
        for row in rows:
            cleaned = ["" if is_tell(cell) else scrub(cell, withheld) for cell in row]
            if any(c.strip() for c in cleaned) or not any(c.strip() for c in row):
                writer.writerow(cleaned)
        return out.getvalue().encode("utf-8")
    return scrub(text, withheld).encode("utf-8")


def offered(
    name: str, data: bytes, *, recalculated_copy: bytes | None = None, withheld: list[str] | None = None
) -> Offered:
    """What a grader downloads of the delivered file ``name`` (``data``: its admitted bytes).

    ``recalculated_copy``: the oracle's recalculated copy of these bytes, for a workbook. Raises :class:`NotOffered`
    when the file cannot be made neutral (an archive or a PDF its libraries cannot read, text that is not UTF-8).
    """
    suffix = Path(name).suffix.lower()
    try:
        if suffix in OFFICE_SUFFIXES:
            source = recalculated_copy if recalculated_copy is not None else data
            mime = {
                ".xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
                ".xlsm": "application/vnd.ms-excel.sheet.macroEnabled.12",
                ".docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
                ".pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
            }[suffix]
            return Offered(name, neutral_office(source), mime, recalculated_copy is not None)
        if suffix == ".pdf":
            return Offered(name, neutral_pdf(data), "application/pdf")
        if suffix in TEXT_SUFFIXES:
            mime = "text/csv" if suffix in (".csv", ".tsv") else "text/plain"
            return Offered(name, neutral_text(name, data, list(withheld or ())), f"{mime}; charset=utf-8")
    except (zipfile.BadZipFile, UnicodeDecodeError, ValueError, KeyError, OSError) as exc:
        raise NotOffered(f"cannot be offered without its metadata ({type(exc).__name__})") from None
    except Exception as exc:  # noqa: BLE001 - a library's failure on a hostile file is a refusal, never a crash
        raise NotOffered(f"cannot be offered without its metadata ({type(exc).__name__})") from None
    raise NotOffered(f"a {suffix or 'suffix-less'} file is not offered (its metadata cannot be checked)")
