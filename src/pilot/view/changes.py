"""What a run changed in its inputs (E = 1): each changed file's digests and what differs in it.

Expected digests are the ones the harness took when it laid the workspace
out (``input_hashes`` on the run record); actual digests are the harness's
manifest of the workspace after the run (``workspace_manifest.json`` beside
it, outside the worker's reach), the same walk the input-hash check makes
(:func:`pilot.oracles.hashing.hash_inputs`). The original bytes are the
scenario bundle's own input, used only when its digest is the expected one.

What differs is shown for people: a line diff for text (``difflib``), the
changed cells of a CSV file, of a workbook (``openpyxl``, formulas and
values) and of a Word document's paragraphs and table cells
(``python-docx``). The worker's copy is never opened where it lies: one
bounded read (:func:`take_copy`, through :mod:`pilot.worker_files`: a regular
file, no link followed, at most :data:`MAX_BYTES`) copies it to a private folder, and an office file is
parsed only after the oracle's screening and its guarded parse in a child
process under time and memory limits (:mod:`pilot.oracles.safety`,
:func:`pilot.oracles.guard.probe_cached`) have passed.
"""

from __future__ import annotations

import csv
import difflib
import hashlib
import io
import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pilot import worker_files

#: The most of one changed input the viewer reads.
MAX_BYTES = 16 * 1024 * 1024
#: Diff lines and changed cells shown at most per file.
MAX_LINES = 400
MAX_CELLS = 300
TEXT_SUFFIXES = frozenset({".csv", ".tsv", ".txt", ".md", ".json", ".xml", ".yml", ".yaml", ".html", ".htm"})
TABLE_SUFFIXES = frozenset({".csv", ".tsv"})
INPUTS = "inputs/"


@dataclass
class CellChange:
    """One cell or paragraph that differs: where, the value before and after (None: absent)."""

    where: str
    before: str | None
    after: str | None


@dataclass
class InputChange:
    """One input file the run changed, added or deleted."""

    name: str  # relative to inputs/
    change: str  # modified | added | deleted
    expected_digest: str | None
    actual_digest: str | None
    expected_size: int | None = None
    actual_size: int | None = None
    kind: str = ""  # text | table | workbook | document | binary
    diff: list[str] = field(default_factory=list)  # unified diff lines (text)
    cells: list[CellChange] = field(default_factory=list)
    note: str = ""  # why no content diff is shown, or what else to know
    cut: bool = False

    @property
    def reason(self) -> str:
        return f"input {self.change}: {INPUTS}{self.name}"


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def take_copy(workspace: Path, rel: str, dest: Path, limit: int = MAX_BYTES) -> tuple[bytes | None, str]:
    """The bytes of a file the worker may have written, read once by the bounded reader (:mod:`pilot.worker_files`:
    beneath the workspace, no link followed, a regular file of at most ``limit`` bytes).

    Returns (bytes, "") or (None, why not); the bytes are also written to ``dest``, the only copy later parsed.
    """
    try:
        with worker_files.Folder(workspace) as folder:
            data = folder.read_bytes(rel, max_bytes=limit)
    except worker_files.Refused as exc:
        return None, exc.reason
    dest.write_bytes(data)
    return data, ""


def _decode(data: bytes) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def text_diff(before: str, after: str, name: str) -> tuple[list[str], bool]:
    """A unified diff of two texts (a line added at the end, such as a lone newline, shown as a line)."""
    a, b = before.splitlines(keepends=True), after.splitlines(keepends=True)
    lines = [
        line.rstrip("\n") if line.endswith("\n") else line + "  [no newline at the end]"
        for line in difflib.unified_diff(a, b, f"expected/{name}", f"actual/{name}", n=2)
    ]
    return lines[:MAX_LINES], len(lines) > MAX_LINES


def _column_name(i: int) -> str:
    name = ""
    i += 1
    while i:
        i, r = divmod(i - 1, 26)
        name = chr(65 + r) + name
    return name


def table_cells(before: str, after: str, delimiter: str = ",") -> tuple[list[CellChange], bool]:
    """The cells of two CSV texts that differ, named by row number and header (added or removed rows included)."""
    ra = list(csv.reader(io.StringIO(before), delimiter=delimiter))
    rb = list(csv.reader(io.StringIO(after), delimiter=delimiter))
    header = ra[0] if ra else []
    out: list[CellChange] = []
    for r in range(max(len(ra), len(rb))):
        row_a = ra[r] if r < len(ra) else None
        row_b = rb[r] if r < len(rb) else None
        for c in range(max(len(row_a or []), len(row_b or []))):
            va = row_a[c] if row_a is not None and c < len(row_a) else None
            vb = row_b[c] if row_b is not None and c < len(row_b) else None
            if va != vb:
                col = header[c] if r > 0 and c < len(header) and header[c] else _column_name(c)
                out.append(CellChange(f"row {r + 1}, {col}", va, vb))
    return out[:MAX_CELLS], len(out) > MAX_CELLS


def _cell_text(value: Any) -> str | None:
    return None if value is None else str(value)


def workbook_cells(before: Path, after: Path) -> tuple[list[CellChange], bool, str]:
    """The cells of two workbooks that differ (what each cell holds: a formula as written, else its value)."""
    import openpyxl

    wa = openpyxl.load_workbook(before, data_only=False)
    wb = openpyxl.load_workbook(after, data_only=False)
    out: list[CellChange] = []
    notes = []
    names_a, names_b = wa.sheetnames, wb.sheetnames
    for name in names_a:
        if name not in names_b:
            notes.append(f"sheet {name!r} removed")
    for name in names_b:
        if name not in names_a:
            notes.append(f"sheet {name!r} added")
    for name in [n for n in names_b if n in names_a] + [n for n in names_b if n not in names_a]:
        sa = wa[name] if name in names_a else None
        sb = wb[name]
        cells_a = {(c.row, c.column): c.value for row in sa.iter_rows() for c in row} if sa is not None else {}
        cells_b = {(c.row, c.column): c.value for row in sb.iter_rows() for c in row}
        for key in sorted(set(cells_a) | set(cells_b)):
            va, vb = cells_a.get(key), cells_b.get(key)
            if va != vb:
                out.append(CellChange(f"{name}!{_column_name(key[1] - 1)}{key[0]}", _cell_text(va), _cell_text(vb)))
    return out[:MAX_CELLS], len(out) > MAX_CELLS, "; ".join(notes)


def _document_blocks(path: Path) -> list[tuple[str, str]]:
    """(where, text) of each paragraph and each table cell of a Word document, in order."""
    from docx import Document

    doc = Document(str(path))
    out: list[tuple[str, str]] = []
    p_no = t_no = 0
    for block in doc.iter_inner_content():
        if hasattr(block, "rows"):
            t_no += 1
            for r, row in enumerate(block.rows, start=1):
                for c, cell in enumerate(row.cells, start=1):
                    out.append((f"table {t_no}, row {r}, cell {c}", cell.text))
        else:
            p_no += 1
            out.append((f"paragraph {p_no}", getattr(block, "text", "")))
    return out


def document_paragraphs(before: Path, after: Path) -> tuple[list[CellChange], bool]:
    """The paragraphs and table cells of two Word documents that differ (matched by ``difflib``)."""
    a, b = _document_blocks(before), _document_blocks(after)
    out: list[CellChange] = []
    sm = difflib.SequenceMatcher(a=[t for _, t in a], b=[t for _, t in b], autojunk=False)
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        if op == "equal":
            continue
        for k in range(max(i2 - i1, j2 - j1)):
            wa = a[i1 + k] if i1 + k < i2 else None
            wb = b[j1 + k] if j1 + k < j2 else None
            either = wb or wa
            where = either[0] if either else ""
            out.append(CellChange(where, wa[1] if wa else None, wb[1] if wb else None))
    return out[:MAX_CELLS], len(out) > MAX_CELLS


def _office_ready(path: Path) -> str | None:
    """Why an office file may not be parsed here (the oracle's screening and guarded parse), or None."""
    from pilot.oracles import guard, safety

    why = safety.screen_ooxml(path)
    if why:
        return why
    return guard.probe_cached([path]).get(path)


def _content(change: InputChange, original: Path | None, copy: Path | None, data: bytes | None) -> None:
    """Fill in what differs between the bundle's original and the worker's copy."""
    suffix = Path(change.name).suffix.lower()
    if original is None or copy is None or data is None:
        return
    before_bytes = original.read_bytes()
    if suffix in TEXT_SUFFIXES or (_decode(data) is not None and _decode(before_bytes) is not None):
        before, after = _decode(before_bytes), _decode(data)
        if before is None or after is None:
            change.kind, change.note = "binary", "not UTF-8 text: only the digests are compared"
            return
        change.kind = "table" if suffix in TABLE_SUFFIXES else "text"
        change.diff, change.cut = text_diff(before, after, change.name)
        if suffix in TABLE_SUFFIXES:
            change.cells, cut = table_cells(before, after, "\t" if suffix == ".tsv" else ",")
            change.cut = change.cut or cut
        return
    if suffix in (".xlsx", ".xlsm", ".docx"):
        why = _office_ready(copy)
        if why:
            change.kind, change.note = "binary", f"the changed file is not read: {why}"
            return
        try:
            if suffix == ".docx":
                change.kind = "document"
                change.cells, change.cut = document_paragraphs(original, copy)
            else:
                change.kind = "workbook"
                change.cells, change.cut, change.note = workbook_cells(original, copy)
        except Exception as exc:  # noqa: BLE001 - a file the library refuses is reported, not raised
            change.kind, change.note = "binary", f"the changed file cannot be read: {type(exc).__name__}: {exc}"
            return
        if not change.cells and not change.note:
            what = "no cell differs" if change.kind == "workbook" else "no paragraph or table cell differs"
            how = (
                f"{len(data) - len(before_bytes)} byte(s) added at the end"
                if data.startswith(before_bytes) and len(data) > len(before_bytes)
                else "the bytes changed"
            )
            change.note = (
                f"{what}: {how} ({change.expected_size} bytes laid out, {change.actual_size} bytes after the run)"
            )
        return
    change.kind, change.note = "binary", f"no content comparison for {suffix or 'this'} files: only the digests"


def input_changes(rec: dict[str, Any], attempt_folder: Path, inputs_dir: Path | None) -> list[InputChange]:
    """Every input the run changed, added or deleted, with its digests and what differs in it.

    ``attempt_folder`` is the final attempt's folder (``workspace/`` and the
    harness's ``workspace_manifest.json``); ``inputs_dir`` the scenario
    bundle's inputs (the original bytes).
    """
    expected: dict[str, str] = {str(k): str(v) for k, v in (rec.get("input_hashes") or {}).items()}
    manifest = _read_json(Path(attempt_folder) / "workspace_manifest.json")
    actual = {k[len(INPUTS) :]: str(v) for k, v in manifest.items() if k.startswith(INPUTS)}
    if not expected or not manifest:
        return []
    out: list[InputChange] = []
    with tempfile.TemporaryDirectory(prefix="pilot-view-changes-") as tmp:
        for name in sorted(set(expected) | set(actual)):
            exp, act = expected.get(name), actual.get(name)
            if exp == act:
                continue
            change = InputChange(
                name,
                "deleted" if act is None else "added" if exp is None else "modified",
                exp,
                act,
            )
            out.append(change)
            original = None
            if exp is not None and inputs_dir is not None:
                cand = Path(inputs_dir) / name
                if cand.is_file() and not cand.is_symlink():
                    if hashlib.sha256(cand.read_bytes()).hexdigest() == exp:
                        original = cand
                        change.expected_size = cand.stat().st_size
                    else:
                        change.note = "the scenario bundle's copy is not the one laid out (its digest differs)"
            if act is None or ":" in act or act.startswith("<") or act.startswith("too-"):
                if act is not None:
                    change.kind, change.note = "binary", "not a regular file: only the manifest's entry is shown"
                continue
            dest = Path(tmp) / f"{len(out)}{Path(name).suffix}"
            data, why = take_copy(Path(attempt_folder) / "workspace", f"inputs/{name}", dest)
            if data is None:
                change.note = f"the file after the run {why}"
                continue
            change.actual_size = len(data)
            if hashlib.sha256(data).hexdigest() != act:
                change.note = "the file now differs from the one the harness checked after the run; not compared"
                continue
            if change.change == "added":
                text = _decode(data)
                if text is not None:
                    change.kind = "text"
                    change.diff, change.cut = text_diff("", text, name)
                else:
                    change.kind, change.note = "binary", f"an added file of {len(data)} bytes"
                continue
            _content(change, original, dest, data)
    return out
