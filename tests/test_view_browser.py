"""The viewer in the system Chromium (Playwright), served live and opened from a static export on disk."""

from __future__ import annotations

from view_support import models_study, run_table, simulated_study

from pilot.view.app import ViewServer
from pilot.view.export import export_site
from pilot.view.study import StudyReader


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
        page.click("#runs th[data-key='Q'] button")
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


def _visible_runs(page) -> set[str]:
    return set(page.eval_on_selector_all("#runs tbody tr:not([hidden])", "rows => rows.map(r => r.dataset.run)"))


def _banner_on_screen(page) -> bool:
    return page.evaluate("""() => { const r = document.getElementById('simulated-banner').getBoundingClientRect();
                                     return r.top >= 0 && r.bottom <= window.innerHeight && r.height > 0; }""")


def _wait_value(page, selector: str, value: str, timeout_s: float = 5.0) -> None:
    """Wait until a field holds ``value`` (wait_for_function evaluates a string, which the viewer's CSP forbids)."""
    import time

    end = time.monotonic() + timeout_s
    while page.input_value(selector) != value:
        assert time.monotonic() < end, f"{selector} holds {page.input_value(selector)!r}, not {value!r}"
        page.wait_for_timeout(50)


def _check_new_pages(page, base: str, table, suffix: str) -> None:
    """The scenario list, the overview, the live hash filters and the run-id search, on the server or the export."""
    worker = next(iter(set(table.loc[table["wave"] == "pilot", "model"])))
    sens = sorted(set(table["model"]) - {worker})
    # Scenario list -> scenario page.
    page.goto(f"{base}/scenarios{suffix}")
    assert page.inner_text("h1") == "Scenarios"
    page.click("#scenario-list a >> text=ACC-01")
    page.wait_for_url(f"**/scenarios/ACC-01{suffix}")
    assert page.locator("section.arm.sensitivity").count() == len(sens)
    # Overview: a cell opens the run list filtered to that scenario, arm and worker model.
    page.goto(f"{base}/overview{suffix}")
    cell = page.locator("#matrix tr[data-scenario='ACC-01'] td[data-arm='A3'] a")
    mine = table[(table["scenario"] == "ACC-01") & (table["arm"] == "A3") & (table["model"] == worker)]
    assert cell.inner_text() == f"{(mine['S'] == 'True').sum()}/{mine['S'].isin(['True', 'False']).sum()}"
    cell.click()
    page.wait_for_selector("#runs")
    assert _visible_runs(page) == set(mine["run_id"])
    assert page.input_value("#filter-model") == worker and page.input_value("#filter-arm") == "A3"
    assert page.inner_text(f"#arm-counts tr[data-arm='A3'][data-model='{sens[0]}'] .n-runs") == "0"
    # The filters follow the hash live (no reload), and a changed filter goes into the hash.
    page.evaluate("window.__same_document = true")
    page.evaluate(f"location.hash = '#arm=A3&model={sens[0]}'")
    _wait_value(page, "#filter-model", sens[0])
    assert _visible_runs(page) == set(table.loc[(table["arm"] == "A3") & (table["model"] == sens[0]), "run_id"])
    page.select_option("#filter-model", "")
    assert page.evaluate("location.hash") == "#arm=A3"
    assert _visible_runs(page) == set(table.loc[table["arm"] == "A3", "run_id"])
    # A changed filter replaces the address's hash (no history entry per keystroke), so going back returns to
    # the overview cell's filter, in the same document, through hashchange.
    page.go_back()
    _wait_value(page, "#filter-model", worker)
    assert _visible_runs(page) == set(mine["run_id"])
    assert page.evaluate("window.__same_document") is True
    # Search: a prefix filters the run list, an exact id opens the run.
    page.fill("#search-id", "ACC-01.A3")
    page.press("#search-id", "Enter")
    _wait_value(page, "#filter-run", "ACC-01.A3")
    assert _visible_runs(page) == {r for r in table["run_id"] if r.startswith("ACC-01.A3")}
    page.goto(f"{base}/scenarios/ACC-01{suffix}")
    exact = "ACC-01.A3.r1"  # also the start of the sensitivity runs' ids: the exact one wins
    page.fill("#search-id", exact)
    page.press("#search-id", "Enter")
    page.wait_for_url(f"**/runs/{exact}{suffix}")


def test_new_pages_search_hash_filters_and_sticky_banner(browser, tmp_path):
    import pandas as pd

    folder = models_study()
    table = pd.read_csv(run_table(folder, tmp_path / "runs.csv"), dtype=str, keep_default_na=False)
    errors: list[str] = []
    with ViewServer(folder) as server:
        page = browser.new_page(viewport={"width": 1200, "height": 700})
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        _check_new_pages(page, server.url, table, "")
        page.close()
    out = tmp_path / "site"
    export_site(folder, out, workers=1)
    page = browser.new_page(viewport={"width": 1200, "height": 700})
    page.on("pageerror", lambda e: errors.append(str(e)))
    base = out.as_uri()
    _check_new_pages(page, base, table, ".html")
    page.goto(f"{base}/index.html")
    page.evaluate("window.scrollTo(0, document.body.scrollHeight)")
    assert page.evaluate("window.scrollY") > 300 and _banner_on_screen(page)
    page.close()
    assert not errors, errors


def test_a_long_run_page_keeps_the_banner_and_folds_repeated_steps(browser, tmp_path):
    import pandas as pd

    folder = simulated_study()
    table = pd.read_csv(run_table(folder, tmp_path / "runs.csv"), dtype=str, keep_default_na=False)
    a4 = table[(table["arm"] == "A4") & (table["recovery_used"] == "True")].iloc[0].run_id
    errors: list[str] = []
    with ViewServer(folder) as server:
        page = browser.new_page(viewport={"width": 1200, "height": 700})
        page.on("pageerror", lambda e: errors.append(str(e)))
        # A long page: the banner stays on screen at the bottom; the collapsed repeats open on demand.
        page.goto(f"{server.url}/runs/{a4}")
        page.evaluate("window.scrollTo(0, document.body.scrollHeight)")
        assert page.evaluate("window.scrollY") > 2000
        assert _banner_on_screen(page)
        rep = page.locator("details.repeats").first
        assert rep.evaluate("d => d.open") is False
        rep.locator("summary").click()
        assert rep.evaluate("d => d.open") is True
        assert page.locator(".boundary").count() == 1 and "resume granted" in page.inner_text(".boundary")
        page.close()
    assert not errors, errors


def test_the_static_index_without_javascript_lists_every_run_and_says_why_search_is_gone(browser, tmp_path):
    import pandas as pd

    folder = simulated_study()
    table = pd.read_csv(run_table(folder, tmp_path / "runs.csv"), dtype=str, keep_default_na=False)
    out = tmp_path / "site"
    export_site(folder, out, workers=1)
    context = browser.new_context(java_script_enabled=False)
    try:
        page = context.new_page()
        page.goto((out / "index.html").as_uri())
        note = page.locator("noscript, p.warn").filter(has_text="need JavaScript")
        assert note.count() == 1 and note.first.is_visible()
        shown = page.eval_on_selector_all(
            "#runs tbody tr:not([hidden])", "rows => rows.map(r => r.dataset.run || r.id)"
        )
        assert len(shown) == len(table) and len(table) > 0
    finally:
        context.close()
