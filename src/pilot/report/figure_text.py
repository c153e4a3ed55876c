"""How large a figure's text prints: the smallest font in each figure PDF, scaled to the width the manuscript includes
it at.

A figure drawn 7.85 inches wide and included at 0.8 of a 6.8-inch text width
prints its 7-point ticks at 4.8 points. The figure environments the stages
write (``generated/*_figure.tex``) say each figure's inclusion width; the PDF
says its own width and, in its content stream, every font size it sets
(matplotlib writes ``/F1 7.5 Tf`` after a translation, or a rotation, whose
scale is read from the ``cm`` matrix before it).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

#: The manuscript's text width in points: US letter (612 pt) less two margins of 2.2 cm (manuscript/main.tex).
TEXT_WIDTH_PT = 612 - 2 * 2.2 / 2.54 * 72
#: The smallest text a printed figure may carry.
MIN_PRINTED_PT = 7.0

_INCLUDE = re.compile(r"\\includegraphics\[width=([0-9.]*)\\(?:line|text)width\]\{([^}]+)\}")


@dataclass(frozen=True)
class FigureText:
    """One included figure: where it is, how wide it prints, and its smallest text before and after scaling."""

    env: Path
    pdf: Path
    width_fraction: float
    figure_width_pt: float
    smallest_pt: float

    @property
    def printed_pt(self) -> float:
        return self.smallest_pt * self.width_fraction * TEXT_WIDTH_PT / self.figure_width_pt


def smallest_font_pt(pdf: Path) -> tuple[float, float]:
    """The PDF's first page width and the smallest font size its content stream sets (scaled by the current ``cm``)."""
    from pypdf import PdfReader
    from pypdf.generic import ContentStream

    reader = PdfReader(str(pdf))
    page = reader.pages[0]
    scale, smallest = 1.0, math.inf
    for operands, op in ContentStream(page.get_contents(), reader).operations:
        if op == b"cm":
            a, b, c, d = (float(x) for x in operands[:4])
            scale = math.sqrt(abs(a * d - b * c)) or 1.0
        elif op == b"Tf":
            smallest = min(smallest, float(operands[1]) * scale)
    return float(page.mediabox.width), smallest


def included_figures(tex_files: list[Path], figure_dirs: list[Path]) -> list[FigureText]:
    """Every figure the given LaTeX files include, found as LaTeX finds it (the path itself, then each of
    ``figure_dirs``)."""
    out = []
    for tex in tex_files:
        for frac, rel in _INCLUDE.findall(Path(tex).read_text(encoding="utf-8")):
            candidates = [Path(rel), *(Path(d) / rel for d in figure_dirs)]
            pdf = next((c.resolve() for c in candidates if c.is_file()), None)
            if pdf is None:
                continue  # a figure the build does not have (its \IfFileExists leaves it out)
            width, smallest = smallest_font_pt(pdf)
            out.append(FigureText(Path(tex), pdf, float(frac) if frac else 1.0, width, smallest))
    return out


def too_small(figures: list[FigureText], minimum: float = MIN_PRINTED_PT) -> list[str]:
    """One line per figure whose smallest text prints below ``minimum`` points."""
    return [
        f"{f.pdf.name} (included by {f.env.name} at {f.width_fraction:g} of the text width): its smallest text, "
        f"{f.smallest_pt:g} pt, prints at {f.printed_pt:.1f} pt"
        for f in figures
        if f.printed_pt < minimum - 1e-6
    ]
