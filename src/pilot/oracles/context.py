"""One finished workspace as the criteria see it: screened, parsed once, cached.

Every criterion asks the context for a deliverable (``status``), its
well-formedness, its workbook (formulas or recalculated values), its lines of
text or its CSV table. The context screens each file before any library
touches it (``pilot.oracles.safety``: read beneath the workspace by the
bounded reader, :mod:`pilot.worker_files`, and parsed from a private copy) and
remembers every answer, so a file is read and parsed once however many
criteria ask.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pilot import worker_files
from pilot.oracles import admission, guard, readers, safety
from pilot.oracles.admission import output_names
from pilot.oracles.recalc import Recalculator
from pilot.protocol.scenario import Deliverable, Scenario

GUARDED_KINDS = ("xlsx", "docx", "pdf")
TEXT_SUBSTITUTES = {"xlsx": (".csv",), "docx": (".md", ".txt"), "pdf": (".md", ".txt")}


def find_substitutes(outputs: Path, deliverable: Deliverable) -> list[Path]:
    """Text files delivered in place of a binary deliverable: ``name.csv``, ``name.<sheet>.csv``, ``name.md``."""
    exts = TEXT_SUBSTITUTES.get(deliverable.kind, ())
    if not exts:
        return []
    found = []
    for name in output_names(outputs):
        p = outputs / name
        if p.name == deliverable.name:
            continue
        if p.suffix.lower() in exts and (p.stem == deliverable.stem or p.name.startswith(deliverable.stem + ".")):
            found.append(p)
    return found


@dataclass(frozen=True)
class FileStatus:
    """Where a deliverable is, or why it is not usable."""

    name: str
    path: Path | None
    reason: str | None
    substitutes: tuple[Path, ...] = ()

    @property
    def ok(self) -> bool:
        return self.reason is None


class WorkspaceContext:
    """Cached, defensive access to the deliverables of one workspace."""

    def __init__(
        self, scenario: Scenario, workspace: Path, recalculator: Recalculator | None, guard_limits: dict | None = None
    ) -> None:
        self.scenario = scenario
        self.workspace = Path(workspace)
        self.outputs = self.workspace / "outputs"
        self.recalculator = recalculator
        self.guard_limits: dict[str, float] = dict(guard_limits or {})
        self._memo: dict[tuple, Any] = {}
        #: Why the evaluation itself could not run (not the deliverable's fault), in order.
        self.errors: list[str] = []
        #: What LibreOffice was not shown, by deliverable: each link made inert in its copy, and a run without
        #: its confinement (the development opt-out). Reported with the verdict; no verdict depends on it.
        self.notes: dict[str, list[str]] = {}

    def _error(self, message: str) -> None:
        if message not in self.errors:
            self.errors.append(message)

    def _cached(self, key: tuple, fn):
        if key not in self._memo:
            self._memo[key] = fn()
        return self._memo[key]

    def deliverable(self, name: str) -> Deliverable:
        return self.scenario.deliverable(name)

    # -- presence ---------------------------------------------------------
    def output_kind(self, name: str) -> str | None:
        """What ``outputs/<name>`` is (``file``, ``folder``, ``link``, ``special``), looked at beneath the workspace
        without following a link; None when nothing is there or the name leaves ``outputs/``."""

        def compute() -> str | None:
            try:
                with worker_files.Folder(self.workspace) as folder:
                    st = folder.lstat(f"outputs/{name}")
            except worker_files.Refused:
                return None
            return worker_files.kind_of_mode(st.st_mode)

        return self._cached(("kind", name), compute)

    def status(self, name: str) -> FileStatus:
        def compute() -> FileStatus:
            deliv = self.deliverable(name)
            cand = self.outputs / name
            screened = safety.screen_path(cand, self.workspace)
            if screened.ok:
                return FileStatus(name, screened.path, None)
            names = output_names(self.outputs)
            absent = name not in names
            subs = tuple(find_substitutes(self.outputs, deliv)) if absent else ()
            if subs:
                shown = ", ".join(p.name for p in subs)
                return FileStatus(
                    name,
                    None,
                    f"{name} was not delivered; the text substitute {shown} stands in its place, "
                    f"and this criterion requires the {deliv.kind} format",
                    subs,
                )
            if absent and screened.reason == f"{name} not found":
                near = [n for n in names if n.lower() == name.lower()]
                hint = f"; found {near[0]}, whose name differs in case" if near else ""
                return FileStatus(name, None, f"{name} was not delivered (no outputs/{name}){hint}")
            return FileStatus(name, None, screened.reason)

        return self._cached(("status", name), compute)

    # -- screening and the guarded parse ---------------------------------
    def screened(self, name: str) -> str | None:
        """None when the delivered file passes the format screens of its kind (no library touched it)."""

        def compute() -> str | None:
            st = self.status(name)
            if not st.ok:
                return st.reason
            return admission.screen_format(st.path, self.deliverable(name).kind)

        return self._cached(("screened", name), compute)

    def guarded(self, name: str) -> str | None:
        """None when a child process parsed the file within the time and memory limits."""

        def compute() -> str | None:
            reason = self.screened(name)
            if reason:
                return reason
            if self.deliverable(name).kind not in GUARDED_KINDS:
                return None
            path = self.status(name).path
            verdict = guard.probe_cached([path], **self.guard_limits)[path]
            return f"{name} {verdict}" if verdict else None

        return self._cached(("guarded", name), compute)

    def guard_candidates(self) -> list[Path]:
        """Delivered binary files that pass the screens: what the guard must parse first."""
        out = []
        for d in self.scenario.file_deliverables:
            if d.kind in GUARDED_KINDS and self.screened(d.name) is None:
                out.append(self.status(d.name).path)
        return out

    # -- well-formedness --------------------------------------------------
    def well_formed(self, name: str) -> str | None:
        """None when the delivered file is a valid file of its kind, else the reason."""

        def compute() -> str | None:
            st = self.status(name)
            if not st.ok:
                return st.reason
            kind = self.deliverable(name).kind
            if kind in ("xlsx", "docx", "pdf"):
                reason = self.guarded(name)
                if reason:
                    return reason
                if kind == "xlsx":
                    wb, reason = self.workbook(name, data_only=False)
                    if reason:
                        return reason
                    return None if wb.worksheets else f"{name} has no worksheets"
                lines, reason = self.lines(name)
                if reason:
                    return reason
                if any(line.strip() for line in lines):
                    return None
                return (
                    f"{name} holds no text"
                    if kind == "docx"
                    else f"{name} has no extractable text (a scanned image or blank pages)"
                )
            if kind == "csv":
                _, reason = self.csv(name)
                return reason
            if kind == "completion_record":
                _, reason = self.json(name)
                return reason
            return f"{name}: unknown deliverable kind {kind}"

        return self._cached(("well_formed", name), compute)

    # -- parsed views -----------------------------------------------------
    def workbook(self, name: str, *, data_only: bool):
        def compute():
            reason = self.guarded(name)
            if reason:
                return None, reason
            return readers.load_workbook(self.status(name).path, data_only=data_only)

        return self._cached(("wb", name, data_only), compute)

    def recalculated(self, name: str):
        """The workbook as LibreOffice recalculated it (values view), or a reason."""

        def compute():
            reason = self.well_formed(name)
            if reason:
                return None, reason
            if self.recalculator is None:
                self._error("no recalculator: workbook values cannot be checked without LibreOffice")
                return None, "no recalculator available: values cannot be trusted without recalculation"
            try:
                res = self.recalculator.recalculate([self.status(name).path])[self.status(name).path]
            except Exception as exc:  # noqa: BLE001 - LibreOffice missing or broken: the evaluation could not run
                self._error(f"LibreOffice could not recalculate ({exc})")
                return None, f"{name}: recalculation failed ({exc})"
            notes = [str(n) for n in getattr(res, "neutralised", ())]
            if getattr(res, "confinement", "") == "unisolated":
                notes.append("recalculated by LibreOffice without its confinement (development opt-out)")
            if notes:
                self.notes[name] = notes
            if res.error:
                return None, f"{name}: {res.error}"
            wb, reason = readers.load_workbook(res.path, data_only=True)
            if reason:
                return None, f"{name}: the recalculated copy cannot be read ({reason})"
            return wb, None

        return self._cached(("recalc", name), compute)

    def external_links(self, name: str) -> list[str]:
        """The external-link parts (links to other workbooks) of an admitted workbook."""

        def compute() -> list[str]:
            if self.guarded(name) is not None:
                return []
            import zipfile

            with zipfile.ZipFile(self.status(name).path) as zf:
                return sorted(
                    n for n in zf.namelist() if n.lower().startswith("xl/externallinks/") and n.lower().endswith(".xml")
                )

        return self._cached(("links", name), compute)

    def lines(self, name: str, *, layout: bool = False):
        """A document's lines; ``layout`` reads a PDF's tables as ``a | b | c`` rows (a docx's tables always are)."""
        layout = layout and self.deliverable(name).kind == "pdf"

        def compute():
            reason = self.guarded(name)
            if reason:
                return None, reason
            return readers.document_lines(self.status(name).path, layout=layout)

        return self._cached(("lines", name, layout), compute)

    def text(self, name: str):
        kind = self.deliverable(name).kind
        if kind == "csv":
            table, reason = self.csv(name)
            if reason:
                return None, reason
            header, rows = table
            return "\n".join([",".join(header)] + [",".join(r) for r in rows]), None
        lines, reason = self.lines(name)
        return ("\n".join(lines) if lines is not None else None), reason

    def csv(self, name: str):
        def compute():
            st = self.status(name)
            if not st.ok:
                return None, st.reason
            return readers.read_csv(st.path)

        return self._cached(("csv", name), compute)

    def json(self, name: str):
        def compute():
            st = self.status(name)
            if not st.ok:
                return None, st.reason
            text, reason = safety.decode_utf8(st.path)
            if reason:
                return None, reason
            try:
                return json.loads(text), None
            except json.JSONDecodeError as exc:
                return None, f"{name} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"

        return self._cached(("json", name), compute)


def cells_of(ws) -> list:
    """The cells a worksheet actually stores, in reading order.

    Iterating a sheet's declared dimension can touch billions of empty cells
    in a hostile file; the stored cells are bounded by the archive size.
    """
    store = getattr(ws, "_cells", None)
    if store is None:
        return [c for row in ws.iter_rows() for c in row]
    return [store[k] for k in sorted(store)]
