"""A grader's work is never lost and the coordinator can run a wave (Flask's test client on a copy of a study).

Sessions and the secret that survive a restart (:mod:`pilot.web_sessions`),
the page's own saves and their revisions (a second tab is refused before it
overwrites), a submission refused with a short critique, time with a
downloaded file, downloads without the metadata that names their program,
reissued and revoked links, a rotated secret, the coordinator's columns and
preview, a backup of the store while the site runs.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import sqlite3
import stat
import zipfile
from pathlib import Path

import pytest
from test_grading_site import CRITERIA, GRADERS, form_fields, hidden, text
from view_support import simulated_study

from pilot import web_sessions
from pilot.grading import downloads, links, store
from pilot.grading.plan import SECRET_FILE, SESSIONS_FILE, create_wave, grading_dir
from pilot.grading.site import COOKIE_NAME, create_app
from pilot.portal.app import SignInLimits

WAVE = "work-1"
LONG = "Ties to the ledger line by line; the memo explains the two timing items."


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    folder = shutil.copytree(simulated_study(), tmp_path_factory.mktemp("grading-work") / "viewsim", symlinks=True)
    graders = folder.parent / "graders.csv"
    graders.write_text(GRADERS, encoding="utf-8")
    made = create_wave(folder, WAVE, graders, per_package=2)
    return folder, made


@pytest.fixture
def make_app(study):
    folder, _ = study
    apps = []

    def make(**options):
        app = create_app(folder, WAVE, post_limits=SignInLimits(10**6, 60.0, 1.0), **options)
        apps.append(app)
        return app

    yield make
    for app in apps:
        app.extensions["pilot.grading"].close()


class Wave:
    def __init__(self, folder: Path, made) -> None:
        self.folder, self.made = folder, made

    def queue(self, grader_id: str) -> list[str]:
        with store.open_store(self.folder) as st:
            return [r["assignment_id"] for r in store.queue(st.conn, WAVE, grader_id)]

    def scores(self, aid: str) -> dict:
        with store.open_store(self.folder) as st:
            return store.scores(st.conn, WAVE, aid)


@pytest.fixture
def wave(study) -> Wave:
    return Wave(*study)


def login(app, wave: Wave, grader_id: str):
    client = app.test_client()
    assert client.get(f"/signin/{wave.made.grader_tokens[grader_id]}").status_code == 303
    return client


def autosave(client, aid: str, page: str, **fields):
    data = form_fields(page, action=fields.pop("action", "save"), **fields)
    data.setdefault("revision", hidden(page, "revision"))
    return client.post(f"/grade/{aid}/autosave", data=data)


# ---------------------------------------------------------------- sessions and the secret, alone


def test_the_secret_is_made_once_owner_only_and_refused_when_others_may_read_it(tmp_path):
    path = tmp_path / "wave" / "site.secret"
    first = web_sessions.load_secret(path)
    assert len(first) == web_sessions.SECRET_BYTES and web_sessions.load_secret(path) == first
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    web_sessions.rotate_secret(path)
    assert web_sessions.load_secret(path) != first and stat.S_IMODE(path.stat().st_mode) == 0o600
    os.chmod(path, 0o644)
    with pytest.raises(web_sessions.SecretError, match=r"site\.secret: the site's secret may be read by others"):
        web_sessions.load_secret(path)


def test_sessions_outlive_the_store_object_and_end_by_idle_time_lifetime_subject_or_all(tmp_path):
    now = [1000.0]
    limits = web_sessions.SessionLimits(lifetime_s=100.0, idle_s=40.0)
    first = web_sessions.SessionStore(tmp_path / "s.sqlite", limits, clock=lambda: now[0])
    sid, opened = first.open("grader", "G01")
    other, _ = first.open("grader", "G02")
    first.close_store()
    # A new process (the server restarted) finds the session by its id, with its CSRF token.
    again = web_sessions.SessionStore(tmp_path / "s.sqlite", limits, clock=lambda: now[0])
    found = again.get(sid)
    assert found is not None and (found.role, found.subject, found.csrf) == ("grader", "G01", opened.csrf)
    # Only the id's hash is kept: the file opens no session.
    raw = (tmp_path / "s.sqlite").read_bytes() + (tmp_path / "s.sqlite-wal").read_bytes()
    assert sid.encode() not in raw and opened.csrf.encode() in raw
    now[0] += 39
    assert again.get(sid) is not None  # used within the idle time ...
    now[0] += 39
    assert again.get(sid) is not None
    now[0] += 30  # ... but never past the lifetime (108 s after sign-in)
    assert again.get(sid) is None and again.get(other) is None
    a, _ = again.open("grader", "G03")
    b, _ = again.open("grader", "G03")
    c, _ = again.open("coordinator", "coordinator")
    assert again.close_subject("G03") == 2 and again.get(a) is None and again.get(c) is not None
    assert again.close_all() == 1 and again.get(c) is None
    again.close_store()


# ---------------------------------------------------------------- restart, autosave, tabs, submit


def test_a_restart_signs_no_one_out_and_the_next_save_keeps_what_was_typed(wave, make_app):
    before = make_app()
    client = login(before, wave, "G01")
    aid = wave.queue("G01")[0]
    page = text(client.get(f"/grade/{aid}"))
    cookie = client.get_cookie(COOKIE_NAME)
    assert cookie.expires is not None  # the cookie outlives the browser window
    before.extensions["pilot.grading"].close()  # the server stops

    after = make_app()  # and starts again
    resumed = after.test_client()
    resumed.set_cookie(COOKIE_NAME, cookie.value)
    resp = autosave(resumed, aid, page, **{"critique-correctness": LONG, "score-correctness": "3"})
    assert resp.status_code == 200 and resp.json["ok"] and resp.json["revision"] == 1
    assert wave.scores(aid)["correctness"] == (3, LONG)
    assert resumed.get("/queue").status_code == 200


def test_the_page_saves_on_its_revision_and_a_second_tab_is_refused_before_it_overwrites(wave, make_app):
    app = make_app()
    client = login(app, wave, "G02")
    aid = wave.queue("G02")[0]
    first = text(client.get(f"/grade/{aid}"))
    second = text(client.get(f"/grade/{aid}"))  # the same package opened in another tab
    one = autosave(client, aid, first, tab="tab-one", **{"critique-entries": "first tab's words, kept"})
    assert one.json["ok"] and one.json["revision"] == 1
    # The first tab goes on saving on the revision it was given back.
    two = autosave(client, aid, first, tab="tab-one", revision="1", **{"critique-entries": "first tab, later"})
    assert two.json["ok"] and two.json["revision"] == 2
    # The second tab still holds revision 0: refused, and nothing it sent is stored.
    stale = autosave(client, aid, second, tab="tab-two", **{"critique-entries": "second tab would overwrite"})
    assert stale.status_code == 409 and stale.json["kind"] == "stale"
    assert "saved from another tab or window" in stale.json["error"]
    assert wave.scores(aid)["entries"] == (None, "first tab, later")
    # A plain form post from the stale page is refused the same way, with what it typed still on the page.
    form = client.post(
        f"/grade/{aid}",
        data=form_fields(second, action="save", revision="0", tab="tab-two", **{"critique-entries": "typed here"}),
    )
    assert form.status_code == 409 and "typed here" in text(form) and "another tab or window" in text(form)
    # Reloaded, the second tab gets the current revision and may save.
    fresh = text(client.get(f"/grade/{aid}"))
    assert hidden(fresh, "revision") == "2" and "first tab, later" in fresh
    assert autosave(client, aid, fresh, tab="tab-two", **{"critique-entries": "now from tab two"}).json["ok"]


def test_a_submission_with_a_short_or_empty_critique_is_refused_whole(wave, make_app):
    app = make_app()
    client = login(app, wave, "G03")
    aid = wave.queue("G03")[0]
    page = text(client.get(f"/grade/{aid}"))
    full = {f"score-{c}": "3" for c in CRITERIA} | {f"critique-{c}": LONG for c in CRITERIA}
    short = full | {"critique-entries": "ok", "critique-instructions": "   "}
    resp = autosave(client, aid, page, action="submit", accept="yes", **short)
    assert resp.status_code == 400 and not resp.json["ok"]
    (error,) = resp.json["errors"]
    assert f"a critique of at least {store.MIN_CRITIQUE_CHARS} characters for entries, instructions" in error
    with store.open_store(wave.folder) as st:
        assert store.assignment(st.conn, WAVE, "G03", aid)["status"] == "open"
    form = client.post(f"/grade/{aid}", data=form_fields(page, action="submit", accept="yes", **short))
    assert form.status_code == 400 and "a critique of at least" in text(form)
    ok = autosave(client, aid, page, action="submit", accept="yes", **full)
    assert ok.json["ok"] and ok.json["status"] == "submitted"


def test_time_with_a_downloaded_file_is_recorded_apart_from_time_on_the_page(wave, make_app):
    app = make_app()
    client = login(app, wave, "G01")
    aid = wave.queue("G01")[1]
    page = text(client.get(f"/grade/{aid}"))
    csrf = hidden(page, "csrf")
    resp = client.post(f"/grade/{aid}/file-time", data={"csrf": csrf, "file": "memo.docx", "minutes": "18"})
    assert resp.status_code == 200 and resp.json["seconds"] == 18 * 60
    assert client.post(f"/grade/{aid}/file-time", data={"csrf": csrf, "minutes": "-3"}).status_code == 400
    assert client.post(f"/grade/{aid}/file-time", data={"csrf": "wrong", "minutes": "3"}).status_code == 403
    theirs = next(a for a in wave.queue("G02") if a not in wave.queue("G01"))
    assert client.post(f"/grade/{theirs}/file-time", data={"csrf": csrf, "minutes": "3"}).status_code == 404
    with store.open_store(wave.folder) as st:
        frame = store.grades_frame(st.conn, WAVE, submitted_only=False)
        graders = store.progress(st.conn, WAVE)["grader"].set_index("grader_id")
    assert float(frame[frame.grader_id == "G01"].groupby("package_id").file_s.first().sum()) == 18 * 60
    assert graders.loc["G01", "file_s"] == 18 * 60


# ---------------------------------------------------------------- downloads


def _zip_part(data: bytes, part: str) -> bytes:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return z.read(part)


def test_a_downloaded_workbook_has_its_values_and_no_metadata_that_names_its_program(wave, make_app):
    from openpyxl import load_workbook

    app = make_app()
    client = login(app, wave, "G01")
    aid = wave.queue("G01")[2]
    page = text(client.get(f"/grade/{aid}"))
    book = next(n for n in re.findall(rf'href="/grade/{aid}/file/([^"]+)"', page) if n.endswith(".xlsx"))
    data = client.get(f"/grade/{aid}/file/{book}").data
    values = load_workbook(io.BytesIO(data), data_only=True)
    formulas = load_workbook(io.BytesIO(data))
    cells = [
        (f.value, v.value)
        for ws in formulas.worksheets
        for row_f, row_v in zip(ws.iter_rows(), values[ws.title].iter_rows(), strict=True)
        for f, v in zip(row_f, row_v, strict=True)
        if isinstance(f.value, str) and f.value.startswith("=")
    ]
    # The delivered workbook (openpyxl's) stores no value; the download computes every formula.
    assert cells and all(v is not None for _, v in cells)
    # openpyxl reads a missing creator as its own name ("openpyxl"), so the part itself is read.
    import xml.etree.ElementTree as ET

    core = ET.fromstring(_zip_part(data, "docProps/core.xml"))
    assert [child.tag for child in core] == []  # no creator, last editor, dates, title, ...
    app_xml = _zip_part(data, "docProps/app.xml")
    assert b"Application" not in app_xml and b"penpyxl" not in data.lower() and b"LibreOffice" not in app_xml


def test_office_and_pdf_downloads_are_made_neutral(tmp_path):
    """A python-docx memo and a reportlab PDF (a gold memo of BANK-01), read back with their own libraries."""
    import docx
    from pypdf import PdfReader

    from pilot.scenarios import build_gold_workspace, load_scenario

    doc = docx.Document()
    doc.core_properties.author = "Openpyxl 3.1.5 script"
    doc.core_properties.comments = "written without LibreOffice"
    doc.add_paragraph("The memo.")
    buf = io.BytesIO()
    doc.save(buf)
    made = downloads.offered("memo.docx", buf.getvalue())
    back = docx.Document(io.BytesIO(made.data))
    cp = back.core_properties
    assert (cp.author, cp.comments, cp.last_modified_by) == ("", "", "")
    assert back.paragraphs[0].text == "The memo."
    assert b"Application" not in _zip_part(made.data, "docProps/app.xml")

    ws = build_gold_workspace(load_scenario("BANK-01"), tmp_path / "bank")
    pdf = (ws / "outputs" / "credit_memo.pdf").read_bytes()
    assert PdfReader(io.BytesIO(pdf)).metadata.producer  # the gold states its producer
    neutral = downloads.offered("credit_memo.pdf", pdf).data
    reader = PdfReader(io.BytesIO(neutral))
    assert reader.metadata is None or not any(reader.metadata.get(k) for k in ("/Producer", "/Creator", "/Author"))
    assert "/Metadata" not in reader.trailer["/Root"]
    assert reader.pages[0].extract_text() == PdfReader(io.BytesIO(pdf)).pages[0].extract_text()


def test_a_text_download_loses_what_the_judges_scrubber_drops():
    csv_in = "line,amount,note\n1,100.00,cleared\n2,50.00,made as a CSV because the environment has no shell\n"
    out = downloads.offered("ledger.csv", csv_in.encode(), withheld=["ACC-01.A0.r1"]).data.decode()
    assert out.splitlines() == ["line,amount,note", "1,100.00,cleared", "2,50.00,"]
    md = "The totals tie. This memo is a text substitute for the requested docx. See ACC-01.A0.r1 for the run."
    assert downloads.offered("memo.md", md.encode(), withheld=["ACC-01.A0.r1"]).data.decode() == "The totals tie."


# ---------------------------------------------------------------- links and the secret


def test_a_reissued_link_replaces_the_old_one_and_a_revoked_one_signs_in_no_more(wave, make_app):
    app = make_app()
    folder, made = wave.folder, wave.made
    signed = login(app, wave, "G03")
    assert signed.get("/queue").status_code == 200
    change = links.change_link(folder, WAVE, "G03", revoke=False)
    # At once, in the running site: the open session ends and the old link is refused.
    assert change.sessions_closed >= 1 and signed.get("/queue").status_code == 403
    assert app.test_client().get(f"/signin/{made.grader_tokens['G03']}").status_code == 403
    new = app.test_client()
    assert new.get(change.path).status_code == 303 and new.get("/queue").status_code == 200
    rows = (grading_dir(folder, WAVE) / "links.csv").read_text().splitlines()
    assert any(r.startswith("grader,G03,") and r.endswith(change.path) for r in rows)
    assert stat.S_IMODE((grading_dir(folder, WAVE) / "links.csv").stat().st_mode) == 0o600

    revoked = links.change_link(folder, WAVE, "G03", revoke=True)
    assert revoked.path is None and new.get("/queue").status_code == 403
    assert app.test_client().get(change.path).status_code == 403
    rows = (grading_dir(folder, WAVE) / "links.csv").read_text().splitlines()
    assert any(r.startswith("grader,G03,") and r.endswith(links.REVOKED) for r in rows)
    with pytest.raises(store.GradingError, match="no grader 'G99'"):
        links.change_link(folder, WAVE, "G99", revoke=True)
    # Give G03 a working link again for the other tests.
    made.grader_tokens["G03"] = links.change_link(folder, WAVE, "G03", revoke=False).path.rsplit("/", 1)[1]


def test_a_rotated_secret_signs_everyone_out_and_the_running_site_takes_it_up(wave, make_app):
    app = make_app()
    client = login(app, wave, "G01")
    old_cookie = client.get_cookie(COOKIE_NAME).value
    assert links.rotate_secret(wave.folder, WAVE) >= 1
    assert client.get("/queue").status_code == 403
    fresh = login(app, wave, "G01")  # signs in under the new secret
    assert fresh.get("/queue").status_code == 200
    replay = app.test_client()
    replay.set_cookie(COOKIE_NAME, old_cookie)
    assert replay.get("/queue").status_code == 403
    assert stat.S_IMODE((grading_dir(wave.folder, WAVE) / SECRET_FILE).stat().st_mode) == 0o600
    assert stat.S_IMODE((grading_dir(wave.folder, WAVE) / SESSIONS_FILE).stat().st_mode) == 0o600


# ---------------------------------------------------------------- the coordinator


def test_the_coordinator_sees_time_last_activity_and_short_critiques_and_previews_blind(wave, make_app):
    app = make_app()
    grader = login(app, wave, "G02")
    aid = wave.queue("G02")[1]
    page = text(grader.get(f"/grade/{aid}"))
    assert autosave(grader, aid, page, **{"critique-correctness": "too short"}).json["ok"]
    coord = app.test_client()
    assert coord.get(f"/coordinator/signin/{wave.made.coordinator_token}").status_code == 303
    html = text(coord.get("/coordinator"))
    row = re.search(r'<tr data-grader="G02">(.*?)</tr>', html, re.S).group(1)
    assert re.search(r'class="short-critiques flagged">[1-9]', row)
    assert re.search(r'class="last-activity" data-at="\d{4}-\d\d-\d\dT[^"]+">\d{4}-\d\d-\d\d \d\d:\d\d UTC<', row)
    assert 'class="active-s"' in row and 'class="file-s"' in row
    with store.open_store(wave.folder) as st:
        package_id, run_id = st.conn.execute(
            "SELECT p.package_id, p.run_id FROM grading_assignments a JOIN grading_packages p USING (wave, package_id) "
            "WHERE a.wave = ? AND a.assignment_id = ?",
            (WAVE, aid),
        ).fetchone()
    preview = text(coord.get(f"/coordinator/preview/{package_id}"))
    assert 'id="preview-note"' in preview and "Nothing can be graded here" in preview
    assert 'id="save"' not in preview and 'id="submit"' not in preview
    assert all(f'<fieldset class="criterion" id="criterion-{c}" disabled>' in preview for c in CRITERIA)
    # The package's content is the grader's page's, and nothing unblinds it (the run id, its arm token).
    grader_page = text(grader.get(f"/grade/{aid}"))
    section = re.search(r'<section id="package">.*?</section>', grader_page, re.S).group(0)
    assert section in preview
    assert run_id not in preview and ".A" + run_id.split(".A")[1][:1] + "." not in preview
    assert grader.get(f"/coordinator/preview/{package_id}").status_code == 403
    assert coord.get("/coordinator/preview/P9999").status_code == 404


def test_the_store_is_backed_up_while_the_site_has_it_open(wave, make_app, tmp_path):
    app = make_app()
    client = login(app, wave, "G01")
    aid = wave.queue("G01")[3]
    page = text(client.get(f"/grade/{aid}"))
    assert autosave(client, aid, page, **{"critique-instructions": LONG}).json["ok"]
    out = store.backup(wave.folder, tmp_path / "backup" / "study.sqlite")
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    with sqlite3.connect(out) as conn:
        (critique,) = conn.execute(
            "SELECT critique FROM grading_scores WHERE wave = ? AND assignment_id = ? AND criterion = 'instructions'",
            (WAVE, aid),
        ).fetchone()
    assert critique == LONG
    with pytest.raises(store.GradingError, match="that is the store itself"):
        store.backup(wave.folder, wave.folder / "study.sqlite")
