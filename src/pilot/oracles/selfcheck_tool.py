#!/usr/bin/env python3
"""Self-check of the deliverables in this workspace.

Run it from the workspace folder:

    python selfcheck.py

It checks presence and well-formedness only: every file the brief asks for
exists in outputs/ and is not empty, office files are valid archives, a
workbook that must contain formulas does and shows no error values,
documents reach their minimum length, and outputs/completion_record.json is
valid. It knows nothing about the right answers: a pass does not mean the
work is correct. Exit status 0 when every check passes, 1 otherwise.

This program is self-contained (Python standard library; pypdf is used for
PDF text when it is installed, LibreOffice to recalculate a workbook that
has no cached values when it is on the PATH).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from xml.etree import ElementTree as ET

# The deliverables of this assignment, as stated in the brief.
# --- BEGIN SPEC ---
SPEC_JSON = None
# --- END SPEC ---

MAX_BYTES = 50 * 1024 * 1024
MAX_UNCOMPRESSED = 64 * 1024 * 1024
STATUSES = ("completed", "partial", "abandoned")
MAIN_PART = {"xlsx": "xl/workbook.xml", "docx": "word/document.xml"}
NS_MAIN = "{http://schemas.openxmlformats.org/spreadsheetml/2006/main}"
NS_WORD = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'.,%$-]*")


class Report:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.failures = 0

    def ok(self, msg: str) -> None:
        self.lines.append(f"PASS  {msg}")

    def fail(self, msg: str) -> None:
        self.failures += 1
        self.lines.append(f"FAIL  {msg}")

    def warn(self, msg: str) -> None:
        self.lines.append(f"WARN  {msg}")


def screen(path: Path, workspace: Path) -> str | None:
    if not path.exists() and not path.is_symlink():
        return "missing"
    real = Path(os.path.realpath(path))
    if not real.is_relative_to(workspace.resolve()):
        return "is a link pointing outside the workspace"
    if not real.is_file():
        return "is not a regular file"
    size = real.stat().st_size
    if size == 0:
        return "is empty"
    if size > MAX_BYTES:
        return f"is {size // (1024 * 1024)} MB, too large for a deliverable"
    return None


def open_archive(path: Path, kind: str) -> tuple[zipfile.ZipFile | None, str | None]:
    with open(path, "rb") as fh:
        head = fh.read(8)
    if head.startswith(b"\xd0\xcf\x11\xe0"):
        return None, "is an encrypted or legacy (OLE) Office file, not an Office Open XML archive"
    if not head.startswith(b"PK\x03\x04"):
        return None, f"is not a valid .{kind} archive (not a zip file)"
    try:
        zf = zipfile.ZipFile(path)
        names = zf.namelist()
    except (zipfile.BadZipFile, OSError) as exc:
        return None, f"is a corrupt or truncated archive ({exc})"
    if sum(i.file_size for i in zf.infolist()) > MAX_UNCOMPRESSED:
        return None, "expands to more than 64 MB"
    if any(i.flag_bits & 1 for i in zf.infolist()):
        return None, "has encrypted entries"
    if "[Content_Types].xml" not in names or MAIN_PART[kind] not in names:
        return None, f"is not a valid .{kind} file (missing {MAIN_PART[kind]})"
    if any(n.lower().endswith("vbaproject.bin") for n in names):
        return None, "contains macros (vbaProject.bin)"
    try:
        bad = zf.testzip()
    except Exception as exc:  # noqa: BLE001
        return None, f"cannot be read ({exc})"
    if bad:
        return None, f"is damaged (entry {bad})"
    return zf, None


def sheet_cells(zf: zipfile.ZipFile):
    """(sheet part, cell ref, has formula, type, cached value) for every stored cell."""
    for name in sorted(n for n in zf.namelist() if re.match(r"xl/worksheets/sheet\d+\.xml$", n)):
        with zf.open(name) as fh:
            for _, el in ET.iterparse(fh):
                if el.tag == NS_MAIN + "c":
                    f = el.find(NS_MAIN + "f")
                    v = el.find(NS_MAIN + "v")
                    yield name, el.get("r"), f is not None, el.get("t"), (v.text if v is not None else None)
                    el.clear()


def recalculated_copy(path: Path, tmp: Path) -> Path | None:
    soffice = shutil.which("soffice") or shutil.which("libreoffice")
    if not soffice:
        return None
    profile = (tmp / "profile").resolve().as_uri()
    try:
        subprocess.run(
            [soffice, f"-env:UserInstallation={profile}", "--headless", "--norestore", "--convert-to", "xlsx", "--outdir", str(tmp / "out"), str(path)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120, check=False,
        )
    except subprocess.TimeoutExpired:
        return None
    out = tmp / "out" / path.name
    return out if out.is_file() else None


def check_workbook(path: Path, d: dict, rep: Report) -> None:
    zf, problem = open_archive(path, "xlsx")
    if problem:
        rep.fail(f"{d['name']} {problem}")
        return
    rep.ok(f"{d['name']} is a valid workbook archive")
    if not d.get("requires_formulas"):
        return
    try:
        cells = list(sheet_cells(zf))
    except ET.ParseError as exc:
        rep.fail(f"{d['name']}: a worksheet is not valid XML ({exc})")
        return
    formulas = [c for c in cells if c[2]]
    if not formulas:
        rep.fail(f"{d['name']} contains no formulas; the brief asks for a working workbook with formulas")
        return
    rep.ok(f"{d['name']} contains {len(formulas)} formula cells")
    if any(c[4] is None for c in formulas):
        with tempfile.TemporaryDirectory() as tmp:
            copy = recalculated_copy(path, Path(tmp))
            if copy is None:
                rep.warn(f"{d['name']}: formulas have no cached values and LibreOffice is not available to recalculate; error values not checked")
                return
            cells = list(sheet_cells(zipfile.ZipFile(copy)))
            rep.ok(f"{d['name']} recalculated with LibreOffice for the error check")
    errors = [f"{Path(c[0]).stem}!{c[1]} = {c[4]}" for c in cells if c[3] == "e"]
    if errors:
        rep.fail(f"{d['name']} shows error values: {'; '.join(errors[:5])}")
    else:
        rep.ok(f"{d['name']} shows no error values")


def document_words(path: Path, kind: str) -> tuple[int | None, str | None]:
    if kind == "docx":
        zf, problem = open_archive(path, "docx")
        if problem:
            return None, problem
        try:
            with zf.open("word/document.xml") as fh:
                texts = [el.text or "" for _, el in ET.iterparse(fh) if el.tag == NS_WORD + "t"]
        except ET.ParseError as exc:
            return None, f"has a damaged document part ({exc})"
        return len(WORD.findall(" ".join(texts))), None
    with open(path, "rb") as fh:
        if b"%PDF-" not in fh.read(1024):
            return None, "is not a PDF"
    try:
        from pypdf import PdfReader
    except ImportError:
        return -1, None
    try:
        reader = PdfReader(str(path), strict=False)
        if reader.is_encrypted:
            return None, "is an encrypted PDF"
        text = " ".join((p.extract_text() or "") for p in reader.pages[:200])
    except Exception as exc:  # noqa: BLE001
        return None, f"cannot be read as a PDF ({exc})"
    return len(WORD.findall(text)), None


def check_document(path: Path, d: dict, rep: Report) -> None:
    words, problem = document_words(path, d["kind"])
    if problem:
        rep.fail(f"{d['name']} {problem}")
        return
    if words == -1:
        rep.warn(f"{d['name']}: pypdf is not installed, length not checked")
        return
    need = d.get("min_words") or 1
    if words < need:
        rep.fail(f"{d['name']} has {words} words; at least {need} are required")
    else:
        rep.ok(f"{d['name']} is a valid document of {words} words (at least {need})")


def check_csv(path: Path, d: dict, rep: Report) -> None:
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        rep.fail(f"{d['name']} is not valid UTF-8 (offset {exc.start})")
        return
    try:
        rows = [r for r in csv.reader(io.StringIO(text)) if any(c.strip() for c in r)]
    except csv.Error as exc:
        rep.fail(f"{d['name']} is not valid CSV ({exc})")
        return
    if len(rows) < 2:
        rep.fail(f"{d['name']} needs a header row and at least one data row")
        return
    width = len(rows[0])
    ragged = [i + 1 for i, r in enumerate(rows) if len(r) != width]
    if ragged:
        rep.fail(f"{d['name']}: row {ragged[0]} has a different number of fields than the header")
        return
    header = [h.strip().lower() for h in rows[0]]
    missing = [c for c in d.get("required_columns", []) if c.lower() not in header]
    if missing:
        rep.fail(f"{d['name']} lacks the column(s) {', '.join(missing)}")
        return
    rep.ok(f"{d['name']} is a valid CSV with {len(rows) - 1} rows")


def check_record(path: Path, outputs: Path, rep: Report) -> None:
    try:
        record = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        rep.fail(f"completion_record.json is not valid JSON ({exc})")
        return
    problems = []
    if not isinstance(record, dict):
        problems.append("must be a JSON object")
    else:
        for key in ("status", "deliverables", "substitutions", "questions"):
            if key not in record:
                problems.append(f"lacks the field '{key}'")
        extra = set(record) - {"status", "deliverables", "substitutions", "questions", "notes"}
        if extra:
            problems.append(f"has unknown field(s) {', '.join(sorted(extra))}")
        if "status" in record and record["status"] not in STATUSES:
            problems.append(f"status must be one of {', '.join(STATUSES)}")
        if not isinstance(record.get("deliverables", []), list) or not all(isinstance(x, str) and x for x in record.get("deliverables", [])):
            problems.append("deliverables must be a list of file names")
        else:
            for name in record.get("deliverables", []):
                if not (outputs / name).is_file():
                    problems.append(f"lists {name}, which is not in outputs/")
        subs = record.get("substitutions", [])
        if not isinstance(subs, list) or not all(isinstance(s, dict) and {"requested", "delivered", "reason"} <= set(s) for s in subs):
            problems.append("substitutions must be a list of {requested, delivered, reason}")
        if not isinstance(record.get("questions", []), list) or not all(isinstance(q, str) for q in record.get("questions", [])):
            problems.append("questions must be a list of strings")
        if "notes" in record and not isinstance(record["notes"], str):
            problems.append("notes must be a string")
    if problems:
        rep.fail("completion_record.json " + "; ".join(problems))
    else:
        rep.ok("completion_record.json is valid")


def run(workspace: Path, spec: dict) -> Report:
    rep = Report()
    outputs = workspace / "outputs"
    if not outputs.is_dir():
        rep.fail("there is no outputs/ folder")
        return rep
    for d in spec["deliverables"]:
        path = outputs / d["name"]
        problem = screen(path, workspace)
        if problem:
            rep.fail(f"{d['name']} {problem}")
            continue
        kind = d["kind"]
        if kind == "xlsx":
            check_workbook(path, d, rep)
        elif kind in ("docx", "pdf"):
            check_document(path, d, rep)
        elif kind == "csv":
            check_csv(path, d, rep)
        elif kind == "completion_record":
            check_record(path, outputs, rep)
    return rep


def load_spec(arg: str | None) -> dict:
    if arg:
        return json.loads(Path(arg).read_text(encoding="utf-8"))
    if SPEC_JSON is None:
        raise SystemExit("selfcheck: no specification embedded; pass --spec FILE")
    return json.loads(SPEC_JSON)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Check that the deliverables exist and are well formed.")
    parser.add_argument("workspace", nargs="?", default=None, help="workspace folder (default: the folder of this program)")
    parser.add_argument("--spec", help="JSON file describing the deliverables (default: embedded)")
    args = parser.parse_args(argv)
    workspace = Path(args.workspace or Path(__file__).resolve().parent).resolve()
    spec = load_spec(args.spec)
    rep = run(workspace, spec)
    print(f"Self-check of {workspace.name} ({spec.get('scenario', 'assignment')})")
    for line in rep.lines:
        print(line)
    if rep.failures:
        print(f"SELF-CHECK FAILED: {rep.failures} problem(s)")
        return 1
    print("SELF-CHECK PASSED (presence and format only; correctness is not checked)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
