"""The participant site in the system Chromium (Playwright), served by waitress on a real port.

An H0 participant declines, then agrees, starts the clock (it counts down on
the page), has a wrong file refused and the right one accepted, sees that
there is no assistant, and submits; an H1 participant chats with the
assistant (the scripted model server behind the real metering proxy, its
cost booked and shown) and submits; the H1 participant's browser gets 404
for the H0 participant's session; a third participant withdraws from the
site. The site's own thread evaluates both sessions with the study's judges,
and the viewer shows the H1 run. No page has a script error (a CSP violation
is one). With ``PILOT_SCREENSHOTS=DIR`` every page is also saved as a picture.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from human_support import (
    DELIVERABLE,
    GOOD_CSV,
    WAVE,
    build_study,
    links,
    scripted_assistant,
    write_participants,
)
from schedule_support import make_root

from pilot.human import store
from pilot.human.site import ParticipantServer
from pilot.human.wave import create_wave
from pilot.simulated.scripted_model import scripted_assistant_reply
from pilot.view.app import ViewServer


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    base = tmp_path_factory.mktemp("human-browser")
    root = make_root(base)
    folder = build_study(root, "hb")
    create_wave(folder, WAVE, write_participants(base), per_condition=2)
    with store.open_store(folder) as st:
        by = {r["participant_id"]: r["condition"] for r in store.participants(st.conn, WAVE)}
    with scripted_assistant(folder) as assistant, ParticipantServer(folder, WAVE, assistant=assistant) as server:
        yield server, folder, by, base


def shots(base: Path) -> Path:
    folder = Path(os.environ.get("PILOT_SCREENSHOTS") or base / "pages")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def watch(page) -> list[str]:
    """Script errors and console errors (a CSP violation is one) of ``page``; a refusal's own status (the 422 of a
    refused upload, the 404 of another's session) is the page's answer, not an error of it."""
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on(
        "console",
        lambda m: (
            errors.append(m.text)
            if m.type == "error"
            and not m.text.startswith("Failed to load resource: the server responded with a status of 4")
            else None
        ),
    )
    return errors


def _of(by: dict[str, str], condition: str, skip: str = "") -> str:
    return next(p for p, c in by.items() if c == condition and p != skip)


def test_h0_declines_agrees_starts_uploads_and_submits_and_has_no_assistant(browser, served, tmp_path):
    server, folder, by, base = served
    out = shots(base)
    pid = _of(by, "H0")
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    errors = watch(page)
    page.goto(server.url + links(folder)[pid])
    assert "Information and consent" in page.inner_text("h1") and "Version" in page.inner_text("#consent-text")
    assert page.locator("#brief-text").count() == 0
    page.screenshot(path=str(out / "01-consent.png"), full_page=True)
    page.click("#decline")
    assert "You chose not to take part" in page.inner_text("#message")
    page.screenshot(path=str(out / "02-declined.png"))
    page.goto(server.url + links(folder)[pid])
    assert page.locator("#declined-note").count() == 1
    page.click("#agree")
    page.wait_for_url("**/ready")
    assert "without AI assistance" in page.inner_text("#assistant-note")
    page.screenshot(path=str(out / "03-ready-h0.png"), full_page=True)
    page.click("#start")
    page.wait_for_url("**/task")
    first = page.inner_text("#time-left")
    page.wait_for_function(f"() => document.getElementById('time-left').textContent !== {first!r}", timeout=5000)
    assert page.locator("#assistant-form").count() == 0
    assert "no assistant, by design" in page.inner_text("#no-assistant")
    assert page.locator("#input-files a.download").count() >= 1
    page.screenshot(path=str(out / "04-task-h0.png"), full_page=True)

    wrong = tmp_path / "plan.docx"
    wrong.write_bytes(b"PK\x03\x04 not a document")
    page.set_input_files("#file-1", str(wrong))
    page.click("#send-1")
    page.wait_for_selector("#errors")
    assert "you sent a .docx file" in page.inner_text("#errors")
    page.screenshot(path=str(out / "05-upload-refused.png"))
    good = tmp_path / "mine.csv"
    good.write_bytes(GOOD_CSV)
    page.set_input_files("#file-1", str(good))
    page.click("#send-1")
    page.wait_for_selector("#notice")
    assert f"{DELIVERABLE} received" in page.inner_text("#notice") and "received" in page.inner_text("#received-1")
    page.check("#status-completed")
    page.fill("#questions", "Which lead time applies to the imported parts?")
    page.screenshot(path=str(out / "06-before-submit.png"), full_page=True)
    page.once("dialog", lambda d: d.accept())
    page.click("#submit")
    page.wait_for_url("**/done")
    assert "submitted" in page.inner_text("#done-note")
    page.screenshot(path=str(out / "07-done.png"))
    assert not errors, errors
    page.context.close()


def test_h1_chats_through_the_metered_assistant_and_cannot_open_anothers_session(browser, served, tmp_path):
    server, folder, by, base = served
    out = shots(base)
    pid = _of(by, "H1")
    page = browser.new_context(viewport={"width": 1440, "height": 900}).new_page()
    errors = watch(page)
    page.goto(server.url + links(folder)[pid])
    page.click("#agree")
    page.wait_for_url("**/ready")
    page.screenshot(path=str(out / "08-ready-h1.png"), full_page=True)
    page.click("#start")
    page.wait_for_url("**/task")
    message = "How should I round order quantities to the supplier's pack size?"
    page.fill("#message-text", message)
    page.click("#send-message")
    page.wait_for_selector("#chat li.model")
    assert scripted_assistant_reply(1, message) in page.inner_text("#chat")
    assert float(page.inner_text("#assistant-spent")) > 0
    page.screenshot(path=str(out / "09-task-h1-chat.png"), full_page=True)
    with store.open_store(folder) as st:
        booked = store.exchanges(st.conn, WAVE, pid)
    assert len(booked) == 1 and booked[0]["status"] == "answered" and float(booked[0]["cost_usd"]) > 0

    good = tmp_path / "plan.csv"
    good.write_bytes(GOOD_CSV)
    page.set_input_files("#file-1", str(good))
    page.click("#send-1")
    page.wait_for_selector("#notice")
    page.check("#status-completed")
    page.once("dialog", lambda d: d.accept())
    page.click("#submit")
    page.wait_for_url("**/done")

    # The H0 participant's session, opened in this participant's browser: 404, as a session that does not exist.
    with store.open_store(folder) as st:
        other = store.participant(st.conn, WAVE, _of(by, "H0"))["session_id"]
    resp = page.goto(f"{server.url}/s/{other}/task")
    assert resp.status == 404 and "There is no such session" in page.inner_text("#message")
    page.screenshot(path=str(out / "10-another-404.png"))
    assert not errors, errors
    page.context.close()


def test_a_participant_withdraws_from_the_site(browser, served):
    server, folder, by, base = served
    out = shots(base)
    pid = _of(by, "H1", skip=_of(by, "H1")) if list(by.values()).count("H1") > 1 else _of(by, "H0", skip=_of(by, "H0"))
    link = links(folder)[pid]
    page = browser.new_context().new_page()
    page.goto(server.url + link)
    page.click("#agree")
    page.wait_for_url("**/ready")
    page.click("#withdraw-link")
    page.wait_for_url("**/withdraw")
    page.screenshot(path=str(out / "11-withdraw.png"))
    page.check("#confirm-withdraw")
    page.click("#withdraw")
    assert "You have withdrawn from the study" in page.inner_text("#message")
    page.screenshot(path=str(out / "12-withdrawn.png"))
    assert page.goto(server.url + link).status == 403
    with store.open_store(folder) as st:
        assert store.participant(st.conn, WAVE, pid) is None
        assert [w["participant_id"] for w in store.withdrawals(st.conn, WAVE)] == [pid]
    page.context.close()


def test_the_site_evaluates_the_submitted_sessions_and_the_viewer_shows_the_h1_run(browser, served):
    server, folder, by, base = served
    out = shots(base)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        with store.open_store(folder) as st:
            states = {
                r["condition"]: r["status"] for r in store.participants(st.conn, WAVE) if r["status"] != "assigned"
            }
        if states and all(s == "evaluated" for s in states.values()):
            break
        time.sleep(1)
    assert states == {"H0": "evaluated", "H1": "evaluated"}, states
    with store.open_store(folder) as st:
        run_id = store.participant(st.conn, WAVE, _of(by, "H1"))["run_id"]
        D, Q = st.conn.execute(
            "SELECT e.D, r.record_json FROM evaluations e JOIN runs r USING (run_id) WHERE run_id = ?", (run_id,)
        ).fetchone()
    assert D in (0, 1)
    experimenter = browser.new_context(viewport={"width": 1440, "height": 900}).new_page()
    experimenter.goto(server.url + links(folder)["experimenter"])
    assert experimenter.locator("#sessions tbody tr").count() == 2
    experimenter.screenshot(path=str(out / "13-experimenter.png"), full_page=True)
    experimenter.context.close()
    with ViewServer(folder) as view:
        page = browser.new_context(viewport={"width": 1440, "height": 900}).new_page()
        resp = page.goto(f"{view.url}/runs/{run_id}")
        assert resp.status == 200
        body = page.inner_text("body")
        assert run_id in body and "H1" in body
        # The assistant's requests are the participant's, not an agent's stream that lost its answer.
        tokens = page.inner_text("#tokens-by-session")
        assert "the assistant (answers shown to the participant)" in tokens and "not in the stream" not in tokens
        page.screenshot(path=str(out / "14-viewer-run.png"), full_page=True)
        page.goto(view.url + "/")
        assert run_id in page.inner_text("body")
        page.screenshot(path=str(out / "15-viewer-index.png"))
        page.context.close()
