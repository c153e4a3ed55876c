"""Render a run's deliverables as text a judge can read.

Each requested deliverable is looked up in the run's ``outputs/`` folder and
rendered by the library made for its format: a workbook sheet by sheet with
cell values and formulas (openpyxl), a Word document with its headings,
paragraphs and tables in order (python-docx), a slide deck slide by slide
with its titles, text, tables and notes (python-pptx), a PDF's text page by
page (pypdf), a CSV as a table, a text file as it is. A text substitute (a
``name.csv``, ``name.<sheet>.csv`` or ``name.md`` in place of a requested
``name.xlsx`` or ``name.docx``) is rendered under the requested name.

Every file is opened through the oracle's guarded reader
(:mod:`pilot.oracles.admission`) before any library touches it: a link (out
of the workspace or not), a pipe, an oversized file, a zip bomb, an encrypted
or macro-bearing archive, or a file that a time- and memory-limited child
process cannot parse reaches the judges as "refused: <reason>", never its
contents or its target; an admitted file is rendered from a private copy of
its bytes, read beneath the workspace by the bounded reader
(:mod:`pilot.worker_files`) (a deck, which the core reader does not parse, is
screened and parsed in such a child by :mod:`pilot.oracle_formats.pptx_reader`).
Rendering is bounded (rows, columns, pages, characters
per deliverable and in total) and never raises: a file that cannot be
opened is shown as such. Each
rendered deliverable also carries a few observable features (presence,
formulas, error values, words, headings, tables) that the simulated judge
scores; the real judges read only the text.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from openpyxl.utils import get_column_letter

from pilot import worker_files
from pilot.oracles import admission, guard

COMPLETION_RECORD = "completion_record.json"

WORKBOOK_SUFFIXES = {".xlsx", ".xlsm"}
DOCUMENT_SUFFIXES = {".docx"}
DECK_SUFFIXES = {".pptx"}
PDF_SUFFIXES = {".pdf"}
TABLE_SUFFIXES = {".csv", ".tsv"}
TEXT_SUFFIXES = {".md", ".markdown", ".txt", ".text", ".json", ".html", ".htm", ".xml", ".yaml", ".yml", ".rst"}
# The order in which text substitutes are looked for when a requested file is absent.
SUBSTITUTE_SUFFIXES = (".csv", ".tsv", ".md", ".markdown", ".txt", ".html", ".htm", ".json")

EXCEL_ERRORS = ("#DIV/0!", "#N/A", "#NAME?", "#NULL!", "#NUM!", "#REF!", "#VALUE!", "#SPILL!", "#CALC!", "Err:")

FORMAT_LABELS = {
    "workbook": "Excel workbook",
    "document": "Word document",
    "deck": "PowerPoint slide deck",
    "pdf": "PDF document",
    "table": "CSV text table",
    "text": "plain text",
    "other": "file",
}


@dataclass(frozen=True)
class RenderLimits:
    """Bounds on what one rendering may contain."""

    max_total_chars: int = 60_000
    max_sheets: int = 12
    max_rows: int = 60
    max_cols: int = 16
    max_cell_chars: int = 300
    max_table_rows: int = 40
    max_pages: int = 25
    max_file_bytes: int = 25_000_000


@dataclass
class RenderedDeliverable:
    """One requested deliverable as the judges see it."""

    requested: str
    delivered: list[str]
    status: str  # delivered | substitute | missing | unreadable
    format: str  # workbook | document | pdf | table | text | other | none
    text: str
    features: dict[str, Any] = field(default_factory=dict)
    truncated: bool = False
    # What the scenario states about this file (min_words, requires_formulas,
    # required_sections); used by the simulated judge, never shown in the prompt.
    requirements: dict[str, Any] = field(default_factory=dict)

    @property
    def present(self) -> bool:
        return self.status in ("delivered", "substitute")


@dataclass
class RenderedPackage:
    """Every requested deliverable of one run, rendered."""

    deliverables: list[RenderedDeliverable]

    @property
    def text(self) -> str:
        return "\n\n".join(d.text for d in self.deliverables)

    @property
    def n_chars(self) -> int:
        return sum(len(d.text) for d in self.deliverables)


class _Budget:
    """A character budget; text past it is cut and flagged."""

    def __init__(self, limit: int) -> None:
        self.limit = max(limit, 200)
        self.parts: list[str] = []
        self.used = 0
        self.truncated = False

    def add(self, line: str) -> bool:
        if self.truncated:
            return False
        if self.used + len(line) + 1 > self.limit:
            room = self.limit - self.used
            if room > 40:
                self.parts.append(line[: room - 20])
            self.parts.append("[... the rest of this deliverable is not shown: length limit]")
            self.truncated = True
            return False
        self.parts.append(line)
        self.used += len(line) + 1
        return True

    def text(self) -> str:
        return "\n".join(self.parts)


def _cell_text(value: Any, limit: int) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        s = f"{value:.10g}"
    else:
        s = str(value)
    s = " ".join(s.split()).replace("|", "/")
    return s if len(s) <= limit else s[: limit - 3] + "..."


def _table_lines(rows: list[list[str]], header_cols: list[str] | None) -> list[str]:
    width = max((len(r) for r in rows), default=0)
    if header_cols is not None:
        width = max(width, len(header_cols))
    lines = []
    if header_cols is not None:
        lines.append("| " + " | ".join(header_cols[:width]) + " |")
    for r in rows:
        lines.append("| " + " | ".join(r + [""] * (width - len(r))) + " |")
    return lines


def _is_error_value(v: Any) -> bool:
    return isinstance(v, str) and v.strip().startswith(EXCEL_ERRORS)


# ---------------------------------------------------------------- formats


def _render_workbook(path: Path, budget: _Budget, lim: RenderLimits, feats: dict) -> None:
    from openpyxl import load_workbook

    wb_f = load_workbook(path, data_only=False, read_only=True)
    wb_v = load_workbook(path, data_only=True, read_only=True)
    try:
        names = wb_f.sheetnames
        feats.update(n_sheets=len(names), n_formulas=0, n_error_values=0, n_cells=0, n_formulas_uncomputed=0)
        if len(names) > lim.max_sheets:
            budget.add(f"(the workbook has {len(names)} sheets; the first {lim.max_sheets} are shown)")
        for name in names[: lim.max_sheets]:
            ws_f, ws_v = wb_f[name], wb_v[name]
            if ws_f.max_row is None:
                # A file without a stored dimension: measure it (bounded by the read below).
                ws_f.calculate_dimension(force=True)
            n_rows, n_cols = ws_f.max_row or 0, ws_f.max_column or 0
            if not budget.add(f"Sheet '{name}' ({n_rows} rows x {n_cols} columns)"):
                return
            shown_rows = min(n_rows, lim.max_rows)
            shown_cols = min(n_cols, lim.max_cols)
            if shown_rows == 0 or shown_cols == 0:
                budget.add("(empty sheet)")
                continue
            rows_f = ws_f.iter_rows(min_row=1, max_row=shown_rows, max_col=shown_cols)
            rows_v = ws_v.iter_rows(min_row=1, max_row=shown_rows, max_col=shown_cols, values_only=True)
            body: list[list[str]] = []
            for r_idx, (row_f, row_v) in enumerate(zip(rows_f, rows_v, strict=True), start=1):
                cells = [str(r_idx)]
                for cell, cached in zip(row_f, row_v, strict=True):
                    raw = cell.value
                    if raw is not None:
                        feats["n_cells"] += 1
                    if isinstance(raw, str) and raw.startswith("="):
                        feats["n_formulas"] += 1
                        if cached is None:
                            feats["n_formulas_uncomputed"] += 1
                            cells.append(_cell_text(raw, lim.max_cell_chars))
                        else:
                            cells.append(
                                _cell_text(f"{raw} -> {_cell_text(cached, lim.max_cell_chars)}", lim.max_cell_chars * 2)
                            )
                    else:
                        shown = cached if cached is not None else raw
                        cells.append(_cell_text(shown, lim.max_cell_chars))
                    if _is_error_value(cached) or getattr(cell, "data_type", None) == "e":
                        feats["n_error_values"] += 1
                # Drop trailing empty cells so sparse sheets stay compact.
                while len(cells) > 1 and cells[-1] == "":
                    cells.pop()
                body.append(cells)
            header = [""] + [get_column_letter(c) for c in range(1, shown_cols + 1)]
            for line in _table_lines(body, header):
                if not budget.add(line):
                    return
            if n_rows > shown_rows or n_cols > shown_cols:
                budget.add(f"(first {shown_rows} rows and {shown_cols} columns shown)")
    finally:
        wb_f.close()
        wb_v.close()


def _render_document(path: Path, budget: _Budget, lim: RenderLimits, feats: dict) -> None:
    import docx
    from docx.table import Table

    doc = docx.Document(str(path))
    feats.update(n_headings=0, n_tables=0, n_paragraphs=0, n_words=0)
    for block in doc.iter_inner_content():
        if isinstance(block, Table):
            feats["n_tables"] += 1
            rows: list[list[str]] = []
            for i, row in enumerate(block.rows):
                if i >= lim.max_table_rows:
                    break
                cells = [_cell_text(c.text, lim.max_cell_chars) for c in row.cells]
                feats["n_words"] += sum(len(c.split()) for c in cells)
                rows.append(cells)
            budget.add(f"Table ({len(block.rows)} rows):")
            for line in _table_lines(rows, None):
                if not budget.add(line):
                    return
            if len(block.rows) > lim.max_table_rows:
                budget.add(f"(first {lim.max_table_rows} rows shown)")
            continue
        text = " ".join(block.text.split())
        if not text:
            continue
        style = (block.style.name if block.style is not None else "") or ""
        feats["n_words"] += len(text.split())
        m = re.match(r"Heading\s*(\d)", style)
        if m or style == "Title":
            feats["n_headings"] += 1
            level = int(m.group(1)) if m else 1
            line = "#" * min(level, 6) + " " + text
        elif "List" in style:
            feats["n_paragraphs"] += 1
            line = "- " + text
        else:
            feats["n_paragraphs"] += 1
            line = text
        if not budget.add(line):
            return


def _render_deck(path: Path, budget: _Budget, lim: RenderLimits, feats: dict) -> None:
    from pilot.oracle_formats.pptx_reader import parse

    deck = parse(path)
    feats.update(n_headings=0, n_tables=0, n_paragraphs=0, n_words=0, n_slides=len(deck.slides))
    for slide in deck.slides:
        feats["n_headings"] += bool(slide.title)
        feats["n_tables"] += len(slide.tables)
        if not budget.add(f"## Slide {slide.number}: {slide.title or '(untitled)'}"):
            return
        table_rows = {" | ".join(r) for t in slide.tables for r in t}
        for line in slide.lines:
            feats["n_words"] += len(line.split())
            if line not in table_rows:
                feats["n_paragraphs"] += 1
            if not budget.add(line):
                return
        if slide.notes and not budget.add("Notes: " + " ".join(slide.notes)):
            return


def _render_pdf(path: Path, budget: _Budget, lim: RenderLimits, feats: dict) -> None:
    from pypdf import PdfReader

    reader = PdfReader(str(path))
    if reader.is_encrypted:
        reader.decrypt("")
    n = len(reader.pages)
    feats.update(n_pages=n, n_words=0)
    for i, page in enumerate(reader.pages):
        if i >= lim.max_pages:
            budget.add(f"(the PDF has {n} pages; the first {lim.max_pages} are shown)")
            return
        text = page.extract_text() or ""
        feats["n_words"] += len(text.split())
        if not budget.add(f"--- page {i + 1} of {n} ---"):
            return
        for line in text.splitlines():
            line = line.rstrip()
            if line and not budget.add(line):
                return


class _NotText(ValueError):
    """A text file that the oracle would not read as text either."""


def _read_text(path: Path, lim: RenderLimits) -> str:
    # UTF-8 only, as the oracle reads text: the judges never see a file the oracle could not read.
    text, reason = admission.read_text(admission.Admission(path.name, path, None))
    if reason:
        raise _NotText(reason)
    return text[: lim.max_file_bytes]


def _render_table(path: Path, budget: _Budget, lim: RenderLimits, feats: dict, label: str | None = None) -> None:
    text = _read_text(path, lim)
    delimiter = "\t" if path.suffix.lower() == ".tsv" else ","
    if delimiter == ",":
        try:
            delimiter = csv.Sniffer().sniff(text[:4096], delimiters=",;\t").delimiter
        except csv.Error:
            pass
    rows = list(csv.reader(io.StringIO(text), delimiter=delimiter))
    n_rows = len(rows)
    n_cols = max((len(r) for r in rows), default=0)
    feats["n_rows"] = feats.get("n_rows", 0) + n_rows
    feats["n_sheets"] = feats.get("n_sheets", 0) + 1
    feats["n_cells"] = feats.get("n_cells", 0) + sum(1 for r in rows for c in r if c.strip())
    feats["n_formulas"] = feats.get("n_formulas", 0) + sum(1 for r in rows for c in r if c.startswith("="))
    feats["n_error_values"] = feats.get("n_error_values", 0) + sum(1 for r in rows for c in r if _is_error_value(c))
    if label is not None:
        budget.add(f"Part '{label}' ({n_rows} rows x {n_cols} columns)")
    else:
        budget.add(f"({n_rows} rows x {n_cols} columns)")
    shown = [[_cell_text(c, lim.max_cell_chars) for c in r[: lim.max_cols]] for r in rows[: lim.max_rows]]
    for line in _table_lines(shown, None):
        if not budget.add(line):
            return
    if n_rows > lim.max_rows or n_cols > lim.max_cols:
        budget.add(f"(first {min(n_rows, lim.max_rows)} rows and {min(n_cols, lim.max_cols)} columns shown)")


def _render_text(path: Path, budget: _Budget, lim: RenderLimits, feats: dict) -> None:
    text = _read_text(path, lim)
    if path.suffix.lower() == ".json":
        try:
            text = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            pass
    elif path.suffix.lower() in (".html", ".htm"):
        text = re.sub(r"<(script|style)\b.*?</\1>", " ", text, flags=re.S | re.I)
        text = re.sub(r"<br\s*/?>|</p>|</h\d>|</tr>|</li>", "\n", text, flags=re.I)
        text = re.sub(r"<[^>]+>", " ", text)
    lines = text.splitlines()
    feats["n_words"] = feats.get("n_words", 0) + len(text.split())
    feats["n_headings"] = feats.get("n_headings", 0) + sum(1 for ln in lines if re.match(r"^#{1,6}\s+\S", ln))
    feats["n_tables"] = feats.get("n_tables", 0) + sum(
        1 for a, b in itertools.pairwise(lines) if a.lstrip().startswith("|") and re.match(r"^\s*\|?\s*:?-{3,}", b)
    )
    for line in lines:
        if not budget.add(line.rstrip()):
            return


def format_of(path: Path) -> str:
    """The rendering family of a file, from its suffix."""
    s = path.suffix.lower()
    if s in WORKBOOK_SUFFIXES:
        return "workbook"
    if s in DOCUMENT_SUFFIXES:
        return "document"
    if s in DECK_SUFFIXES:
        return "deck"
    if s in PDF_SUFFIXES:
        return "pdf"
    if s in TABLE_SUFFIXES:
        return "table"
    if s in TEXT_SUFFIXES:
        return "text"
    return "other"


_RENDERERS = {
    "workbook": _render_workbook,
    "document": _render_document,
    "deck": _render_deck,
    "pdf": _render_pdf,
    "table": _render_table,
    "text": _render_text,
}


def _short_error(exc: BaseException) -> str:
    # The message of a failed open can carry the file's absolute path; keep the kind only.
    msg = str(exc).splitlines()[0] if str(exc) else ""
    msg = re.sub(r"(/[^\s'\"]+)+", "", msg)
    return f"{type(exc).__name__}: {msg}".strip().rstrip(":")[:160]


_ABS_PATH = re.compile(r"(?<![\w.])/[^\s'\")]+")


def _refusal(adm: admission.Admission) -> str:
    # A refusal names the file and the reason; an absolute path (a link's target) is not shown.
    return _ABS_PATH.sub("<path>", adm.refusal)


def _render_file(path: Path, budget: _Budget, lim: RenderLimits, feats: dict, label: str | None = None) -> str | None:
    """Render one file into ``budget``; return a reason when it cannot be rendered."""
    fmt = format_of(path)
    adm = admission.admit(path, path.parent.parent)
    if not adm.ok:
        return _refusal(adm)
    if fmt == "deck":
        # The core admission knows no deck: the deck reader screens the archive and parses it in a bounded child.
        from pilot.oracle_formats.pptx_reader import read_deck

        _, reason = read_deck(adm.path, path.parent.parent)
        if reason:
            return _refusal(admission.Admission(adm.name, None, reason))
    path = adm.path
    size = path.stat().st_size
    feats["bytes"] = feats.get("bytes", 0) + size
    if size > lim.max_file_bytes:
        return f"the file is too large to show ({size} bytes)"
    if fmt == "other":
        return f"a {path.suffix.lower() or 'suffix-less'} file of {size} bytes cannot be shown as text"
    try:
        if fmt == "table":
            _render_table(path, budget, lim, feats, label)
        else:
            if label is not None:
                budget.add(f"Part '{label}'")
            _RENDERERS[fmt](path, budget, lim, feats)
    except _NotText as exc:
        return f"refused: {exc}"
    except Exception as exc:  # noqa: BLE001 - any failure to open is shown, never raised
        return f"the file could not be opened as {FORMAT_LABELS[fmt]} ({_short_error(exc)})"
    return None


# ---------------------------------------------------------------- lookup


def _listing(outputs_dir: Path) -> dict[str, Path]:
    """Every entry of outputs/, links, folders and special files included, so that a link, a folder
    or a pipe under a requested name is found and refused rather than read or skipped."""
    outputs_dir = Path(outputs_dir)
    names = admission.output_names(outputs_dir)
    return {n.lower(): outputs_dir / n for n in names if not n.startswith(".")}


def _record(outputs_dir: Path) -> tuple[Any, str | None, admission.Admission]:
    """The completion record as JSON, read through the guarded reader: (value, reason, admission)."""
    adm = admission.admit(Path(outputs_dir) / COMPLETION_RECORD, Path(outputs_dir).parent, "completion_record")
    text, reason = admission.read_text(adm)
    if reason:
        return None, reason, adm
    try:
        return json.loads(text), None, adm
    except ValueError as exc:
        return None, f"{COMPLETION_RECORD} is not valid JSON ({type(exc).__name__})", adm


def _declared_substitutes(outputs_dir: Path) -> dict[str, list[str]]:
    """requested name (lower case) -> delivered names, from the completion record."""
    rec, reason, _ = _record(outputs_dir)
    if reason or not isinstance(rec, dict):
        return {}
    subs = rec.get("substitutions") or []
    out: dict[str, list[str]] = {}
    for s in subs if isinstance(subs, list) else []:
        if not isinstance(s, dict):
            continue
        req, dlv = s.get("requested"), s.get("delivered")
        if isinstance(req, str) and dlv:
            names = dlv if isinstance(dlv, list) else [dlv]
            out.setdefault(Path(req).name.lower(), []).extend(Path(str(n)).name for n in names)
    return out


def find_delivered(requested: str, outputs_dir: Path) -> tuple[str, list[Path]]:
    """The files that answer a requested deliverable: ``("delivered"|"substitute"|"missing", files)``.

    Exact name first (case-insensitive); then substitutes declared in the
    completion record; then text files under the same base name
    (``name.csv``, ``name.<part>.csv``, ``name.md`` ...).
    """
    files = _listing(outputs_dir)
    req = Path(requested).name
    exact = files.get(req.lower())
    if exact is not None:
        return "delivered", [exact]
    declared = [files[n.lower()] for n in _declared_substitutes(outputs_dir).get(req.lower(), []) if n.lower() in files]
    if declared:
        return "substitute", declared
    stem = Path(req).stem.lower()
    req_suffix = Path(req).suffix.lower()
    found: list[Path] = []
    for suffix in SUBSTITUTE_SUFFIXES:
        if suffix == req_suffix:
            continue
        if stem + suffix in files:
            found.append(files[stem + suffix])
        # Several parts of one substitute: name.<part>.csv
        found.extend(
            p
            for n, p in files.items()
            if n.startswith(stem + ".") and n.endswith(suffix) and n != stem + suffix and n.count(".") >= 2
        )
    if found:
        uniq = list(dict.fromkeys(found))
        return "substitute", uniq
    return "missing", []


def render_completion_record(outputs_dir: Path, max_chars: int = 4000) -> RenderedDeliverable:
    """The completion record as the judges see it: status, files, substitutions, questions, notes.

    A substitution's ``reason`` is replaced by whether one was given: it can
    only describe the worker's environment, which the judges must not learn.
    The notes pass through the same scrubbing as every other text.
    """
    budget = _Budget(max_chars)
    budget.add(f"### {COMPLETION_RECORD}")
    path = Path(outputs_dir) / COMPLETION_RECORD
    present = COMPLETION_RECORD in admission.output_names(Path(outputs_dir))
    feats: dict[str, Any] = {"present": present, "substitute": False, "unreadable": False}
    if not present:
        budget.add("(not delivered: no file of this name is in the package)")
        return RenderedDeliverable(COMPLETION_RECORD, [], "missing", "none", budget.text(), feats)
    rec, reason, adm = _record(Path(outputs_dir))
    if not adm.ok:
        feats["unreadable"] = True
        budget.add(f"(this file cannot be shown: {_refusal(adm)})")
        return RenderedDeliverable(COMPLETION_RECORD, [path.name], "unreadable", "text", budget.text(), feats)
    if reason or not isinstance(rec, dict):
        feats["unreadable"] = True
        budget.add(f"(this file cannot be shown: it is not a valid JSON object ({reason or 'another JSON value'}))")
        return RenderedDeliverable(COMPLETION_RECORD, [path.name], "unreadable", "text", budget.text(), feats)
    budget.add(f"status: {rec.get('status', '(not stated)')}")
    files = rec.get("deliverables")
    budget.add(
        "deliverables: " + (", ".join(map(str, files)) if isinstance(files, list) and files else "(none listed)")
    )
    subs = [s for s in rec.get("substitutions") or [] if isinstance(s, dict)]
    for s in subs:
        # The reason itself can only describe the environment; the judge learns whether one was given.
        given = "a reason is given" if isinstance(s.get("reason"), str) and s["reason"].strip() else "no reason given"
        budget.add(
            f"in another format: requested {s.get('requested', '?')}, delivered {s.get('delivered', '?')} ({given})"
        )
    # Questions and notes are scrubbed here too, so that an entry made only of
    # tells leaves no empty label or tell-tale count behind.
    from pilot.judges.blinding import scrub

    raw_questions = [q for q in rec.get("questions") or [] if isinstance(q, str)]
    questions = [k for k in (scrub(" ".join(q.split())).strip() for q in raw_questions) if k]
    budget.add(f"questions ({len(questions)}):" if questions else "questions: none")
    for q in questions:
        budget.add(f"- {q}")
    notes = rec.get("notes")
    if isinstance(notes, str):
        kept = scrub(" ".join(notes.split())).strip()
        if kept:
            budget.add("notes:")
            budget.add(kept)
    feats.update(n_questions=len(questions), n_substitutions=len(subs))
    return RenderedDeliverable(
        COMPLETION_RECORD, [path.name], "delivered", "text", budget.text(), feats, budget.truncated
    )


def render_deliverable(
    requested: str, outputs_dir: Path, limits: RenderLimits | None = None, max_chars: int | None = None
) -> RenderedDeliverable:
    """Render one requested deliverable from ``outputs_dir``; never raises on a bad file."""
    lim = limits or RenderLimits()
    req = Path(requested).name
    if req == COMPLETION_RECORD:
        return render_completion_record(outputs_dir, min(max_chars or 4000, 4000))
    budget = _Budget(max_chars or lim.max_total_chars)
    status, files = find_delivered(req, outputs_dir)
    feats: dict[str, Any] = {"present": False, "substitute": False, "unreadable": False}
    budget.add(f"### {req}")
    if status == "missing":
        budget.add("(not delivered: no file of this name is in the package)")
        return RenderedDeliverable(req, [], "missing", "none", budget.text(), feats, False)
    feats["present"] = True
    feats["substitute"] = status == "substitute"
    fmt = format_of(files[0])
    if status == "substitute":
        budget.add(f"(received as {', '.join(p.name for p in files)}: {FORMAT_LABELS[fmt]})")
    problems = []
    multi = len(files) > 1
    for p in files:
        label = None
        if multi:
            parts = p.name.split(".")
            label = parts[-2] if len(parts) >= 3 else p.stem
        reason = _render_file(p, budget, lim, feats, label)
        if reason:
            problems.append(reason)
            budget.add(f"({reason})" if reason.startswith("refused: ") else f"(this file cannot be shown: {reason})")
    if problems and len(problems) == len(files):
        status = "unreadable"
        feats["unreadable"] = True
    feats["chars"] = budget.used
    return RenderedDeliverable(req, [p.name for p in files], status, fmt, budget.text(), feats, budget.truncated)


@guard.holding()
@worker_files.copies_scope()
def render_package(
    outputs_dir: Path,
    requested: Iterable[str],
    limits: RenderLimits | None = None,
    requirements: dict[str, dict[str, Any]] | None = None,
) -> RenderedPackage:
    """Render every requested deliverable, sharing the total character budget equally."""
    lim = limits or RenderLimits()
    names = [Path(r).name for r in requested]
    files = [n for n in names if n != COMPLETION_RECORD]
    # Every file the package will show through one guarded child process, before any is rendered.
    outputs = Path(outputs_dir)
    shown = [p for n in files for p in find_delivered(n, outputs)[1]]
    admission.admit_many([(p, None) for p in shown], outputs.parent)
    # The completion record is short; the files share the rest of the budget.
    record_share = min(4000, lim.max_total_chars // 10) if COMPLETION_RECORD in names else 0
    share = (lim.max_total_chars - record_share) // max(len(files), 1)
    out = []
    for n in names:
        d = render_deliverable(n, Path(outputs_dir), lim, record_share if n == COMPLETION_RECORD else share)
        d.requirements = dict((requirements or {}).get(n, {}))
        if d.requirements.get("required_sections") and d.present:
            d.features["sections_found"] = sections_found(d.text, d.requirements["required_sections"])
        out.append(d)
    return RenderedPackage(out)


def sections_found(text: str, sections: Iterable[str]) -> int:
    """How many of the named sections appear as a heading or a line of their own."""
    lines = [re.sub(r"^[#\s\d.)-]+", "", ln).strip().lower() for ln in text.splitlines()]
    found = 0
    for s in sections:
        key = s.strip().lower()
        if any(ln.startswith(key) for ln in lines if ln):
            found += 1
    return found
