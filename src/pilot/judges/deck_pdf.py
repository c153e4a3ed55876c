"""A delivered slide deck rendered to PDF by LibreOffice Impress, page by page as a reader would see it.

The judges read a deck's text (:mod:`pilot.judges.render`, python-pptx); a
person who grades or reviews it looks at the slides. This renders an admitted
deck (screened and probed by :func:`pilot.oracle_formats.pptx_reader.read_deck`
first, so a hostile archive never reaches LibreOffice) with ``soffice
--convert-to pdf``, as the workbook recalculation runs it: from a copy of the
deck made inert (no linked image, media or object reaches a file or a host:
:mod:`pilot.office_links`), by a LibreOffice confined with a private profile,
no network, a read-only view of that copy alone and a time limit
(:mod:`pilot.office_convert`, :mod:`pilot.confined`). What was made inert is
recorded beside the PDF (:data:`LINKS_SUFFIX`).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from pilot import confined, office_convert
from pilot.office_links import Refused
from pilot.oracle_formats.pptx_reader import read_deck
from pilot.oracles.recalc import soffice_binary
from pilot.oracles.safety import MAX_FILE_BYTES, MAX_PDF_BYTES
from pilot.oracles.selfcheck_tool import RECALC_PROFILE_XCU

RENDER_TIMEOUT_S = 120.0
#: The record of the links made inert before a deck was rendered, beside its PDF (only when there were any).
LINKS_SUFFIX = ".links.json"
#: The largest PDF taken back from LibreOffice.
MAX_RENDERED_BYTES = 4 * MAX_PDF_BYTES


class DeckRenderError(RuntimeError):
    """A deck that could not be rendered; the message names the file and the reason (both kept apart too)."""

    def __init__(self, deck: Path, reason: str) -> None:
        super().__init__(f"{deck}: not rendered: {reason}")
        self.deck, self.reason = Path(deck), reason


def links_record(pdf: Path) -> Path:
    """Where the links made inert before ``pdf`` was rendered are recorded (``x.pdf`` -> ``x.links.json``)."""
    return Path(pdf).with_suffix(LINKS_SUFFIX)


def render_deck_pdf(
    deck: Path, out_dir: Path, *, workspace: Path | None = None, timeout_s: float = RENDER_TIMEOUT_S
) -> Path:
    """Render ``deck`` to ``out_dir/<stem>.pdf`` with LibreOffice Impress; returns the PDF's path.

    ``workspace`` is the folder the deck must lie in (its own folder by default). Raises
    :class:`DeckRenderError` naming the file when the deck is refused, LibreOffice is missing,
    cannot be confined on this host, fails, or outlives ``timeout_s``. When links were made
    inert, ``out_dir/<stem>.links.json`` lists them (part, what, target).
    """
    deck = Path(deck)
    parsed, reason = read_deck(deck, Path(workspace) if workspace else deck.parent)
    if parsed is None:
        raise DeckRenderError(deck, reason)
    soffice = soffice_binary()
    if not soffice:
        raise DeckRenderError(deck, "LibreOffice (soffice) is not installed")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    pdf = out_dir / f"{deck.stem}.pdf"
    with tempfile.TemporaryDirectory(prefix="deck-pdf-") as tmp:
        indir, produced = Path(tmp) / "in", Path(tmp) / "out"
        indir.mkdir(mode=0o755)
        produced.mkdir()
        copy = indir / deck.name
        try:
            neutralised = office_convert.stage(deck, copy, MAX_FILE_BYTES)
        except (OSError, Refused) as exc:
            raise DeckRenderError(deck, f"refused before rendering: {exc}") from None
        try:
            done = office_convert.convert(
                [copy],
                produced,
                target="pdf:impress_pdf_Export",
                soffice=soffice,
                settings_xcu=RECALC_PROFILE_XCU,
                scratch=Path(tmp) / "scratch",
                limits=confined.Limits(wall_s=timeout_s),
            )
        except confined.ConfinementUnavailable as exc:
            raise DeckRenderError(deck, str(exc)) from None
        if done.timed_out:
            raise DeckRenderError(deck, f"LibreOffice did not finish within {timeout_s:.0f} s")
        try:
            if done.returncode != 0:
                raise OSError(done.returncode, "exit status")
            office_convert.adopt(produced / f"{copy.stem}.pdf", pdf, MAX_RENDERED_BYTES)
        except OSError:
            pdf.unlink(missing_ok=True)
            raise DeckRenderError(
                deck, f"LibreOffice failed ({done.output.strip()[-300:] or done.returncode})"
            ) from None
    record = links_record(pdf)
    record.unlink(missing_ok=True)
    if neutralised:
        record.write_text(
            json.dumps(
                {
                    "deck": deck.name,
                    "confinement": done.confinement,
                    "neutralised": [n.to_dict() for n in neutralised],
                },
                indent=1,
            ),
            encoding="utf-8",
        )
    return pdf


class SlidesCache:
    """Decks rendered to PDF once each, kept in ``folder`` by the SHA-256 of the bytes that were rendered.

    The viewer and the grading site offer a delivered deck's slides beside the
    deck itself. A deck is copied (a regular file, no link followed, bounded)
    before it is hashed and rendered, so the PDF is always of the bytes its
    name records; a deck that cannot be rendered raises
    :class:`DeckRenderError` naming the delivered file. The links made inert
    before rendering, if any, are kept beside it (``<sha256>.links.json``).
    """

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)

    def pdf(self, deck: Path, *, timeout_s: float = RENDER_TIMEOUT_S) -> Path:
        """The PDF of ``deck``'s slides (rendered on first request)."""
        deck = Path(deck)
        with tempfile.TemporaryDirectory(prefix="slides-", dir=self.folder) as tmp:
            copy = Path(tmp) / "deck" / deck.name
            copy.parent.mkdir()
            try:
                # The delivered file is read once, as a regular file (no link followed), bounded.
                confined.copy_regular(deck, copy, MAX_FILE_BYTES)
            except OSError as exc:
                raise DeckRenderError(deck, str(exc.strerror or exc)) from None
            with copy.open("rb") as fh:
                target = self.folder / f"{hashlib.file_digest(fh, 'sha256').hexdigest()}.pdf"
            if target.is_file():
                return target
            try:
                pdf = render_deck_pdf(copy, Path(tmp) / "pdf", timeout_s=timeout_s)
            except DeckRenderError as exc:
                raise DeckRenderError(deck, exc.reason) from None  # the delivered file, not the copy
            if links_record(pdf).is_file():
                os.replace(links_record(pdf), links_record(target))
            os.replace(pdf, target)  # atomic: a reader sees no PDF or the whole one
        return target


def slides_name(deck_name: str) -> str:
    """The file name a deck's slides are offered under (``support_review.pptx`` -> ``support_review.slides.pdf``)."""
    return f"{Path(deck_name).stem}.slides.pdf"


def is_deck(name: str) -> bool:
    return Path(name).suffix.lower() == ".pptx"
