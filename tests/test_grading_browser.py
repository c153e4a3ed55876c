"""The grading site in the system Chromium (Playwright), served by waitress on a real port.

A grader signs in through their link, grades a package (draft, reload,
submit) while the page's own script counts active seconds under the strict
CSP; a second grader cannot open the first one's package; a tampered link is
refused, and the right one works when followed from another site; the
coordinator sees the submission in the progress table.
"""

from __future__ import annotations

import re
import shutil

import pytest
from test_grading_site import CRITERIA, GRADERS
from view_support import simulated_study

from pilot.grading import store
from pilot.grading.plan import create_wave
from pilot.grading.site import GradingServer

WAVE = "browser-1"
CRITIQUE = "The NSF cheque is booked twice; the memo's <summary> & totals disagree."


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    folder = shutil.copytree(simulated_study(), tmp_path_factory.mktemp("grading-browser") / "viewsim", symlinks=True)
    graders = folder.parent / "graders.csv"
    graders.write_text(GRADERS, encoding="utf-8")
    made = create_wave(folder, WAVE, graders, per_package=2)
    with GradingServer(folder, WAVE) as server:
        yield server, made, folder


def queue_of(folder, grader_id: str) -> list[str]:
    with store.open_store(folder) as st:
        return [r["assignment_id"] for r in store.queue(st.conn, WAVE, grader_id)]


def watch(page) -> list[str]:
    """Script errors and console errors (a CSP violation is one) of ``page``."""
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    return errors


def submitted_of(page, grader_id: str) -> int:
    return int(page.inner_text(f"tr[data-grader='{grader_id}'] td.n-submitted"))


def test_a_grader_saves_a_draft_comes_back_and_submits_while_the_coordinator_watches(browser, served, tmp_path):
    server, made, folder = served
    coordinator = browser.new_context().new_page()
    coordinator.goto(f"{server.url}/coordinator/signin/{made.coordinator_token}")
    assert coordinator.url == f"{server.url}/coordinator"
    before = submitted_of(coordinator, "G01")

    context = browser.new_context(accept_downloads=True)
    page = context.new_page()
    errors = watch(page)
    page.goto(f"{server.url}/signin/{made.grader_tokens['G01']}")
    assert page.url == f"{server.url}/queue"
    own = queue_of(folder, "G01")
    assert page.locator("#queue tbody tr").count() == len(own)
    assert "Grading is blind" in page.inner_text("#blind-note")
    page.click("#queue tbody tr:first-child a.open-package")
    page.wait_for_url(f"**/grade/{own[0]}")
    assert page.inner_text("h1") == f"Package 1 of {len(own)}"

    # The page's script counts active seconds (it runs: the CSP allows the site's own file).
    page.mouse.move(20, 20)
    page.wait_for_function("() => Number(document.getElementById('active_s').value) >= 1", timeout=5000)

    page.check("#score-correctness-3")
    page.check("#score-entries-1")
    page.fill("#critique-correctness", CRITIQUE)
    page.check("#accept-no")
    page.click("#save")
    page.wait_for_url("**?done=saved")
    assert "Draft saved" in page.inner_text("#notice")
    page.reload()
    assert (
        page.is_checked("#score-correctness-3")
        and page.is_checked("#score-entries-1")
        and page.is_checked("#accept-no")
    )
    assert page.input_value("#critique-correctness") == CRITIQUE

    with page.expect_download() as info:
        page.click("#downloads a.download >> nth=0")
    assert info.value.suggested_filename == page.inner_text("#downloads a.download >> nth=0")

    for k, criterion in enumerate(CRITERIA):
        page.check(f"#score-{criterion}-{k % 5}")
        if criterion != "correctness":
            page.fill(f"#critique-{criterion}", f"on {criterion}")
    page.check("#accept-yes")
    page.once("dialog", lambda d: d.accept())  # "Submit this grade? ... final"
    page.click("#submit")
    page.wait_for_url("**?done=submitted")
    assert page.locator("#submit").count() == 0 and page.locator("#save").count() == 0
    assert page.is_disabled("#score-correctness-0") and page.is_disabled("#critique-correctness")
    assert "final" in page.inner_text("#state")
    assert not errors, errors

    with store.open_store(folder) as st:
        row = st.conn.execute(
            "SELECT status, accept, active_s FROM grading_assignments WHERE wave = ? AND assignment_id = ?",
            (WAVE, own[0]),
        ).fetchone()
        opened = [
            r[0]
            for r in st.conn.execute(
                "SELECT detail_json FROM grading_events WHERE wave = ? AND kind = 'open_file' AND assignment_id = ?",
                (WAVE, own[0]),
            )
        ]
    assert (row["status"], row["accept"]) == ("submitted", 1) and row["active_s"] >= 1
    assert opened and info.value.suggested_filename in opened[0]

    coordinator.reload()
    assert submitted_of(coordinator, "G01") == before + 1
    context.close()
    coordinator.context.close()


def test_another_grader_cannot_open_the_package_and_a_tampered_link_is_refused(browser, served):
    server, made, folder = served
    first = queue_of(folder, "G01")[0]
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{server.url}/signin/{made.grader_tokens['G02']}")
    assert page.url == f"{server.url}/queue"
    assert first not in page.content()
    resp = page.goto(f"{server.url}/grade/{first}")
    assert resp.status == 404
    assert CRITIQUE not in page.content() and "There is no such package in your queue" in page.inner_text("#message")
    resp = page.goto(f"{server.url}/grade/{first}/file/completion_record.json")
    assert resp.status == 404
    context.close()

    token = made.grader_tokens["G03"]
    tampered = token[:-1] + ("A" if token[-1] != "A" else "B")
    stranger = browser.new_context().new_page()
    resp = stranger.goto(f"{server.url}/signin/{tampered}")
    assert resp.status == 403 and re.search("this sign-in link is not valid", stranger.inner_text("#message"), re.I)
    resp = stranger.goto(f"{server.url}/queue")
    assert resp.status == 403 and "Not signed in" in stranger.inner_text("h1")

    # The right link followed from another site (as from webmail): the SameSite=Strict cookie still arrives.
    elsewhere = server.url.replace("127.0.0.1", "localhost")  # another site to the browser
    stranger.goto(f"{elsewhere}/signed-out")
    with stranger.expect_navigation(url=f"{server.url}/queue"):
        stranger.evaluate(f"() => {{ location.href = '{server.url}/signin/{token}'; }}")
    assert stranger.inner_text("h1") == "Your packages"
    assert stranger.locator("#queue tbody tr").count() == len(queue_of(folder, "G03"))
    stranger.context.close()
