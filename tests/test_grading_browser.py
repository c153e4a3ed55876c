"""The grading site in the system Chromium (Playwright), served by waitress on a real port, as an expert uses it.

A grader signs in through their link and grades while the page's own script
runs under the strict CSP: what they type saves itself, survives leaving the
page and coming back, and a restart of the server in the middle of typing;
the page warns before leaving with unsaved changes; a second tab on the same
package is told, and refused when it would overwrite; a submission with an
empty critique is refused before the final confirmation is asked. The
package shows a workbook's computed values and a PDF memo's table, and a
download carries no metadata naming its program. A reissued link replaces
the old one and a revoked one ends the session at once (the real command
line). Another grader cannot open the package; a tampered link is refused,
and the right one works when followed from another site.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import socket
import subprocess
import sys
import zipfile

import pytest
from test_grading_site import CRITERIA, GRADERS
from view_support import pdf_study, simulated_study

from pilot import paths
from pilot.grading import store
from pilot.grading.plan import create_wave, grading_dir
from pilot.grading.site import GradingServer

WAVE = "browser-1"
CRITIQUE = "The NSF cheque is booked twice; the memo's <summary> & totals disagree."
MORE = " The timing items are named but not dated."
BANKERS = "name,contact,occupations\nDee Dale,dee@example.org,banking\nEli East,eli@example.org,banking\n"


class Served:
    """``pilot grading serve`` as a process of its own, which a test may stop and start again (a restart)."""

    def __init__(self, folder, wave: str) -> None:
        self.folder, self.wave = folder, wave
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> Served:
        cmd = [sys.executable, "-m", "pilot", "grading", "serve", str(self.folder), self.wave, "--port", str(self.port)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        line = self.proc.stdout.readline()
        assert f"at {self.url}/" in line, line
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
            self.proc.stdout.close()
            self.proc = None


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    folder = shutil.copytree(simulated_study(), tmp_path_factory.mktemp("grading-browser") / "viewsim", symlinks=True)
    graders = folder.parent / "graders.csv"
    graders.write_text(GRADERS, encoding="utf-8")
    made = create_wave(folder, WAVE, graders, per_package=2)
    server = Served(folder, WAVE).start()
    yield {"server": server}, made, folder
    server.stop()


def queue_of(folder, grader_id: str) -> list[str]:
    with store.open_store(folder) as st:
        return [r["assignment_id"] for r in store.queue(st.conn, WAVE, grader_id)]


def stored(folder, aid: str) -> dict:
    with store.open_store(folder) as st:
        return store.scores(st.conn, WAVE, aid)


def watch(page) -> list[str]:
    """Script errors and console errors (a CSP violation is one) of ``page``, but the failed saves a test causes."""
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" and "Failed to" not in m.text else None)
    return errors


def saved(page, timeout: float = 15000) -> None:
    page.wait_for_function("() => document.getElementById('save-state').dataset.state === 'saved'", timeout=timeout)


def sign_in(browser, url: str, token: str, **context):
    page = browser.new_context(**context).new_page()
    page.goto(f"{url}/signin/{token}")
    return page


def test_typing_is_kept_across_navigation_and_a_restart_and_leaving_unsaved_is_warned(browser, served):
    box, made, folder = served
    url = box["server"].url
    page = sign_in(browser, url, made.grader_tokens["G01"])
    errors = watch(page)
    aid = queue_of(folder, "G01")[0]
    page.goto(f"{url}/grade/{aid}")
    # The page counts active seconds (its script runs: the CSP allows the site's own file).
    page.mouse.move(20, 20)
    page.wait_for_function("() => Number(document.getElementById('active_s').value) >= 1", timeout=5000)

    page.check("#score-correctness-3")
    page.fill("#critique-correctness", CRITIQUE)
    saved(page)
    assert page.inner_text("#save-state").startswith("Saved ")
    assert stored(folder, aid)["correctness"] == (3, CRITIQUE)

    # Leaving with a change not yet saved is warned; staying keeps it, and it saves itself.
    page.type("#critique-entries", "Half a sentence")
    dialogs: list[str] = []

    def stay(dialog) -> None:
        dialogs.append(dialog.type)
        dialog.dismiss()

    page.once("dialog", stay)
    page.click("#nav-queue")
    page.wait_for_timeout(500)
    assert dialogs == ["beforeunload"] and page.url.endswith(f"/grade/{aid}")
    saved(page)

    # Away and back: nothing lost.
    page.click("#nav-queue")
    page.wait_for_url(f"{url}/queue")
    page.go_back()
    page.wait_for_url(f"**/grade/{aid}")
    assert page.input_value("#critique-correctness") == CRITIQUE
    assert page.input_value("#critique-entries") == "Half a sentence" and page.is_checked("#score-correctness-3")

    # The server stops while the grader types: the page says so, keeps retrying, and saves once it is back.
    box["server"].stop()
    page.locator("#critique-correctness").press("Control+End")
    page.keyboard.type(MORE)
    page.wait_for_function("() => document.getElementById('save-state').dataset.state === 'offline'", timeout=15000)
    assert "cannot be reached" in page.inner_text("#save-state")
    box["server"].start()
    saved(page, timeout=30000)
    assert stored(folder, aid)["correctness"] == (3, CRITIQUE + MORE)
    page.reload()  # still signed in after the restart
    assert page.input_value("#critique-correctness") == CRITIQUE + MORE
    assert not errors, errors
    page.context.close()


def test_a_second_tab_is_told_and_cannot_overwrite_the_first(browser, served):
    box, made, folder = served
    url = box["server"].url
    first = sign_in(browser, url, made.grader_tokens["G02"])
    aid = queue_of(folder, "G02")[0]
    first.goto(f"{url}/grade/{aid}")
    second = first.context.new_page()
    second.goto(f"{url}/grade/{aid}")
    # The tab opened first is told at once that the package is open elsewhere.
    first.wait_for_selector("#other-tab", state="visible", timeout=5000)
    second.wait_for_selector("#other-tab", state="visible", timeout=5000)

    second.fill("#critique-memo_quality", "Written in the second tab, saved first.")
    saved(second)
    first.fill("#critique-memo_quality", "Written in the first tab, which is now behind.")
    first.wait_for_selector("#stale", state="visible", timeout=15000)
    assert "another tab or window" in first.inner_text("#stale")
    assert first.locator("#stale-reload").count() == 1
    assert stored(folder, aid)["memo_quality"] == (None, "Written in the second tab, saved first.")
    first.context.close()


def test_a_submission_with_an_empty_critique_is_refused_before_the_final_question(browser, served):
    box, made, folder = served
    url = box["server"].url
    page = sign_in(browser, url, made.grader_tokens["G03"])
    errors = watch(page)
    aid = queue_of(folder, "G03")[0]
    page.goto(f"{url}/grade/{aid}")
    for k, criterion in enumerate(CRITERIA):
        page.check(f"#score-{criterion}-{k % 5}")
        if criterion != "instructions":
            page.fill(f"#critique-{criterion}", f"On {criterion}: what earned or lost the score.")
    page.check("#accept-yes")
    asked: list[str] = []
    page.on("dialog", lambda d: (asked.append(d.message), d.accept()))
    page.click("#submit")
    page.wait_for_selector("#form-errors", state="visible")
    assert asked == []  # the form was checked first: no "final?" question
    assert "instructions: write a critique of at least" in page.inner_text("#form-errors")
    with store.open_store(folder) as st:
        assert store.assignment(st.conn, WAVE, "G03", aid)["status"] != "submitted"

    page.fill("#critique-instructions", "Followed the layout asked for, bar one name.")
    page.click("#submit")
    page.wait_for_url("**?done=submitted")
    assert len(asked) == 1 and "final" in asked[0]
    assert page.locator("#submit").count() == 0 and page.is_disabled("#critique-correctness")
    with store.open_store(folder) as st:
        row = store.assignment(st.conn, WAVE, "G03", aid)
    assert row["status"] == "submitted" and row["accept"] == 1 and row["active_s"] >= 0
    assert not errors, errors
    page.context.close()


def test_reissued_and_revoked_links_through_the_command_line(browser, served):
    box, made, folder = served
    url = box["server"].url
    page = sign_in(browser, url, made.grader_tokens["G01"])
    assert page.url == f"{url}/queue"

    def cli(*args: str) -> None:
        env = dict(os.environ, PILOT_ROOT=str(paths.ROOT))
        subprocess.run([sys.executable, "-m", "pilot", "grading", "links", *args], env=env, check=True, timeout=120)

    cli("reissue", str(folder), WAVE, "G01")
    resp = page.goto(f"{url}/queue")  # the open session ended at once
    assert resp.status == 403 and "Not signed in" in page.inner_text("h1")
    resp = page.goto(f"{url}/signin/{made.grader_tokens['G01']}")
    assert resp.status == 403
    new = next(
        line.rsplit(",", 1)[1]
        for line in (grading_dir(folder, WAVE) / "links.csv").read_text().splitlines()
        if line.startswith("grader,G01,")
    )
    page.goto(f"{url}{new}")
    assert page.url == f"{url}/queue" and page.locator("#queue tbody tr").count() == len(queue_of(folder, "G01"))
    made.grader_tokens["G01"] = new.rsplit("/", 1)[1]

    cli("revoke", str(folder), WAVE, "G01")
    assert page.goto(f"{url}/queue").status == 403
    assert page.goto(f"{url}{new}").status == 403
    page.context.close()
    cli("reissue", str(folder), WAVE, "G01")  # G01 may grade again in later tests of this module
    made.grader_tokens["G01"] = next(
        line.rsplit("/", 1)[1]
        for line in (grading_dir(folder, WAVE) / "links.csv").read_text().splitlines()
        if line.startswith("grader,G01,")
    )


def test_another_grader_cannot_open_the_package_and_a_tampered_link_is_refused(browser, served):
    box, made, folder = served
    url = box["server"].url
    first = queue_of(folder, "G01")[0]
    page = sign_in(browser, url, made.grader_tokens["G02"])
    assert page.url == f"{url}/queue"
    assert first not in page.content() or first in queue_of(folder, "G02")
    other = next(a for a in queue_of(folder, "G01") if a not in queue_of(folder, "G02"))
    resp = page.goto(f"{url}/grade/{other}")
    assert resp.status == 404 and "There is no such package in your queue" in page.inner_text("#message")
    assert page.goto(f"{url}/grade/{other}/file/completion_record.json").status == 404
    page.context.close()

    token = made.grader_tokens["G03"]
    tampered = token[:-1] + ("A" if token[-1] != "A" else "B")
    stranger = browser.new_context().new_page()
    resp = stranger.goto(f"{url}/signin/{tampered}")
    assert resp.status == 403 and re.search("this sign-in link is not valid", stranger.inner_text("#message"), re.I)
    assert stranger.goto(f"{url}/queue").status == 403
    # The right link followed from another site (as from webmail): the SameSite=Strict cookie still arrives.
    elsewhere = url.replace("127.0.0.1", "localhost")  # another site to the browser
    stranger.goto(f"{elsewhere}/signed-out")
    with stranger.expect_navigation(url=f"{url}/queue"):
        stranger.evaluate(f"() => {{ location.href = '{url}/signin/{token}'; }}")
    assert stranger.inner_text("h1") == "Your packages"
    stranger.context.close()


# ---------------------------------------------------------------- values, tables and downloads


@pytest.fixture(scope="module")
def pdf_served(tmp_path_factory):
    folder = shutil.copytree(pdf_study(), tmp_path_factory.mktemp("grading-pdf") / "viewpdf", symlinks=True)
    graders = folder.parent / "graders.csv"
    graders.write_text(BANKERS, encoding="utf-8")
    made = create_wave(folder, "pdf-1", graders, per_package=2)
    with GradingServer(folder, "pdf-1") as server:
        yield server, made, folder


def test_the_page_shows_computed_values_and_the_pdf_table_and_downloads_carry_no_tell(browser, pdf_served):
    from openpyxl import load_workbook
    from pypdf import PdfReader

    server, made, folder = pdf_served
    with store.open_store(folder) as st:
        queue = [r["assignment_id"] for r in store.queue(st.conn, "pdf-1", "G01")]
    page = sign_in(browser, server.url, made.grader_tokens["G01"], accept_downloads=True)
    errors = watch(page)
    for aid in queue:  # the package whose memo was delivered (the other run's draw left it out)
        page.goto(f"{server.url}/grade/{aid}")
        if page.locator("article[data-format='pdf']").count():
            break
    else:
        raise AssertionError("no package of the wave holds the PDF memo")
    # The workbook: every formula cell shows a value, its formula after it (e.g. "1.15 [=ROUND(...)]").
    cells = page.locator("article[data-format='workbook'] table.sheet td").all_inner_texts()
    with_formula = [c for c in cells if " [=" in c]
    assert with_formula and all(re.match(r"^\S+.* \[=", c) and not c.startswith("[=") for c in with_formula)
    # The PDF memo: its ratio table as a table of cells (the judges read the same rows).
    memo = page.locator("article[data-format='pdf']")
    headers = memo.locator("table.sheet tr").first.locator("td").all_inner_texts()
    assert headers == ["Ratio", "Calculation", "Result", "Policy", "Complies"]
    assert memo.locator("table.sheet tr", has_text="DSCR").count() == 1
    frame = memo.locator("iframe.pdf-view")
    assert frame.count() == 1
    inline = page.request.get(server.url + frame.get_attribute("src"))
    assert inline.status == 200 and inline.headers["content-type"] == "application/pdf"
    assert inline.headers["content-disposition"].startswith("inline")

    got = {}
    for link in page.locator("#downloads a.download").all():
        with page.expect_download() as info:
            link.click()
        got[info.value.suggested_filename] = open(info.value.path(), "rb").read()
    book = next(v for k, v in got.items() if k.endswith(".xlsx"))
    pdf = next(v for k, v in got.items() if k.endswith(".pdf"))
    values = load_workbook(io.BytesIO(book), data_only=True)
    formulas = load_workbook(io.BytesIO(book))
    assert all(
        values[ws.title][c.coordinate].value is not None
        for ws in formulas.worksheets
        for row in ws.iter_rows()
        for c in row
        if isinstance(c.value, str) and c.value.startswith("=")
    )
    with zipfile.ZipFile(io.BytesIO(book)) as z:
        assert b"Application" not in z.read("docProps/app.xml") and b"creator" not in z.read("docProps/core.xml")
    meta = PdfReader(io.BytesIO(pdf)).metadata
    assert meta is None or not (meta.get("/Producer") or meta.get("/Creator"))
    assert not errors, errors
    page.context.close()
