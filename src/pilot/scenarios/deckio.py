"""Byte-stable slide decks (.pptx) from the same blocks as the documents of :mod:`pilot.scenarios.officeio`.

A deck is a list of blocks: each :class:`~pilot.scenarios.officeio.Heading`
opens a slide whose title it is, each :class:`~pilot.scenarios.officeio.Para`
is a line of that slide's text, each :class:`~pilot.scenarios.officeio.Table`
a table on it. Blocks before the first heading go on a title slide (the first
line its title). python-pptx stamps the time into ``docProps/core.xml`` and
the zip entries; both are pinned (:func:`pilot.scenarios.officeio.normalize_zip`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pilot.scenarios.officeio import Block, Heading, Para, Table, cell_text, normalize_zip, pin_core_properties


def _slides(blocks: Sequence[Block]) -> list[tuple[str, list[Block]]]:
    slides: list[tuple[str, list[Block]]] = []
    for b in blocks:
        if isinstance(b, Heading):
            slides.append((b.text, []))
        elif not slides:
            slides.append(((b.text if isinstance(b, Para) else ""), [] if isinstance(b, Para) else [b]))
        else:
            slides[-1][1].append(b)
    return slides


def write_deck(blocks: Sequence[Block], path: Path) -> Path:
    """Render blocks to a slide deck (one slide per heading) with pinned metadata."""
    from pptx import Presentation
    from pptx.util import Emu, Inches, Pt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    prs = Presentation()
    prs.slide_width, prs.slide_height = Inches(13.333), Inches(7.5)
    pin_core_properties(prs.core_properties)
    layout = prs.slide_layouts[5]  # title only: the body is laid out below
    for title, body in _slides(blocks):
        slide = prs.slides.add_slide(layout)
        slide.shapes.title.text = title
        top = Inches(1.5)
        paras = [b for b in body if isinstance(b, Para)]
        if paras:
            height = Inches(0.45) * len(paras)
            box = slide.shapes.add_textbox(Inches(0.6), top, Inches(12.1), height)
            tf = box.text_frame
            tf.word_wrap = True
            for i, p in enumerate(paras):
                para = tf.paragraphs[0] if i == 0 else tf.add_paragraph()
                para.text = p.text
                para.font.size = Pt(16)
            top = Emu(top + height + Inches(0.2))
        for t in (b for b in body if isinstance(b, Table)):
            n = len(t.rows) + 1
            shape = slide.shapes.add_table(n, len(t.header), Inches(0.6), top, Inches(12.1), Inches(0.35) * n)
            for j, h in enumerate(t.header):
                shape.table.cell(0, j).text = str(h)
            for i, row in enumerate(t.rows, start=1):
                for j, v in enumerate(row):
                    shape.table.cell(i, j).text = cell_text(v)
            for row in shape.table.rows:
                for cell in row.cells:
                    for para in cell.text_frame.paragraphs:
                        para.font.size = Pt(12)
            top = Emu(top + Inches(0.35) * n + Inches(0.2))
    prs.save(str(path))
    return normalize_zip(path)
