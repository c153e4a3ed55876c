"""The portal's content folder: the deterministic generator and its reader.

``generate_portal(scenario_dir)`` turns a scenario's ``inputs/`` into the
folder ``<scenario>/portal/`` that a portal instance serves:

- every CSV input becomes a *record set* (a table the portal shows as a page
  and in JSON) with three downloads: the CSV itself (byte-identical to the
  input), an xlsx workbook and a PDF listing;
- every other input (PDF, docx, xlsx, text) becomes a *document* in the
  library, copied byte for byte.

The portal therefore mirrors records that the brief's inputs already hold in
another form, so an arm without the portal can still finish the brief (see
``protocol/interpretations.md``). The same inputs always give the same bytes:
workbook and PDF metadata carry fixed dates and the manifest is sorted.
"""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import io
import json
import re
import shutil
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import yaml

from pilot import paths

MANIFEST_NAME = "manifest.json"
FORMAT_VERSION = 1
GENERATOR = "pilot.portal.content"
RECORD_FORMATS = ("csv", "xlsx", "pdf")
# Fixed timestamp for workbook properties and archive members, so reruns are byte-identical.
_FIXED_TIME = dt.datetime(2026, 1, 1, 0, 0, 0)

_DOCUMENT_KINDS = {
    ".pdf": "PDF document",
    ".docx": "Word document",
    ".doc": "Word document",
    ".xlsx": "Excel workbook",
    ".xls": "Excel workbook",
    ".pptx": "Presentation",
    ".txt": "Text",
    ".md": "Text",
    ".json": "Data (JSON)",
    ".eml": "E-mail",
    ".png": "Image",
    ".jpg": "Image",
}
# Keyword in the file name -> what a professional would call the record set.
_RECORD_KINDS = (
    ("bank", "Bank statement"),
    ("statement", "Client statement"),
    ("invoice", "Vendor invoice"),
    ("polic", "Policy"),
    ("rate", "Rate table"),
    ("tariff", "Rate table"),
    ("ledger", "Ledger"),
    ("journal", "Ledger"),
    ("trial_balance", "Ledger"),
    ("transaction", "Transactions"),
    ("payment", "Payments"),
    ("vendor", "Vendor records"),
    ("supplier", "Vendor records"),
    ("client", "Client records"),
    ("customer", "Client records"),
)


class PortalContentError(ValueError):
    """Bad portal input or content, naming the file, the field and the reason."""

    def __init__(self, path: Path | str, field: str, reason: str):
        self.path, self.field, self.reason = Path(path), field, reason
        super().__init__(f"{path}: {field}: {reason}")


@dataclass(frozen=True)
class PortalDocument:
    name: str  # the input's path relative to inputs/, POSIX spelling; also its URL name
    title: str
    kind: str
    path: str  # relative to the content folder
    size: int
    sha256: str

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class PortalRecordSet:
    id: str
    title: str
    kind: str
    source: str  # the input file it mirrors, relative to inputs/
    delimiter: str
    columns: list[str]
    n_rows: int
    downloads: dict[str, str]  # format -> path relative to the content folder

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass
class PortalContent:
    """A loaded content folder; every path in it is checked to stay inside ``root``."""

    root: Path
    scenario: str
    company: str
    documents: dict[str, PortalDocument]
    records: dict[str, PortalRecordSet]
    _rows: dict[str, list[list[str]]] = field(default_factory=dict, repr=False)

    def file(self, relpath: str) -> Path:
        return _inside(self.root, relpath, self.root / MANIFEST_NAME, "path")

    def rows(self, record_id: str) -> list[list[str]]:
        if record_id not in self._rows:
            rec = self.records[record_id]
            header, rows = _read_csv(self.file(rec.downloads["csv"]), rec.delimiter)
            self._rows[record_id] = rows
        return self._rows[record_id]


# ---------------------------------------------------------------- generation


def _title(stem: str) -> str:
    # Underscores and word hyphens become spaces; a date's hyphens (2026-10) stay.
    words = re.sub(r"\s+", " ", re.sub(r"_|(?<!\d)-|-(?!\d)", " ", stem)).strip()
    return words[:1].upper() + words[1:] if words else stem


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "records"


def _record_kind(name: str) -> str:
    lowered = name.lower()
    return next((kind for key, kind in _RECORD_KINDS if key in lowered), "Records")


def _sniff_delimiter(sample: str) -> str:
    try:
        return csv.Sniffer().sniff(sample, delimiters=",;\t|").delimiter
    except csv.Error:
        return ","


def _read_csv(path: Path, delimiter: str | None = None) -> tuple[list[str], list[list[str]]]:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise PortalContentError(path, "encoding", f"not UTF-8 text ({exc.reason})") from exc
    delimiter = delimiter or _sniff_delimiter(text[:4096])
    rows = [row for row in csv.reader(io.StringIO(text, newline=""), delimiter=delimiter) if row]
    if not rows or not any(cell.strip() for cell in rows[0]):
        raise PortalContentError(path, "header", "no header row")
    header, body = rows[0], rows[1:]
    for lineno, row in enumerate(body, start=2):
        if len(row) != len(header):
            raise PortalContentError(path, f"row {lineno}", f"has {len(row)} fields, the header has {len(header)}")
    return header, body


_INT = re.compile(r"-?(0|[1-9]\d*)")
_FLOAT = re.compile(r"-?\d+\.\d+")


def _cell_value(text: str) -> str | int | float | None:
    # Numbers become numbers so a workbook sums; codes with leading zeros stay text.
    s = text.strip()
    if not s:
        return None
    if _INT.fullmatch(s) and len(s) < 16:
        return int(s)
    if _FLOAT.fullmatch(s):
        return float(s)
    return text


def _normalise_zip(path: Path) -> None:
    """Rewrite an archive with fixed member times so the bytes depend on content only."""
    with zipfile.ZipFile(path) as src:
        members = [(info.filename, src.read(info.filename)) for info in src.infolist()]
    # openpyxl stamps the save time into the core properties whatever was set.
    stamp = _FIXED_TIME.strftime("%Y-%m-%dT%H:%M:%SZ").encode()
    members = [
        (name, re.sub(rb"(<dcterms:modified[^>]*>)[^<]*(</dcterms:modified>)", rb"\g<1>" + stamp + rb"\g<2>", data))
        if name == "docProps/core.xml"
        else (name, data)
        for name, data in members
    ]
    with zipfile.ZipFile(path, "w") as dst:
        for name, data in members:
            info = zipfile.ZipInfo(name, date_time=_FIXED_TIME.timetuple()[:6])
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            dst.writestr(info, data)


def _write_xlsx(path: Path, title: str, header: list[str], rows: list[list[str]]) -> None:
    from openpyxl import Workbook
    from openpyxl.styles import Font
    from openpyxl.utils import get_column_letter

    wb = Workbook()
    ws = wb.active
    ws.title = re.sub(r"[\[\]:*?/\\]", " ", title)[:31] or "Records"
    ws.append(header)
    for cell in ws[1]:
        cell.font = Font(bold=True)
    for row in rows:
        ws.append([_cell_value(v) for v in row])
    ws.freeze_panes = "A2"
    for idx, name in enumerate(header, start=1):
        width = max([len(name)] + [len(r[idx - 1]) for r in rows[:200]])
        ws.column_dimensions[get_column_letter(idx)].width = min(max(width + 2, 8), 60)
    wb.properties.creator = "Company intranet"
    wb.properties.title = title
    wb.properties.created = _FIXED_TIME
    wb.properties.modified = _FIXED_TIME
    wb.save(path)
    _normalise_zip(path)


def _write_pdf(path: Path, title: str, source: str, header: list[str], rows: list[list[str]]) -> None:
    from reportlab.lib import colors
    from reportlab.lib.pagesizes import A4, landscape
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.lib.units import mm
    from reportlab.platypus import LongTable, Paragraph, SimpleDocTemplate, Spacer, TableStyle

    styles = getSampleStyleSheet()
    cell_style = styles["BodyText"].clone("cell", fontSize=7, leading=8.5)
    head_style = cell_style.clone("head", fontName="Helvetica-Bold")
    pagesize = landscape(A4) if len(header) > 5 else A4
    doc = SimpleDocTemplate(
        str(path),
        pagesize=pagesize,
        leftMargin=12 * mm,
        rightMargin=12 * mm,
        topMargin=12 * mm,
        bottomMargin=12 * mm,
        title=title,
        author="Company intranet",
        creator="Company intranet",
        invariant=1,  # fixed creation date and document id: same input, same bytes
    )

    def para(text: str, style) -> Paragraph:
        return Paragraph(text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;"), style)

    data = [[para(h, head_style) for h in header]] + [[para(v, cell_style) for v in r] for r in rows]
    table = LongTable(data, repeatRows=1, colWidths=[doc.width / len(header)] * len(header))
    table.setStyle(
        TableStyle(
            [
                ("GRID", (0, 0), (-1, -1), 0.25, colors.grey),
                ("BACKGROUND", (0, 0), (-1, 0), colors.HexColor("#e8e8e8")),
                ("VALIGN", (0, 0), (-1, -1), "TOP"),
            ]
        )
    )
    story = [
        Paragraph(para(title, styles["Title"]).text, styles["Title"]),
        Paragraph(f"{len(rows)} rows. Export of the record set {para(source, cell_style).text}.", styles["Normal"]),
        Spacer(1, 4 * mm),
        table,
    ]
    doc.build(story)


def _scenario_meta(scenario_dir: Path) -> dict:
    spec = scenario_dir / "scenario.yml"
    if not spec.is_file():
        return {}
    try:
        data = yaml.safe_load(spec.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise PortalContentError(spec, "(file)", f"not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise PortalContentError(spec, "(file)", "not a mapping")
    return data


def _input_files(inputs_dir: Path) -> list[Path]:
    return sorted(
        (
            p
            for p in inputs_dir.rglob("*")
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(inputs_dir).parts)
        ),
        key=lambda p: p.relative_to(inputs_dir).as_posix(),
    )


def _build(scenario_dir: Path, out: Path) -> dict:
    inputs_dir = scenario_dir / "inputs"
    if not inputs_dir.is_dir():
        raise PortalContentError(inputs_dir, "inputs", "folder missing: the portal mirrors a scenario's inputs")
    meta = _scenario_meta(scenario_dir)
    scenario_id = str(meta.get("id") or scenario_dir.name)
    company = str(meta.get("company") or meta.get("organisation") or "Company")
    documents: list[dict] = []
    records: list[dict] = []
    used_ids: set[str] = set()
    for src in _input_files(inputs_dir):
        rel = src.relative_to(inputs_dir).as_posix()
        if src.suffix.lower() == ".csv":
            header, rows = _read_csv(src)
            delimiter = _sniff_delimiter(src.read_text(encoding="utf-8-sig")[:4096])
            rid = base = _slug(PurePosixPath(rel).with_suffix("").as_posix())
            n = 2
            while rid in used_ids:
                rid, n = f"{base}-{n}", n + 1
            used_ids.add(rid)
            title = _title(src.stem)
            folder = out / "records"
            folder.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, folder / f"{rid}.csv")
            _write_xlsx(folder / f"{rid}.xlsx", title, header, rows)
            _write_pdf(folder / f"{rid}.pdf", title, rel, header, rows)
            records.append(
                PortalRecordSet(
                    id=rid,
                    title=title,
                    kind=_record_kind(rel),
                    source=rel,
                    delimiter=delimiter,
                    columns=header,
                    n_rows=len(rows),
                    downloads={fmt: f"records/{rid}.{fmt}" for fmt in RECORD_FORMATS},
                ).to_json()
            )
        else:
            dest = out / "documents" / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dest)
            data = dest.read_bytes()
            documents.append(
                PortalDocument(
                    name=rel,
                    title=_title(src.stem),
                    kind=_DOCUMENT_KINDS.get(src.suffix.lower(), "File"),
                    path=f"documents/{rel}",
                    size=len(data),
                    sha256=hashlib.sha256(data).hexdigest(),
                ).to_json()
            )
    return {
        "format_version": FORMAT_VERSION,
        "generator": GENERATOR,
        "scenario": scenario_id,
        "company": company,
        "mirrors": "inputs/",
        "documents": documents,
        "records": records,
    }


def generate_portal(scenario_dir: Path, out_dir: Path | None = None) -> Path:
    """Write the portal content of the scenario at ``scenario_dir``; return its folder.

    ``out_dir`` defaults to ``<scenario_dir>/portal``. The folder is rebuilt
    whole (written beside it, then swapped in), so no stale file survives.
    """
    scenario_dir = Path(scenario_dir)
    require_portal_scenario(scenario_dir)
    out_dir = Path(out_dir) if out_dir is not None else scenario_dir / "portal"
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".portal-", dir=out_dir.parent))
    try:
        manifest = _build(scenario_dir, staging)
        (staging / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        if out_dir.exists():
            shutil.rmtree(out_dir)
        staging.rename(out_dir)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return out_dir


def require_portal_scenario(scenario_dir: Path) -> None:
    """PortalContentError unless ``scenario.yml`` says ``uses_portal: true``: no portal for a scenario without one."""
    spec = Path(scenario_dir) / "scenario.yml"
    if not spec.is_file():
        raise PortalContentError(
            spec,
            "(file)",
            "missing; a portal is generated only for a scenario whose scenario.yml says uses_portal: true",
        )
    value = _scenario_meta(Path(scenario_dir)).get("uses_portal")
    if value is not True:
        raise PortalContentError(
            spec, "uses_portal", f"is {value!r}, not true; this scenario has no portal, so none is generated"
        )


def portal_scenarios(scenarios_dir: Path | None = None) -> list[str]:
    """IDs of the scenarios whose ``scenario.yml`` says ``uses_portal: true``."""
    root = Path(scenarios_dir or paths.SCENARIOS_DIR)
    if not root.is_dir():
        return []
    return sorted(d.name for d in root.iterdir() if d.is_dir() and _scenario_meta(d).get("uses_portal") is True)


def _tree_bytes(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def check_portal(scenario_dir: Path) -> list[str]:
    """Differences between the committed ``portal/`` and a fresh generation (empty: current)."""
    scenario_dir = Path(scenario_dir)
    require_portal_scenario(scenario_dir)
    committed = scenario_dir / "portal"
    if not committed.is_dir():
        return [f"{committed}: missing (run `pilot portal generate {scenario_dir.name}`)"]
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate_portal(scenario_dir, Path(tmp) / "portal")
        want, have = _tree_bytes(fresh), _tree_bytes(committed)
    problems = [f"{committed / n}: missing" for n in sorted(want.keys() - have.keys())]
    problems += [f"{committed / n}: not made by the generator" for n in sorted(have.keys() - want.keys())]
    problems += [
        f"{committed / n}: differs from the generator's output"
        for n in sorted(want.keys() & have.keys())
        if want[n] != have[n]
    ]
    return problems


# ---------------------------------------------------------------- reading


def _inside(root: Path, relpath: str, source: Path, fieldname: str) -> Path:
    """``root/relpath`` if it names a file inside ``root``; otherwise a PortalContentError."""
    if not isinstance(relpath, str) or not relpath or relpath.startswith(("/", "\\")) or "\\" in relpath:
        raise PortalContentError(source, fieldname, f"{relpath!r} is not a relative POSIX path")
    if any(part in ("..", "") for part in relpath.split("/")):
        raise PortalContentError(source, fieldname, f"{relpath!r} leaves the content folder")
    root = root.resolve()
    target = (root / relpath).resolve()
    if not target.is_relative_to(root):
        raise PortalContentError(source, fieldname, f"{relpath!r} resolves outside the content folder")
    if not target.is_file():
        raise PortalContentError(source, fieldname, f"{relpath!r}: no such file in the content folder")
    return target


def load_portal_content(portal_dir: Path) -> PortalContent:
    """Read and check a content folder; every listed file must exist inside it."""
    root = Path(portal_dir)
    manifest_path = root / MANIFEST_NAME
    if not root.is_dir():
        raise PortalContentError(root, "(folder)", "content folder missing (run `pilot portal generate`)")
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise PortalContentError(manifest_path, "(file)", f"cannot read: {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise PortalContentError(manifest_path, "(file)", f"not valid JSON: {exc}") from exc
    if not isinstance(manifest, dict):
        raise PortalContentError(manifest_path, "(file)", "not a JSON object")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise PortalContentError(
            manifest_path, "format_version", f"expected {FORMAT_VERSION}, found {manifest.get('format_version')!r}"
        )
    for key in ("scenario", "company"):
        if not isinstance(manifest.get(key), str):
            raise PortalContentError(manifest_path, key, "missing or not a string")
    documents: dict[str, PortalDocument] = {}
    for i, entry in enumerate(manifest.get("documents") or []):
        where = f"documents[{i}]"
        try:
            doc = PortalDocument(**entry)
        except TypeError as exc:
            raise PortalContentError(manifest_path, where, f"bad entry: {exc}") from exc
        _inside(root, doc.path, manifest_path, f"{where}.path")
        if doc.name in documents:
            raise PortalContentError(manifest_path, f"{where}.name", f"duplicate name {doc.name!r}")
        documents[doc.name] = doc
    records: dict[str, PortalRecordSet] = {}
    for i, entry in enumerate(manifest.get("records") or []):
        where = f"records[{i}]"
        try:
            rec = PortalRecordSet(**entry)
        except TypeError as exc:
            raise PortalContentError(manifest_path, where, f"bad entry: {exc}") from exc
        if set(rec.downloads) != set(RECORD_FORMATS):
            raise PortalContentError(manifest_path, f"{where}.downloads", f"expected formats {list(RECORD_FORMATS)}")
        for fmt, rel in rec.downloads.items():
            _inside(root, rel, manifest_path, f"{where}.downloads.{fmt}")
        if not re.fullmatch(r"[a-z0-9][a-z0-9\-]*", rec.id) or rec.id in records:
            raise PortalContentError(manifest_path, f"{where}.id", f"bad or duplicate id {rec.id!r}")
        records[rec.id] = rec
    return PortalContent(
        root=root.resolve(),
        scenario=manifest["scenario"],
        company=manifest["company"],
        documents=documents,
        records=records,
    )
