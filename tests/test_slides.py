"""A delivered deck's slides as PDF, where people look at them: the viewer (live and exported) and the grading site.

The expected pages come from the deck itself, read with python-pptx (one
page per slide, each carrying its slide's title), never from the code that
renders them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from pptx import Presentation
from pypdf import PdfReader
from view_support import copy_study, deck_study

from pilot.grading import store
from pilot.grading.plan import create_wave
from pilot.grading.site import create_app as grading_app
from pilot.judges import deck_pdf
from pilot.judges.deck_pdf import DeckRenderError, SlidesCache
from pilot.view.app import create_app as view_app
from pilot.view.export import export_site
from pilot.view.study import StudyReader

DECK = "support_review.pptx"


def _same_slides(pdf_bytes: bytes, deck: Path, tmp_path: Path) -> None:
    pdf = tmp_path / "got.pdf"
    pdf.write_bytes(pdf_bytes)
    pages = PdfReader(str(pdf)).pages
    slides = list(Presentation(str(deck)).slides)
    assert len(pages) == len(slides) >= 3
    for page, slide in zip(pages, slides, strict=True):
        title = slide.shapes.title.text if slide.shapes.title is not None else ""
        assert " ".join(title.split()) in " ".join(page.extract_text().split())


def _a_deck_run(folder: Path) -> tuple[str, Path]:
    reader = StudyReader(folder)
    for row in reader.index_rows():
        final = reader.run(row["run_id"])["final"]
        if final is not None and (final["files"].outputs / DECK).is_file():
            return row["run_id"], final["files"].outputs / DECK
    raise AssertionError("the deck study has no delivered deck")


def test_the_cache_renders_a_deck_once_and_names_the_delivered_file_when_it_cannot(tmp_path, monkeypatch):
    _, deck = _a_deck_run(deck_study())
    cache = SlidesCache(tmp_path / "cache")
    calls = []
    real = deck_pdf.render_deck_pdf
    monkeypatch.setattr(deck_pdf, "render_deck_pdf", lambda *a, **k: calls.append(a) or real(*a, **k))
    first = cache.pdf(deck)
    assert cache.pdf(deck) == first and len(calls) == 1  # the second request is served from the cache
    _same_slides(first.read_bytes(), deck, tmp_path)
    broken = tmp_path / "broken" / DECK
    broken.parent.mkdir()
    broken.write_bytes(b"PK\x03\x04 not a deck")
    with pytest.raises(DeckRenderError) as err:
        cache.pdf(broken)
    assert str(err.value).startswith(f"{broken}: not rendered")  # the delivered file, not the cache's copy
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [first.name]  # nothing half-written left behind


def test_the_viewer_offers_the_slides_of_a_delivered_deck_and_only_of_a_deck(tmp_path):
    folder = deck_study()
    run_id, deck = _a_deck_run(folder)
    app = view_app(folder)
    client = app.test_client()
    page = client.get(f"/runs/{run_id}").get_data(as_text=True)
    links = re.findall(r'href="(/slides/[^"]+)"', page)
    assert links == [f"/slides/{run_id}/attempt-1/{DECK}"], links
    resp = client.get(links[0])
    assert resp.status_code == 200 and resp.headers["Content-Type"] == "application/pdf"
    assert (
        resp.headers["Content-Disposition"].startswith("attachment;")
        and "support_review.slides.pdf" in resp.headers["Content-Disposition"]
    )
    _same_slides(resp.data, deck, tmp_path)
    for bad in (
        f"/slides/{run_id}/attempt-1/sla_workbook.xlsx",
        f"/slides/{run_id}/attempt-1/nope.pptx",
        f"/slides/{run_id}/attempt-9/{DECK}",
        f"/slides/{run_id}/attempt-1/..%2F..%2Fx.pptx",
    ):
        assert client.get(bad).status_code == 404, bad


def test_a_deck_the_viewer_cannot_render_gets_a_page_that_says_why(tmp_path):
    folder = copy_study(deck_study(), tmp_path / "copy")
    run_id, deck = _a_deck_run(folder)
    deck.write_bytes(b"not a zip archive at all")
    resp = view_app(folder).test_client().get(f"/slides/{run_id}/attempt-1/{DECK}")
    assert resp.status_code == 422
    assert "not rendered" in resp.get_data(as_text=True) and DECK in resp.get_data(as_text=True)


def test_the_static_site_holds_the_slides_its_page_links(tmp_path):
    folder = copy_study(deck_study(), tmp_path / "copy")
    run_id, deck = _a_deck_run(folder)
    other_id = next(r["run_id"] for r in StudyReader(folder).index_rows() if r["run_id"] != run_id)
    other = StudyReader(folder).run(other_id)["final"]["files"].outputs / DECK
    other.write_bytes(b"not a zip archive at all")  # one deck that cannot be rendered: its page says so
    site = tmp_path / "site"
    export_site(folder, site, workers=1)
    page = (site / "runs" / f"{run_id}.html").read_text(encoding="utf-8")
    linked = re.findall(r'href="\.\./(slides/[^"]+)"', page)
    assert linked == [f"slides/{run_id}/attempt-1/support_review.slides.pdf"], linked
    _same_slides((site / linked[0]).read_bytes(), deck, tmp_path)
    broken_page = (site / "runs" / f"{other_id}.html").read_text(encoding="utf-8")
    assert "slides not rendered" in broken_page and 'href="../slides/' not in broken_page
    assert not (site / "slides" / other_id).exists()


GRADERS = """name,contact,occupations
Dee Dale,dee@example.org,customer-support analytics
Eve Eng,eve@example.org,customer-support analytics
Fay Fox,fay@example.org,customer-support analytics
"""


def test_a_grader_downloads_the_slides_of_the_deck_in_their_package_and_the_download_is_recorded(tmp_path):
    folder = copy_study(deck_study(), tmp_path / "copy")
    graders = tmp_path / "graders.csv"
    graders.write_text(GRADERS, encoding="utf-8")
    made = create_wave(folder, "experts-deck", graders, per_package=2)
    app = grading_app(folder, "experts-deck")
    try:
        client = app.test_client()
        assert client.get(f"/signin/{made.grader_tokens['G01']}").status_code == 303
        with store.open_store(folder) as st:
            rows = [
                dict(r)
                for r in st.conn.execute(
                    "SELECT a.assignment_id, p.run_id, a.grader_id FROM grading_assignments a JOIN grading_packages p "
                    "USING (wave, package_id) WHERE a.wave = 'experts-deck'"
                )
            ]
        mine = next(r for r in rows if r["grader_id"] == "G01")
        my_runs = {r["run_id"] for r in rows if r["grader_id"] == "G01"}
        theirs = next(r for r in rows if r["run_id"] not in my_runs)  # a package G01 does not grade
        page = client.get(f"/grade/{mine['assignment_id']}").get_data(as_text=True)
        href = f"/grade/{mine['assignment_id']}/slides/{DECK}"
        assert f'href="{href}"' in page and page.count("/slides/") == 1  # the deck's slides; the workbook has none
        resp = client.get(href)
        assert resp.status_code == 200 and resp.headers["Content-Type"] == "application/pdf"
        deck = StudyReader(folder).run(mine["run_id"])["final"]["files"].outputs / DECK
        _same_slides(resp.data, deck, tmp_path)
        assert run_id_free(resp.data, mine["run_id"])
        assert client.get(f"/grade/{mine['assignment_id']}/slides/sla_workbook.xlsx").status_code == 404
        assert client.get(f"/grade/{theirs['assignment_id']}/slides/{DECK}").status_code == 404
        with store.open_store(folder) as st:
            opened = [
                json.loads(r[0])
                for r in st.conn.execute(
                    "SELECT detail_json FROM grading_events WHERE kind = 'open_file' AND assignment_id = ?",
                    (mine["assignment_id"],),
                )
            ]
        assert {"file": DECK, "as": "slides"} in opened
    finally:
        app.extensions["pilot.grading"].close()


def run_id_free(pdf_bytes: bytes, run_id: str) -> bool:
    """The rendered slides carry no run id (nothing in them unblinds the package)."""
    return run_id.encode() not in pdf_bytes
