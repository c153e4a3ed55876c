"""``pilot view STUDY --export DIR``: the viewer's pages as a static site.

Every page is the live page rendered with relative links (``index.html``,
``scenarios.html``, ``overview.html``, ``why.html``, ``runs/<id>.html``,
``scenarios/<id>.html``), filtering and sorting run in the browser, and
each attempt's deliverables are copied beside the pages (regular files
only, never a link), with a delivered deck's slides rendered to PDF under
``slides/``, so the folder works from ``file://`` and on any static host;
a deliverable a browser would show in the tab from disk (a PDF, JSON,
text) also gets a script copy that the page saves as a download
(:func:`write_download_script`). The study itself is only read.
"""

from __future__ import annotations

import base64
import json
import multiprocessing
import os
import shutil
import tempfile
from concurrent.futures import ProcessPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

from pilot import worker_files
from pilot.judges.deck_pdf import DeckRenderError, SlidesCache, is_deck, slides_name
from pilot.view import files, site
from pilot.view.study import StudyReader, ViewError, check_run_id

MARKER = ".pilot-view-export"


@dataclass(frozen=True)
class ExportResult:
    folder: Path
    pages: int
    files: int
    bytes: int


class ExportError(ViewError):
    """The export cannot be written where asked (names the folder and the reason)."""


def _prepare(out: Path, study_folder: Path) -> None:
    out = out.resolve()
    if files.inside(out, study_folder) or files.inside(study_folder, out):
        raise ExportError(
            f"{out}: the export must not be written into the study folder {study_folder} (nor contain it)"
        )
    if out.exists():
        if not out.is_dir():
            raise ExportError(f"{out}: not a folder")
        if any(out.iterdir()) and not (out / MARKER).is_file():
            raise ExportError(f"{out}: not empty and not an earlier export (no {MARKER}); choose an empty folder")
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / MARKER).write_text(
        "written by pilot view --export; replaced by the next export to this folder\n", encoding="utf-8"
    )


def write_download_script(copy: Path, name: str) -> int:
    """Beside the export's copy of a deliverable, a script that hands its bytes to the page as a download.

    Opened from disk, a browser shows a PDF or a JSON file in the tab and
    ignores the link's ``download`` attribute; the page loads this script
    instead (``view.js``), so the file is saved under its own name. Made
    from the export's own copy (already read once); its only content is the
    name as a JSON string and the bytes in base64. Returns the bytes written.
    """
    data = copy.read_bytes()
    script = f"window.pilotFile({json.dumps(name)}, {json.dumps(base64.b64encode(data).decode('ascii'))});\n"
    dest = copy.with_name(copy.name + site.WRAPPER_SUFFIX)
    dest.write_text(script, encoding="ascii")
    return len(script)


def _write_runs(folder: Path, out: Path, rows: list[dict], simulated: bool, order: list[str]) -> tuple[int, int, int]:
    """Render the pages of ``rows`` and copy their deliverables; returns (pages, files, bytes).

    ``order``: every run id in the run table's order, for each page's previous and next run.
    """
    reader = StudyReader(folder)
    links = site.Links(static=True, depth=1)
    pages = copied = size = 0
    with tempfile.TemporaryDirectory(prefix="pilot-export-slides-") as tmp:
        slides = SlidesCache(Path(tmp))
        for row in rows:
            run_id = check_run_id(row["run_id"])
            refused: dict[tuple[int, str], str] = {}
            for a in reader.run_attempts(run_id):
                for f in files.output_files(a.outputs, reader.folder):
                    # The bytes the bounded reader read (no link followed, bounded), never a copy made by path.
                    try:
                        data = f.read_bytes()
                    except worker_files.Refused as exc:
                        refused[(a.attempt_no, f.name)] = f"not exported: {exc.reason}"
                        continue
                    target = out / "files" / run_id / f"attempt-{a.attempt_no}" / site.exported_name(f.name)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(data)
                    copied += 1
                    size += len(data)
                    if site.wrapped(f.name):
                        size += write_download_script(target, f.name)
                    if is_deck(f.name):
                        # Rendered before the page is, so the page links the slides or says why there are none.
                        try:
                            with worker_files.copies_scope():
                                pdf = slides.pdf(worker_files.write_private(data, f.name))
                            # A folder of their own: an agent's file of the same name can never be overwritten.
                            dest = out / "slides" / run_id / f"attempt-{a.attempt_no}" / slides_name(f.name)
                            dest.parent.mkdir(parents=True, exist_ok=True)
                            shutil.copyfile(pdf, dest)
                            copied += 1
                            size += dest.stat().st_size
                        except DeckRenderError as exc:
                            refused[(a.attempt_no, f.name)] = exc.reason
            html = site.render_run(
                reader, links, run_id, simulated=simulated, row=row, slides_refused=refused, order=order
            )
            (out / "runs" / f"{run_id}.html").write_text(html, encoding="utf-8")
            pages += 1
    return pages, copied, size


def export_site(folder: Path, out: Path, *, workers: int | None = None) -> ExportResult:
    """Write the static site of the study in ``folder`` to ``out``.

    Run pages are rendered by ``workers`` processes (default: the CPUs,
    at most four); rendering the deliverables dominates the time.
    """
    reader = StudyReader(folder)
    out = Path(out)
    _prepare(out, reader.folder)
    rows = reader.index_rows()
    simulated = reader.simulated(rows)
    links = site.Links(static=True)
    (out / "static").mkdir()
    for name in site.STATIC_FILES:
        shutil.copyfile(Path(__file__).parent / "static" / name, out / "static" / name)
    (out / "runs").mkdir()
    (out / "scenarios").mkdir()
    n = max(1, min(workers or min(os.cpu_count() or 1, 4), len(rows) // 8 or 1))
    chunks = [rows[i::n] for i in range(n)]
    totals = [0, 0, 0]
    with (
        ProcessPoolExecutor(max_workers=n, mp_context=multiprocessing.get_context("spawn"))
        if n > 1
        else nullcontext() as pool
    ):
        order = [str(r["run_id"]) for r in rows]
        futures = [pool.submit(_write_runs, reader.folder, out, c, simulated, order) for c in chunks] if pool else []
        (out / "index.html").write_text(
            site.render_index(reader, links, rows=rows, simulated=simulated), encoding="utf-8"
        )
        (out / "scenarios.html").write_text(
            site.render_scenarios(reader, links, rows=rows, simulated=simulated), encoding="utf-8"
        )
        (out / "overview.html").write_text(
            site.render_overview(reader, links, rows=rows, simulated=simulated), encoding="utf-8"
        )
        (out / "why.html").write_text(site.render_why(reader, links, rows=rows, simulated=simulated), encoding="utf-8")
        totals[0] += 3
        for sid in sorted({r["scenario"] for r in rows}):
            html = site.render_scenario(reader, links.at(1), sid, rows=rows, simulated=simulated)
            (out / "scenarios" / f"{sid}.html").write_text(html, encoding="utf-8")
            totals[0] += 1
        results = [f.result() for f in futures] if pool else [_write_runs(reader.folder, out, rows, simulated, order)]
    for r in results:
        totals = [a + b for a, b in zip(totals, r, strict=True)]
    return ExportResult(out, totals[0] + 1, totals[1], totals[2])
