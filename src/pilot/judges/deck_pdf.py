"""A delivered slide deck rendered to PDF by LibreOffice Impress, page by page as a reader would see it.

The judges read a deck's text (:mod:`pilot.judges.render`, python-pptx); a
person who grades or reviews it looks at the slides. This renders an admitted
deck (screened and probed by :func:`pilot.oracle_formats.pptx_reader.read_deck`
first, so a hostile archive never reaches LibreOffice) with ``soffice
--convert-to pdf`` in its own profile, process group and time limit, as the
workbook recalculation runs it.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import tempfile
from pathlib import Path

from pilot.oracle_formats.pptx_reader import read_deck
from pilot.oracles.recalc import soffice_binary

RENDER_TIMEOUT_S = 120.0


class DeckRenderError(RuntimeError):
    """A deck that could not be rendered; the message names the file and the reason (both kept apart too)."""

    def __init__(self, deck: Path, reason: str) -> None:
        super().__init__(f"{deck}: not rendered: {reason}")
        self.deck, self.reason = Path(deck), reason


def render_deck_pdf(
    deck: Path, out_dir: Path, *, workspace: Path | None = None, timeout_s: float = RENDER_TIMEOUT_S
) -> Path:
    """Render ``deck`` to ``out_dir/<stem>.pdf`` with LibreOffice Impress; returns the PDF's path.

    ``workspace`` is the folder the deck must lie in (its own folder by default). Raises
    :class:`DeckRenderError` naming the file when the deck is refused, LibreOffice is missing
    or fails, or the conversion outlives ``timeout_s``.
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
    with tempfile.TemporaryDirectory(prefix="deck-pdf-") as tmp:
        profile = Path(tmp) / "profile"
        cmd = [
            soffice,
            f"-env:UserInstallation={profile.resolve().as_uri()}",
            "--headless",
            "--norestore",
            "--nolockcheck",
            "--nodefault",
            "--nologo",
            "--convert-to",
            "pdf:impress_pdf_Export",
            "--outdir",
            str(out_dir),
            str(deck),
        ]
        env = dict(os.environ, HOME=tmp, SAL_USE_VCLPLUGIN="svp")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # soffice leaves helpers behind; the whole group goes
            proc.communicate()
            raise DeckRenderError(deck, f"LibreOffice did not finish within {timeout_s:.0f} s") from None
    pdf = out_dir / f"{deck.stem}.pdf"
    if proc.returncode != 0 or not pdf.is_file():
        raise DeckRenderError(
            deck, f"LibreOffice failed ({out.decode('utf-8', 'replace').strip()[-300:] or proc.returncode})"
        )
    return pdf


class SlidesCache:
    """Decks rendered to PDF once each, kept in ``folder`` by the SHA-256 of the bytes that were rendered.

    The viewer and the grading site offer a delivered deck's slides beside the
    deck itself. A deck is copied before it is hashed and rendered, so the
    PDF is always of the bytes its name records; a deck that cannot be
    rendered raises :class:`DeckRenderError` naming the delivered file.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)

    def pdf(self, deck: Path, *, timeout_s: float = RENDER_TIMEOUT_S) -> Path:
        """The PDF of ``deck``'s slides (rendered on first request)."""
        deck = Path(deck)
        try:
            data = deck.read_bytes()
        except OSError as exc:
            raise DeckRenderError(deck, str(exc.strerror or exc)) from None
        target = self.folder / f"{hashlib.sha256(data).hexdigest()}.pdf"
        if target.is_file():
            return target
        with tempfile.TemporaryDirectory(prefix="slides-", dir=self.folder) as tmp:
            copy = Path(tmp) / "deck" / deck.name
            copy.parent.mkdir()
            copy.write_bytes(data)
            try:
                pdf = render_deck_pdf(copy, Path(tmp) / "pdf", timeout_s=timeout_s)
            except DeckRenderError as exc:
                raise DeckRenderError(deck, exc.reason) from None  # the delivered file, not the copy
            os.replace(pdf, target)  # atomic: a reader sees no PDF or the whole one
        return target


def slides_name(deck_name: str) -> str:
    """The file name a deck's slides are offered under (``support_review.pptx`` -> ``support_review.slides.pdf``)."""
    return f"{Path(deck_name).stem}.slides.pdf"


def is_deck(name: str) -> bool:
    return Path(name).suffix.lower() == ".pptx"
