"""A headless Chromium signs in to the portal and downloads files, as an A3 worker would.

Playwright drives the distribution's Chromium (``make test`` installs it
through ``tools/ensure-system-packages.sh browser``); Playwright's own browser
downloads are never used.
"""

from __future__ import annotations

from portal_support import make_scenario

from pilot.portal import read_access_log, start_instance
from pilot.portal.content import generate_portal


def test_chromium_signs_in_browses_and_downloads(browser, tmp_path):
    content_dir = generate_portal(make_scenario(tmp_path / "scenarios"))
    with start_instance("TEST-01", tmp_path / "run", content_dir=content_dir) as portal:
        context = browser.new_context(accept_downloads=True)
        page = context.new_page()
        page.goto(portal.url + "/library")
        assert page.url.startswith(portal.url + "/sign-in")  # the gate sends a stranger to sign in

        page.fill("#username", portal.credentials.username)
        page.fill("#password", "wrong-password")
        page.click("button[type=submit]")
        assert "wrong password" in page.inner_text("[role=alert]")

        page.fill("#username", portal.credentials.username)
        page.fill("#password", portal.credentials.password)
        page.click("button[type=submit]")
        assert page.url == portal.url + "/library"
        assert page.locator("#documents a.document").count() == 4

        with page.expect_download() as info:
            page.click("text=engagement_letter.docx")
        saved = tmp_path / "downloads" / info.value.suggested_filename
        info.value.save_as(saved)
        assert saved.name == "engagement_letter.docx"
        assert saved.read_bytes() == (content_dir / "documents" / "engagement_letter.docx").read_bytes()

        page.click("header a:text-is('Records')")
        page.click("text=Vendor invoices")
        assert page.locator("#rows tbody tr").count() == 3
        page.fill("#q", "Globex")
        page.click("button:text-is('Filter')")
        page.wait_for_url("**/records/vendor-invoices?q=Globex")
        assert page.locator("#rows tbody tr").count() == 1
        with page.expect_download() as info:
            page.click("a.download:text('XLSX')")
        xlsx = tmp_path / "downloads" / info.value.suggested_filename
        info.value.save_as(xlsx)
        assert xlsx.read_bytes() == (content_dir / "records" / "vendor-invoices.xlsx").read_bytes()
        context.close()

    entries = read_access_log(portal.access_log_path)
    actions = [e["action"] for e in entries]
    assert actions.count("sign_in_failed") == 1 and actions.count("sign_in") == 1
    downloads = [e["path"] for e in entries if e["action"] == "download"]
    assert downloads == ["/documents/engagement_letter.docx", "/records/vendor-invoices/download.xlsx"]
    assert all(e["user"] == portal.credential_fingerprint for e in entries if e["action"] == "download")


def test_chromium_is_never_sent_to_another_host_after_sign_in(browser, tmp_path):
    """A browser strips tabs and newlines from a URL, so "/\t/evil.example" would read as "//evil.example"."""
    content_dir = generate_portal(make_scenario(tmp_path / "scenarios"))
    with start_instance("TEST-01", tmp_path / "run", content_dir=content_dir) as portal:
        for hostile in (
            "/%09/evil.example",
            "/%0A/evil.example",
            "//evil.example",
            "/%5Cevil.example",
            "https://evil.example/",
        ):
            context = browser.new_context()
            page = context.new_page()
            page.goto(f"{portal.url}/sign-in?next={hostile}")
            page.fill("#username", portal.credentials.username)
            page.fill("#password", portal.credentials.password)
            page.click("button[type=submit]")
            page.wait_for_load_state()
            assert page.url == portal.url + "/library", hostile
            context.close()
