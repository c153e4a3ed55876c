#!/usr/bin/env python3
"""Self-check of the deliverables in this workspace.

Run it from the workspace folder:

    python selfcheck.py

It checks presence and well-formedness only, the way the final check does:
every file the brief asks for exists in outputs/ and is not empty, office
files are valid archives, a workbook that must contain formulas does, no
workbook shows error values after recalculation or takes values from
another workbook, documents reach their minimum length (words counted per
paragraph) and have the required headings, and
outputs/completion_record.json is valid (plain file names of files in
outputs/, every substitute declared). It knows nothing about the right
answers: a pass does not mean the work is correct. Exit status 0 when every
check passes, 1 otherwise.

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
# LibreOffice settings for the recalculation: recalculate on load always (a cached value may be
# stale), never run a macro, never follow a link: no linked image or object is loaded from a
# document outside a trusted location (there is none), and links are never updated (Calc: 1 is
# never; Writer: 2 is never). The final check uses the same profile.
RECALC_PROFILE_XCU = """<?xml version="1.0" encoding="UTF-8"?>
<oor:items xmlns:oor="http://openoffice.org/2001/registry" xmlns:xs="http://www.w3.org/2001/XMLSchema" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
<item oor:path="/org.openoffice.Office.Calc/Formula/Load">\
<prop oor:name="OOXMLRecalcMode" oor:op="fuse"><value>0</value></prop></item>
<item oor:path="/org.openoffice.Office.Calc/Formula/Load">\
<prop oor:name="ODFRecalcMode" oor:op="fuse"><value>0</value></prop></item>
<item oor:path="/org.openoffice.Office.Common/Security/Scripting">\
<prop oor:name="MacroSecurityLevel" oor:op="fuse"><value>3</value></prop></item>
<item oor:path="/org.openoffice.Office.Common/Security/Scripting">\
<prop oor:name="DisableMacrosExecution" oor:op="fuse"><value>true</value></prop></item>
<item oor:path="/org.openoffice.Office.Common/Security/Scripting">\
<prop oor:name="BlockUntrustedRefererLinks" oor:op="fuse"><value>true</value></prop></item>
<item oor:path="/org.openoffice.Office.Calc/Content/Update">\
<prop oor:name="Link" oor:op="fuse"><value>1</value></prop></item>
<item oor:path="/org.openoffice.Office.Writer/Content/Update">\
<prop oor:name="Link" oor:op="fuse"><value>2</value></prop></item>
</oor:items>
"""

WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'\u2019.,%$-]*")
TEXT_SUBSTITUTES = {"xlsx": (".csv",), "docx": (".md", ".txt"), "pdf": (".md", ".txt")}
NUMBERING = re.compile(r"^\s*(?:#+\s*)?(?:[*_]+)?\s*(?:(?:\d+(?:\.\d+)*|[A-Z]|[ivxIVX]+)[.)]\s+)?")


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
    user = tmp / "profile" / "user"
    user.mkdir(parents=True, exist_ok=True)
    (user / "registrymodifications.xcu").write_text(RECALC_PROFILE_XCU, encoding="utf-8")
    profile = (tmp / "profile").resolve().as_uri()
    try:
        subprocess.run(
            [
                soffice,
                f"-env:UserInstallation={profile}",
                "--headless",
                "--norestore",
                "--convert-to",
                "xlsx",
                "--outdir",
                str(tmp / "out"),
                str(path),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=120,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None
    out = tmp / "out" / path.name
    return out if out.is_file() else None


def external_links(zf: zipfile.ZipFile) -> list[str]:
    return sorted(n for n in zf.namelist() if n.lower().startswith("xl/externallinks/") and n.lower().endswith(".xml"))


def check_workbook(path: Path, d: dict, rep: Report) -> None:
    zf, problem = open_archive(path, "xlsx")
    if problem:
        rep.fail(f"{d['name']} {problem}")
        return
    rep.ok(f"{d['name']} is a valid workbook archive")
    try:
        cells = list(sheet_cells(zf))
    except ET.ParseError as exc:
        rep.fail(f"{d['name']}: a worksheet is not valid XML ({exc})")
        return
    formulas = [c for c in cells if c[2]]
    if d.get("requires_formulas"):
        need = int(d.get("min_formulas") or 1)
        if len(formulas) < need:
            found = "contains no formulas" if not formulas else f"contains only {len(formulas)} formula cells"
            rep.fail(
                f"{d['name']} {found}; the brief asks for a working workbook with formulas (at least {need} required)"
            )
            return
        rep.ok(f"{d['name']} contains {len(formulas)} formula cells")
    links = external_links(zf)
    if links:
        rep.fail(
            f"{d['name']} links to other workbooks ({', '.join(links[:3])}): values taken from them are cached copies "
            "that cannot be recalculated"
        )
        return
    # Cached values may be stale: recalculate whenever LibreOffice is here, as the final check always does.
    with tempfile.TemporaryDirectory() as tmp:
        copy = recalculated_copy(path, Path(tmp)) if formulas else None
        if copy is not None:
            cells = list(sheet_cells(zipfile.ZipFile(copy)))
            rep.ok(f"{d['name']} recalculated with LibreOffice for the error check")
        elif formulas and any(c[4] is None for c in formulas):
            rep.warn(
                f"{d['name']}: formulas have no cached values and LibreOffice is not available to recalculate; error "
                "values not checked"
            )
            return
        elif formulas:
            rep.warn(
                f"{d['name']}: LibreOffice is not available; error values checked on the cached values, which may be "
                "stale"
            )
    errors = [f"{Path(c[0]).stem}!{c[1]} = {c[4]}" for c in cells if c[3] == "e"]
    if errors:
        rep.fail(f"{d['name']} shows error values: {'; '.join(errors[:5])}")
    else:
        rep.ok(f"{d['name']} shows no error values")


def docx_paragraphs(zf: zipfile.ZipFile) -> list[str]:
    """Each paragraph's text as Word shows it: its runs joined without spaces (a word split over runs is one word)."""
    out = []
    with zf.open("word/document.xml") as fh:
        for _, el in ET.iterparse(fh):
            if el.tag != NS_WORD + "p":
                continue
            parts = []
            for child in el:
                runs = (
                    [child]
                    if child.tag == NS_WORD + "r"
                    else (list(child) if child.tag == NS_WORD + "hyperlink" else [])
                )
                for r in runs:
                    if r.tag != NS_WORD + "r":
                        continue
                    for t in r:
                        if t.tag == NS_WORD + "t":
                            parts.append(t.text or "")
                        elif t.tag in (NS_WORD + "tab", NS_WORD + "br", NS_WORD + "cr"):
                            parts.append(" ")
            out.append("".join(parts))
    return out


def document_lines(path: Path, kind: str) -> tuple[list[str] | None, str | None]:
    """The lines of a document (paragraphs of a docx, text lines of a PDF), or the problem; (None, None) when pypdf is
    absent."""
    if kind == "docx":
        zf, problem = open_archive(path, "docx")
        if problem:
            return None, problem
        try:
            return docx_paragraphs(zf), None
        except ET.ParseError as exc:
            return None, f"has a damaged document part ({exc})"
    with open(path, "rb") as fh:
        if b"%PDF-" not in fh.read(1024):
            return None, "is not a PDF"
    try:
        from pypdf import PdfReader
    except ImportError:
        return None, None
    try:
        reader = PdfReader(str(path), strict=False)
        if reader.is_encrypted:
            return None, "is an encrypted PDF"
        lines = []
        for p in reader.pages[:200]:
            lines.extend((p.extract_text() or "").splitlines())
    except Exception as exc:  # noqa: BLE001
        return None, f"cannot be read as a PDF ({exc})"
    return lines, None


def heading_matches(line: str, section: str) -> bool:
    text = NUMBERING.sub("", line).strip().strip("*_:").strip().lower()
    sec = section.lower()
    return (text.startswith(sec) and len(text) <= len(sec) + 60) or (text.endswith(sec) and len(text) <= len(sec) + 30)


def document_words(path: Path, kind: str) -> tuple[int | None, str | None]:
    lines, problem = document_lines(path, kind)
    if problem:
        return None, problem
    if lines is None:
        return -1, None
    return sum(len(WORD.findall(line)) for line in lines), None


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
    sections = d.get("required_sections") or []
    if sections:
        lines, _ = document_lines(path, d["kind"])
        missing = [sec for sec in sections if not any(heading_matches(line, sec) for line in lines or [])]
        if missing:
            rep.fail(f"{d['name']} lacks the required section(s): {', '.join(missing)}")
        else:
            rep.ok(f"{d['name']} has every required section")


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


def find_substitutes(outputs: Path, d: dict) -> list[str]:
    exts = TEXT_SUBSTITUTES.get(d["kind"], ())
    stem = Path(d["name"]).stem
    return sorted(
        p.name
        for p in outputs.iterdir()
        if p.name != d["name"] and p.suffix.lower() in exts and (p.stem == stem or p.name.startswith(stem + "."))
    )


def check_record(path: Path, outputs: Path, rep: Report, spec: dict | None = None) -> None:
    """The completion record as the final check reads it: its schema, then what it says against outputs/."""
    try:
        record = json.loads(path.read_bytes().decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        rep.fail(f"completion_record.json is not valid JSON ({exc})")
        return
    problems = []
    if not isinstance(record, dict):
        rep.fail("completion_record.json must be a JSON object")
        return
    for key in ("status", "deliverables", "substitutions", "questions"):
        if key not in record:
            problems.append(f"lacks the field '{key}'")
    extra = set(record) - {"status", "deliverables", "substitutions", "questions", "notes"}
    if extra:
        problems.append(f"has unknown field(s) {', '.join(sorted(extra))}")
    if "status" in record and record["status"] not in STATUSES:
        problems.append(f"status must be one of {', '.join(STATUSES)}")
    names = record.get("deliverables", [])
    if not isinstance(names, list) or not all(isinstance(x, str) and x for x in names):
        problems.append("deliverables must be a list of file names")
        names = []
    else:
        bad = [x for x in names if "/" in x or "\\" in x]
        if bad:
            problems.append(f"deliverables must be plain file names in outputs/, not paths ({', '.join(bad[:3])})")
        if len(set(names)) != len(names):
            problems.append("deliverables lists a file twice")
    subs = record.get("substitutions", [])
    if not isinstance(subs, list) or not all(
        isinstance(s, dict)
        and set(s) == {"requested", "delivered", "reason"}
        and all(isinstance(v, str) and v for v in s.values())
        for s in subs
    ):
        problems.append("substitutions must be a list of {requested, delivered, reason}, each a non-empty string")
        subs = []
    questions = record.get("questions", [])
    if not isinstance(questions, list) or not all(isinstance(q, str) and q for q in questions):
        problems.append("questions must be a list of non-empty strings")
    if "notes" in record and not isinstance(record["notes"], str):
        problems.append("notes must be a string")
    if problems:
        rep.fail("completion_record.json " + "; ".join(problems))
        return
    for name in names:
        if name != "completion_record.json" and not (outputs / name).is_file():
            problems.append(f"lists {name}, which is not in outputs/")
    declared = {s["delivered"] for s in subs}
    for s in subs:
        if "/" in s["delivered"] or "\\" in s["delivered"]:
            problems.append(f"declares the substitute {s['delivered']}, a path rather than a file name in outputs/")
        elif not (outputs / s["delivered"]).is_file():
            problems.append(f"declares the substitute {s['delivered']}, which is not in outputs/")
    for d in (spec or {}).get("deliverables", []):
        if d["kind"] == "completion_record" or (outputs / d["name"]).exists():
            continue
        found = find_substitutes(outputs, d)
        undeclared = [n for n in found if n not in declared]
        if undeclared:
            problems.append(f"does not declare the substitution of {', '.join(undeclared)} for {d['name']}")
        if not found and record["status"] == "completed":
            problems.append(f"says 'completed' but {d['name']} was not delivered")
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
            check_record(path, outputs, rep, spec)
    return rep


def load_spec(arg: str | None) -> dict:
    if arg:
        return json.loads(Path(arg).read_text(encoding="utf-8"))
    if SPEC_JSON is None:
        raise SystemExit("selfcheck: no specification embedded; pass --spec FILE")
    return json.loads(SPEC_JSON)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Check that the deliverables exist and are well formed.")
    parser.add_argument(
        "workspace", nargs="?", default=None, help="workspace folder (default: the folder of this program)"
    )
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
