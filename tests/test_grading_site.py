"""The blind grading site through Flask's test client: sign-in, the queue, drafts, submission, the coordinator.

One wave on a copy of the viewer's 10-run simulated study (ACC-01, all five
arms, twice), three accounting graders, two per package. Each test works on
assignments no other test touches, so the tests do not depend on their order.
"""

from __future__ import annotations

import io
import json
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
from view_support import SCENARIO, simulated_study

from pilot.grading import store
from pilot.grading.plan import CreatedWave, create_wave
from pilot.grading.site import COOKIE_NAME, CSP, create_app
from pilot.portal.app import SessionLimits, SignInLimits
from pilot.view.study import StudyReader

WAVE = "experts-1"
GRADERS = """name,contact,occupations
Ann Able,ann@example.org,accounting
Ben Baker,ben@example.org,accounting
Cat Cole,@cat,accounting
"""
CRITERIA = ("correctness", "entries", "workbook_quality", "memo_quality", "instructions")


@dataclass
class Wave:
    folder: Path
    made: CreatedWave

    def queue(self, grader_id: str) -> list[str]:
        with store.open_store(self.folder) as st:
            return [r["assignment_id"] for r in store.queue(st.conn, WAVE, grader_id)]

    def row(self, assignment_id: str) -> dict:
        with store.open_store(self.folder) as st:
            return dict(
                st.conn.execute(
                    "SELECT a.*, p.run_id FROM grading_assignments a JOIN grading_packages p "
                    "USING (wave, package_id) WHERE a.wave = ? AND a.assignment_id = ?",
                    (WAVE, assignment_id),
                ).fetchone()
            )

    def events(self, kind: str) -> list[dict]:
        with store.open_store(self.folder) as st:
            return [
                dict(r)
                for r in st.conn.execute(
                    "SELECT * FROM grading_events WHERE wave = ? AND kind = ? ORDER BY event_id", (WAVE, kind)
                )
            ]

    def unblinding(self) -> list[str]:
        """Strings no grader's page may hold: run ids, arm tokens of run ids, the model, the node, the study, package
        ids."""
        with store.open_store(self.folder) as st:
            nodes = {r[0] for r in st.conn.execute("SELECT DISTINCT node FROM attempts WHERE node IS NOT NULL")}
            package_ids = [
                r[0] for r in st.conn.execute("SELECT package_id FROM grading_packages WHERE wave = ?", (WAVE,))
            ]
        runs = [p.run_id for p in self.made.packages]
        return sorted(
            {
                *runs,
                *(f".{p.arm}." for p in self.made.packages),
                *(p.model for p in self.made.packages),
                *nodes,
                self.folder.name,
                *package_ids,
            }
        )


@pytest.fixture(scope="module")
def wave(tmp_path_factory) -> Wave:
    folder = shutil.copytree(simulated_study(), tmp_path_factory.mktemp("grading") / "viewsim", symlinks=True)
    graders = folder.parent / "graders.csv"
    graders.write_text(GRADERS, encoding="utf-8")
    return Wave(folder, create_wave(folder, WAVE, graders, per_package=2))


@pytest.fixture
def make_app(wave):
    apps = []

    def make(**options):
        app = create_app(wave.folder, WAVE, **options)
        apps.append(app)
        return app

    yield make
    for app in apps:
        app.extensions["pilot.grading"].close()


def signed_in(app, wave: Wave, grader_id: str):
    client = app.test_client()
    resp = client.get(f"/signin/{wave.made.grader_tokens[grader_id]}")
    assert resp.status_code == 303 and resp.headers["Location"] == "/queue"
    return client


def hidden(html: str, name: str) -> str:
    m = re.search(rf'name="{name}"[^>]*value="([^"]*)"', html)
    assert m, f"no hidden field {name}"
    return m.group(1)


def form_fields(html: str, **fields: str) -> dict[str, str]:
    return {"csrf": hidden(html, "csrf"), "page": hidden(html, "page"), **fields}


def text(resp) -> str:
    return resp.get_data(as_text=True)


def test_queue_and_grade_page_show_only_own_packages_and_nothing_that_unblinds(wave, make_app):
    app = make_app()
    forbidden = wave.unblinding()
    for grader_id in wave.made.grader_tokens:
        client = signed_in(app, wave, grader_id)
        resp = client.get("/queue")
        assert resp.status_code == 200
        html = text(resp)
        own = wave.queue(grader_id)
        others = {a for g in wave.made.grader_tokens if g != grader_id for a in wave.queue(g)}
        # Own assignments, in their stored order; nobody else's.
        assert re.findall(r'href="/grade/([0-9a-f]+)"', html) == own
        assert not any(a in html for a in others)
        assert f"Package 1 of {len(own)}" in html and f"Package {len(own)} of {len(own)}" in html
        assert "October bank reconciliation of the operating account" in html
        assert re.search(rf'id="progress">\d+ of {len(own)} packages submitted<', html)
        assert f'Grading wave <b id="wave-name">{WAVE}</b>' in html and "Grading is blind" in html
        page = text(client.get(f"/grade/{own[0]}"))
        for shown in (html, page):
            leaked = [s for s in forbidden if s in shown]
            assert leaked == [], f"{grader_id}: {leaked}"
        # The brief, the rubric with its anchors, the deliverables as judged, the files.
        assert "We close October this week" in page
        for criterion in CRITERIA:
            assert f'id="criterion-{criterion}"' in page and f'name="critique-{criterion}"' in page
            assert all(f'id="score-{criterion}-{n}"' in page for n in range(5))
        assert "<dt>0</dt>" in page and "<dt>4</dt>" in page
        assert "### reconciliation_memo" in page and f'href="/grade/{own[0]}/file/' in page
        assert 'id="accept-yes"' in page and 'id="save"' in page and 'id="submit"' in page


def test_every_response_carries_the_security_headers_and_the_cookie_is_strict(wave, make_app):
    app = make_app()
    client = app.test_client()
    resp = client.get(f"/signin/{wave.made.grader_tokens['G01']}")
    cookie = resp.headers["Set-Cookie"]
    assert cookie.startswith(f"{COOKIE_NAME}=") and "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert "Secure" not in cookie
    for answer in (
        resp,
        client.get("/queue"),
        client.get("/grade/nope"),
        client.get("/static/grading.js"),
        app.test_client().get("/queue"),
    ):
        assert answer.headers["Content-Security-Policy"] == CSP
        assert "default-src 'none'" in CSP and "script-src 'self'" in CSP and "frame-ancestors 'none'" in CSP
        assert answer.headers["X-Content-Type-Options"] == "nosniff"
        assert answer.headers["Referrer-Policy"] == "no-referrer"
        assert answer.headers["Cache-Control"] == "no-store"
    secure = make_app(secure_cookies=True).test_client().get(f"/signin/{wave.made.grader_tokens['G01']}")
    assert "Secure" in secure.headers["Set-Cookie"]


def test_a_draft_is_kept_then_submitted_once(wave, make_app):
    app = make_app()
    client = signed_in(app, wave, "G01")
    aid = wave.queue("G01")[0]
    page = text(client.get(f"/grade/{aid}"))
    typed = "Ties to the cent <b>but</b> the memo & workbook disagree on 'NSF'"
    resp = client.post(
        f"/grade/{aid}",
        data=form_fields(
            page,
            action="save",
            **{
                "score-correctness": "3",
                "critique-correctness": typed,
                "score-entries": "1",
                "accept": "no",
                "active_s": "0",
            },
        ),
    )
    assert resp.status_code == 303 and resp.headers["Location"] == f"/grade/{aid}?done=saved"
    assert wave.row(aid)["status"] == "saved"

    # Back later: the draft is there, escaped, and the queue says saved.
    page = text(client.get(f"/grade/{aid}?done=saved"))
    assert "Draft saved" in page
    assert re.search(r'id="score-correctness-3" value="3" checked', page)
    assert re.search(r'id="score-entries-1" value="1" checked', page)
    assert re.search(r'id="accept-no" value="no" checked', page)
    assert "Ties to the cent &lt;b&gt;but&lt;/b&gt; the memo &amp; workbook disagree on &#39;NSF&#39;" in page
    assert "<b>but</b>" not in page
    assert '<td class="status">saved</td>' in text(client.get("/queue"))

    # Submitting with scores missing is refused, and what was typed stays on the page.
    resp = client.post(
        f"/grade/{aid}",
        data=form_fields(
            page,
            action="submit",
            **{"score-correctness": "4", "critique-correctness": "changed my mind", "accept": "yes"},
        ),
    )
    assert resp.status_code == 400
    refused = text(resp)
    assert "cannot submit without a score for entries, workbook_quality, memo_quality, instructions" in refused
    assert re.search(r'id="score-correctness-4" value="4" checked', refused) and "changed my mind" in refused
    assert wave.row(aid)["status"] == "saved"

    full = {f"score-{c}": str(n) for c, n in zip(CRITERIA, (4, 3, 2, 1, 0), strict=True)}
    full.update({f"critique-{c}": f"critique of {c}" for c in CRITERIA})
    resp = client.post(f"/grade/{aid}", data=form_fields(refused, action="submit", accept="yes", **full))
    assert resp.status_code == 303 and resp.headers["Location"] == f"/grade/{aid}?done=submitted"
    row = wave.row(aid)
    assert row["status"] == "submitted" and row["accept"] == 1 and row["submitted_at"]
    with store.open_store(wave.folder) as st:
        assert store.scores(st.conn, WAVE, aid) == {
            c: (n, f"critique of {c}") for c, n in zip(CRITERIA, (4, 3, 2, 1, 0), strict=True)
        }

    # Read-only afterwards, and a second submission is refused with a clear message.
    done = text(client.get(f"/grade/{aid}"))
    assert 'id="submit"' not in done and 'id="save"' not in done and "disabled" in done and "final" in done
    again = client.post(
        f"/grade/{aid}",
        data=form_fields(page, action="submit", accept="no", **{k: "0" for k in full if k.startswith("score-")}),
    )
    assert again.status_code == 409
    assert "already submitted; a submitted grade is final" in text(again)
    with store.open_store(wave.folder) as st:
        assert store.scores(st.conn, WAVE, aid)["correctness"] == (4, "critique of correctness")
    assert wave.row(aid)["accept"] == 1
    assert [e["assignment_id"] for e in wave.events("submit")].count(aid) == 1


def test_active_seconds_are_capped_at_the_time_the_page_was_open(wave, make_app):
    app = make_app()
    client = signed_in(app, wave, "G01")
    aid = wave.queue("G01")[1]
    page = text(client.get(f"/grade/{aid}"))
    client.post(f"/grade/{aid}", data=form_fields(page, action="save", active_s="1e9"))
    first = wave.row(aid)["active_s"]
    assert 0 <= first <= 5  # served a moment ago: a billion seconds cannot have passed
    for forged in ({"page": "forged"}, {"active_s": "nan"}, {"active_s": "-50"}):
        client.post(f"/grade/{aid}", data={**form_fields(page, action="save", active_s="30"), **forged})
    assert wave.row(aid)["active_s"] <= first + 5


def test_another_graders_package_and_files_answer_404_and_own_files_are_recorded(wave, make_app):
    app = make_app()
    mine = signed_in(app, wave, "G01")
    theirs = next(a for a in wave.queue("G02") if a not in wave.queue("G01"))
    unknown = mine.get("/grade/0123456789abcdef")
    other = mine.get(f"/grade/{theirs}")
    assert other.status_code == unknown.status_code == 404
    assert other.data == unknown.data  # indistinguishable from a package that does not exist
    own = wave.queue("G01")[2]
    page = text(mine.get(f"/grade/{own}"))
    names = re.findall(rf'href="/grade/{own}/file/([^"]+)"', page)
    assert "reconciliation_memo.md" in names or "reconciliation_memo.docx" in names
    assert mine.get(f"/grade/{theirs}/file/{names[0]}").status_code == 404
    assert mine.post(f"/grade/{theirs}", data=form_fields(page, action="save")).status_code == 404
    for bad in ("study.sqlite", "..%2F..%2Frun_record.json", "BRIEF.md", "nope.txt"):
        assert mine.get(f"/grade/{own}/file/{bad}").status_code == 404, bad

    resp = mine.get(f"/grade/{own}/file/{names[0]}")
    assert resp.status_code == 200
    assert resp.headers["Content-Type"] == "application/octet-stream"
    assert resp.headers["Content-Disposition"].startswith("attachment;")
    outputs = StudyReader(wave.folder).run(wave.row(own)["run_id"])["final"]["files"].outputs
    assert resp.data == (outputs / names[0]).read_bytes()
    opened = [(e["grader_id"], e["assignment_id"], json.loads(e["detail_json"])) for e in wave.events("open_file")]
    assert ("G01", own, {"file": names[0]}) in opened
    assert not any(aid == theirs for _g, aid, _d in opened)
    assert ("G01", own) in {(e["grader_id"], e["assignment_id"]) for e in wave.events("open_package")}


def test_only_the_requested_deliverables_are_offered_never_the_record_or_other_files(wave, make_app):
    # ACC-01's brief asks for the workbook and the memo (scenario.yml); the completion record is shown rendered, as
    # the judges saw it (without the substitutions' reasons), and a file the brief did not ask for is not offered.
    app = make_app()
    mine = signed_in(app, wave, "G01")
    own = wave.queue("G01")[3]
    outputs = StudyReader(wave.folder).run(wave.row(own)["run_id"])["final"]["files"].outputs
    assert (outputs / "completion_record.json").is_file()
    stray = outputs / "scratch_notes.txt"
    stray.write_text("worked around the missing shell with osascript\n")
    try:
        page = text(mine.get(f"/grade/{own}"))
        names = set(re.findall(rf'href="/grade/{own}/file/([^"]+)"', page))
        stems = {"bank_reconciliation_2026-10", "reconciliation_memo"}
        assert names and all(n.split(".")[0] in stems for n in names), names
        assert "completion_record.json" not in names and "scratch_notes.txt" not in names
        for hidden_file in ("completion_record.json", "scratch_notes.txt"):
            assert mine.get(f"/grade/{own}/file/{hidden_file}").status_code == 404, hidden_file
        assert "osascript" not in page
    finally:
        stray.unlink()


def test_a_post_without_the_csrf_token_is_refused(wave, make_app):
    app = make_app()
    client = signed_in(app, wave, "G02")
    aid = wave.queue("G02")[0]
    page = text(client.get(f"/grade/{aid}"))
    data = form_fields(page, action="save", **{"score-correctness": "2"})
    right = hidden(page, "csrf")
    for csrf in (None, "", "x" * 43, right[:-1] + ("A" if right[-1] != "A" else "B")):
        sent = {k: v for k, v in data.items() if k != "csrf"} | ({} if csrf is None else {"csrf": csrf})
        resp = client.post(f"/grade/{aid}", data=sent)
        assert resp.status_code == 403 and "security token" in text(resp)
    assert client.post("/signout").status_code == 403
    assert wave.row(aid)["status"] == "open"
    assert client.get("/queue").status_code == 200  # still signed in


def test_a_tampered_or_unknown_link_is_refused_and_failures_are_limited(wave, make_app):
    app = make_app(sign_in_limits=SignInLimits(max_failures=3, window_s=60, lockout_s=60))
    token = wave.made.grader_tokens["G01"]
    tampered = token[:10] + ("A" if token[10] != "A" else "B") + token[11:]
    client = app.test_client()
    for bad in (tampered, "short", token + "x"):
        resp = client.get(f"/signin/{bad}")
        assert resp.status_code == 403 and "this sign-in link is not valid" in text(resp).lower()
        assert "Set-Cookie" not in resp.headers
    assert client.get("/queue").status_code == 403
    # Three failures from this address: even the right link waits now.
    limited = client.get(f"/signin/{token}")
    assert limited.status_code == 429 and int(limited.headers["Retry-After"]) > 0
    assert client.get(f"/coordinator/signin/{wave.made.coordinator_token}").status_code == 429
    other_address = app.test_client().get(f"/signin/{token}", environ_base={"REMOTE_ADDR": "10.0.0.9"})
    assert other_address.status_code == 303
    assert len(wave.events("signin_refused")) >= 3


def test_a_link_followed_from_another_site_signs_in_through_a_page_of_the_site(wave, make_app):
    # A browser withholds a SameSite=Strict cookie on a redirect that another site's link started.
    client = make_app().test_client()
    resp = client.get(f"/signin/{wave.made.grader_tokens['G02']}", headers={"Sec-Fetch-Site": "cross-site"})
    assert resp.status_code == 200 and "SameSite=Strict" in resp.headers["Set-Cookie"]
    assert '<meta http-equiv="refresh" content="0; url=/queue">' in text(resp)
    assert client.get("/queue").status_code == 200


def test_sign_out_ends_the_session_and_a_replayed_cookie_is_refused(wave, make_app):
    app = make_app()
    client = signed_in(app, wave, "G03")
    old = client.get_cookie(COOKIE_NAME).value
    page = text(client.get("/queue"))
    resp = client.post("/signout", data={"csrf": hidden(page, "csrf")})
    assert resp.status_code == 303 and resp.headers["Location"] == "/signed-out"
    assert "You are signed out" in text(client.get("/signed-out"))
    assert client.get("/queue").status_code == 403
    client.set_cookie(COOKIE_NAME, old)
    replay = client.get("/queue")
    assert replay.status_code == 403 and "Not signed in" in text(replay)
    assert client.post(f"/grade/{wave.queue('G03')[0]}", data={"csrf": hidden(page, "csrf")}).status_code == 403

    # A new sign-in rotates the session: the cookie from before it is worth nothing.
    client = signed_in(app, wave, "G03")
    before = client.get_cookie(COOKIE_NAME).value
    client.get(f"/signin/{wave.made.grader_tokens['G03']}")
    assert client.get_cookie(COOKIE_NAME).value != before
    stale = app.test_client()
    stale.set_cookie(COOKIE_NAME, before)
    assert stale.get("/queue").status_code == 403
    assert client.get("/queue").status_code == 200


def test_sessions_expire_when_idle_and_posts_are_rate_limited(wave, make_app):
    app = make_app(session_limits=SessionLimits(lifetime_s=3600, idle_s=1.0))
    client = signed_in(app, wave, "G03")
    assert client.get("/queue").status_code == 200
    time.sleep(1.2)
    assert client.get("/queue").status_code == 403

    app = make_app(post_limits=SignInLimits(max_failures=3, window_s=60, lockout_s=30))
    client = signed_in(app, wave, "G03")
    aid = wave.queue("G03")[1]
    page = text(client.get(f"/grade/{aid}"))
    codes = [client.post(f"/grade/{aid}", data=form_fields(page, action="save")).status_code for _ in range(4)]
    assert codes == [303, 303, 303, 429]


def test_the_host_header_must_be_the_bound_address_or_a_trusted_name(wave, make_app):
    token = wave.made.grader_tokens["G02"]
    app = make_app()
    assert app.test_client().get(f"/signin/{token}", base_url="http://127.0.0.1:8766").status_code == 303
    for host in ("evil.example", "127.0.0.1.evil.example", "grading.example.org"):
        assert app.test_client().get(f"/signin/{token}", base_url=f"http://{host}").status_code == 403, host
    proxied = make_app(trusted_hosts=["grading.example.org"])
    assert proxied.test_client().get(f"/signin/{token}", base_url="https://grading.example.org").status_code == 303
    assert proxied.test_client().get(f"/signin/{token}", base_url="http://evil.example").status_code == 403


def test_the_coordinator_sees_progress_and_exports_the_submitted_grades(wave, make_app):
    app = make_app()
    # A grader submits one package (their last, which no other test touches).
    grader = signed_in(app, wave, "G02")
    aid = wave.queue("G02")[-1]
    page = text(grader.get(f"/grade/{aid}"))
    full = {f"score-{c}": "2" for c in CRITERIA} | {
        f"critique-{c}": f'G02 on {c}, "quoted", with a comma' for c in CRITERIA
    }
    assert grader.post(f"/grade/{aid}", data=form_fields(page, action="submit", accept="no", **full)).status_code == 303
    assert grader.get("/coordinator").status_code == 403
    assert grader.get("/coordinator/export.csv").status_code == 403

    coord = app.test_client()
    resp = coord.get(f"/coordinator/signin/{wave.made.coordinator_token}")
    assert resp.status_code == 303 and resp.headers["Location"] == "/coordinator"
    html = text(coord.get("/coordinator"))
    with store.open_store(wave.folder) as st:
        tables = store.progress(st.conn, WAVE)
        package_id = st.conn.execute(
            "SELECT package_id FROM grading_assignments WHERE wave = ? AND assignment_id = ?", (WAVE, aid)
        ).fetchone()[0]
    for r in tables["grader"].to_dict("records"):
        row = re.search(rf'<tr data-grader="{r["grader_id"]}">(.*?)</tr>', html, re.S).group(1)
        assert (
            f'<td class="n-submitted">{r["submitted"]}</td>' in row
            and f'<td class="n-assigned">{r["assigned"]}</td>' in row
        )
    g02 = re.search(r'<tr data-grader="G02">(.*?)</tr>', html, re.S).group(1)
    assert re.search(r'n-submitted">([1-9]\d*)<', g02)
    assert all(f'data-stratum="{SCENARIO}/A{k}"' in html for k in range(5))  # the coordinator may see strata
    assert coord.get("/queue").status_code == 403 and coord.get(f"/grade/{aid}").status_code == 403

    export = coord.get("/coordinator/export.csv")
    assert export.status_code == 200 and export.headers["Content-Type"].startswith("text/csv")
    assert export.headers["Content-Disposition"] == f'attachment; filename="grades-{WAVE}.csv"'
    frame = pd.read_csv(io.StringIO(text(export)), keep_default_na=False)
    assert list(frame.columns) == list(store.GRADE_COLUMNS)
    mine = frame[(frame.package_id == package_id) & (frame.grader_id == "G02")]
    assert sorted(mine.criterion) == sorted(CRITERIA)
    assert set(mine.score.astype(float)) == {2.0} and set(mine.accept.astype(float)) == {0.0}
    assert set(mine.status) == {"submitted"}
    assert mine.set_index("criterion").critique["entries"] == 'G02 on entries, "quoted", with a comma'
    # Drafts are not grades: nothing of an unsubmitted assignment is exported.
    assert (frame[frame.status != "submitted"].criterion == "").all()
