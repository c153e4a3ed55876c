"""The viewer in the system Chromium (Playwright), served live and opened from a static export on disk."""

from __future__ import annotations

import pytest

from pilot.view.app import ViewServer
from pilot.view.export import export_site
from pilot.view.study import StudyReader
from view_support import simulated_study

pytestmark = pytest.mark.slow


def _visible_arms(page) -> list[str]:
    return page.eval_on_selector_all("#runs tbody tr:not([hidden])", "rows => rows.map(r => r.dataset.arm)")


def test_filter_open_a_deviation_and_follow_the_static_export(browser, tmp_path):
    folder = simulated_study()
    reader = StudyReader(folder)
    rows = reader.index_rows()
    with_dev = {r["run_id"] for r in rows if r.get("deviations")}
    assert with_dev, "the test study has no run with a deviation"
    errors: list[str] = []
    with ViewServer(folder) as server:
        page = browser.new_page()
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.goto(server.url + "/")
        assert "SIMULATED" in page.inner_text("#simulated-banner")
        assert page.locator("#runs tbody tr:not([hidden])").count() == len(rows)

        # Filter to one arm: only its runs remain, and the counts per arm follow.
        page.select_option("#filter-arm", "A1")
        arms = _visible_arms(page)
        assert arms and set(arms) == {"A1"} and len(arms) == sum(r["arm"] == "A1" for r in rows)
        assert page.inner_text("#arm-counts tr[data-arm='A0'] .n-runs") == "0"
        assert page.inner_text("#shown") == f"{len(arms)} of {len(rows)} runs shown"
        # ... then to runs with deviations, and open one.
        page.check("#filter-dev")
        shown = page.eval_on_selector_all("#runs tbody tr:not([hidden]) a.run-link", "as => as.map(a => a.textContent)")
        assert shown and set(shown) <= with_dev
        page.click(f"#runs tbody tr:not([hidden]) a.run-link >> text={shown[0]}")
        page.wait_for_url(f"**/runs/{shown[0]}")
        flagged = page.locator("li.ev.flagged")
        assert flagged.count() >= 1
        assert flagged.first.is_visible()
        assert "DEVIATION" in flagged.first.inner_text() and "stopped by" in flagged.first.inner_text()
        # The summary's link jumps to the highlighted event.
        page.click("#deviations a >> nth=0")
        assert page.evaluate("location.hash").startswith("#a1-ev-")
        # Sorting the index by Q puts the missing last and the numbers in order.
        page.goto(server.url + "/")
        page.click("#runs th[data-col='8'] button")
        qs = page.eval_on_selector_all("#runs tbody tr td.col-Q", "tds => tds.map(t => t.dataset.sort)")
        nums = [float(q) for q in qs if q]
        assert nums == sorted(nums)
        page.close()
    assert not errors, errors

    out = tmp_path / "site"
    export_site(folder, out)
    page = browser.new_page()
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto((out / "index.html").as_uri() + "#arm=A2")
    assert set(_visible_arms(page)) == {"A2"}  # the filter in the address works from file:// too
    assert "SIMULATED" in page.inner_text("#simulated-banner")
    target = next(r["run_id"] for r in rows if r["arm"] == "A2")
    page.click(f"a.run-link >> text={target}")
    page.wait_for_url(f"**/runs/{target}.html")
    assert page.inner_text("h1") == f"Run {target}"
    assert "SIMULATED" in page.inner_text("#simulated-banner")
    page.click(f"#summary a >> text={rows[0]['scenario']}")
    page.wait_for_url(f"**/scenarios/{rows[0]['scenario']}.html")
    assert page.locator("section.arm").count() == 5
    page.click("#nav-index")
    page.wait_for_url("**/index.html")
    page.close()
    assert not errors, errors
