"""LibreOffice renders a delivered slide deck: CX-01's gold deck, page by page, against the deck's own slides."""

from __future__ import annotations

import pytest
from pptx import Presentation
from pypdf import PdfReader

from pilot import paths
from pilot.judges.deck_pdf import DeckRenderError, render_deck_pdf
from pilot.scenarios.library import cx_01

pytestmark = pytest.mark.usefixtures("soffice")


@pytest.fixture(scope="module")
def gold(tmp_path_factory):
    out = tmp_path_factory.mktemp("cx01-gold")
    cx_01.solve(paths.SCENARIOS_DIR / "CX-01" / "inputs", out)
    return out / "support_review.pptx"


def test_the_gold_deck_renders_one_page_per_slide_with_its_titles(gold, tmp_path):
    pdf = render_deck_pdf(gold, tmp_path / "pdf")
    # What the deck holds, read with python-pptx directly (not through the project's reader).
    titles = [s.shapes.title.text for s in Presentation(str(gold)).slides if s.shapes.title is not None]
    pages = PdfReader(str(pdf)).pages
    assert len(pages) == len(Presentation(str(gold)).slides) >= 3
    for page, title in zip(pages, titles, strict=True):
        assert " ".join(title.split()) in " ".join(page.extract_text().split())


def test_a_deck_that_is_not_a_deck_is_refused_by_name(tmp_path):
    fake = tmp_path / "support_review.pptx"
    fake.write_bytes(b"not a zip archive at all")
    with pytest.raises(DeckRenderError, match="support_review.pptx: not rendered"):
        render_deck_pdf(fake, tmp_path / "pdf")
    assert not (tmp_path / "pdf" / "support_review.pdf").exists()
