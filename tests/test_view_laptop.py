"""The viewer in the system Chromium at a laptop's 1440 x 900 and a phone's 390 x 844 (Playwright).

Each question a PI asks of the whole study is answered from the pages, and
the answer is checked against the study's own records read here without the
viewer's code: the store (sqlite3), the run records (json) and the run table
``pilot study export`` writes. Screenshots of every page go to the test's
temporary folder.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import sqlite3
from pathlib import Path

import pandas as pd
import pytest
from view_support import SCENARIO, caps_study, models_study, run_table, simulated_study

from pilot.view.app import ViewServer
from pilot.view.export import export_site

VIEWPORTS = [(1440, 900), (390, 844)]
IDS = ["laptop", "phone"]


def _page(browser, viewport, errors, **context):
    ctx = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]}, **context)
    page = ctx.new_page()
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    return ctx, page


def _no_page_scroll_sideways(page) -> None:
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= page.viewport_size["width"], f"the page scrolls sideways: {width} px"


def _visible_runs(page) -> list[str]:
    return page.eval_on_selector_all("#runs tbody tr:not([hidden])", "rows => rows.map(r => r.dataset.run)")


def _records(folder: Path) -> dict[str, dict]:
    """run id -> its run record, read from the store with sqlite3 (not the viewer's reader)."""
    with sqlite3.connect(f"file:{folder / 'study.sqlite'}?mode=ro", uri=True) as con:
        return {rid: json.loads(rec) for rid, rec in con.execute("SELECT run_id, record_json FROM runs")}


def _table(folder: Path, tmp_path: Path) -> pd.DataFrame:
    return pd.read_csv(run_table(folder, tmp_path / "runs.csv"), dtype=str, keep_default_na=False)


def _wait_hash(page, part: str) -> None:
    for _ in range(100):
        if part in page.evaluate("location.hash"):
            return
        page.wait_for_timeout(50)
    raise AssertionError(f"{part!r} never reached the address: {page.evaluate('location.hash')}")


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=IDS)
def test_why_page_counts_failures_per_arm_and_opens_their_runs(browser, tmp_path, viewport):
    folder = models_study()
    table = _table(folder, tmp_path)
    records = _records(folder)
    worker = next(iter(set(table.loc[table["wave"] == "pilot", "model"])))
    # The truth: per criterion, the worker model's A0 runs that failed it, from the records themselves.
    failed: dict[str, set[str]] = {}
    for _, r in table.iterrows():
        if r["model"] == worker and r["arm"] == "A0":
            for c in records[r["run_id"]]["criteria"]:
                if not c["passed"]:
                    failed.setdefault(c["id"], set()).add(r["run_id"])
    assert failed, "the A0 runs of the test study fail criteria"
    crit, runs = max(failed.items(), key=lambda kv: (len(kv[1]), kv[0]))
    a0 = table[(table["model"] == worker) & (table["arm"] == "A0")]
    errors: list[str] = []
    with ViewServer(folder) as server:
        ctx, page = _page(browser, viewport, errors)
        page.goto(f"{server.url}/why")
        assert "SIMULATED" in page.inner_text("#simulated-banner")
        _no_page_scroll_sideways(page)
        # The worker model's arms first, each sensitivity model apart and named.
        heads = page.eval_on_selector_all("#criteria-table thead th", "ths => ths.map(t => t.textContent.trim())")
        sens = sorted(set(table["model"]) - {worker})
        assert heads[1:] == ["A0", "A3"] + [f"A3 · {m}" for m in sens]
        cell = page.locator(f"#criteria-table tr[data-criterion='{crit}'] td.cell").first
        assert cell.inner_text().strip() == f"{len(runs)}/{len(a0)}"
        # Acceptance per arm: the scenario-weighted mean of S (one scenario here: the mean of its repeats).
        for arm, model in [("A0", worker), ("A3", worker)] + [("A3", m) for m in sens]:
            mine = table[(table["arm"] == arm) & (table["model"] == model) & (table["S"] != "")]
            want = f"{100 * (mine['S'] == 'True').mean():.0f}%"
            row = page.locator(f"#acceptance-table tr[data-col='{arm}\u0000{model}'] td.p-hat")
            assert row.inner_text() == want, (arm, model)
        assert page.locator("#acceptance-plot circle.est").count() == 2 + len(sens)
        drawn = page.locator("#cost-q-plot circle.dot").count()
        assert drawn == ((table["cost_usd"] != "") & (table["Q"] != "")).sum()
        page.screenshot(path=str(tmp_path / f"why-{viewport[0]}.png"), full_page=True)
        # The count opens exactly those runs in the index.
        cell.locator("a").click()
        page.wait_for_selector("#runs")
        _wait_hash(page, "failed=")
        assert set(_visible_runs(page)) == runs
        assert f"failed criterion: {crit}" in page.inner_text("#chips")
        ctx.close()
    assert not errors, errors


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=IDS)
def test_deviations_and_violations_per_arm_open_their_runs(browser, tmp_path, viewport):
    folder = simulated_study()
    records = _records(folder)
    by_family: dict[str, set[str]] = {}
    for rid, rec in records.items():
        for d in rec.get("deviations") or []:
            by_family.setdefault(d["family"], set()).add(rid)
    violated = {rid for rid, rec in records.items() if rec.get("E")}
    assert by_family and violated, "the test study (seed 5) has deviations and a changed input"
    errors: list[str] = []
    with ViewServer(folder) as server:
        ctx, page = _page(browser, viewport, errors)
        for family, runs in sorted(by_family.items()):
            page.goto(f"{server.url}/why")
            row = page.locator(f"#deviations-table tr[data-family='{family}']")
            hits = sum(int(c.get_attribute("data-hits") or 0) for c in row.locator("td.cell").all())
            assert hits == len(runs), family
            row.locator("td.cell.hit a").first.click()
            _wait_hash(page, "devfam=")
            shown = set(_visible_runs(page))
            assert shown and shown <= runs
        page.goto(f"{server.url}/why")
        page.locator("#violations-table tr[data-violation='input modified'] td.cell.hit a").first.click()
        _wait_hash(page, "viol=")
        assert set(_visible_runs(page)) <= violated and _visible_runs(page)
        ctx.close()
    assert not errors, errors


def _hit_a_cap(rec: dict) -> list[tuple[int, str]]:
    """(session, cap) for every session that reached a cap: the CLI's cap results, the wall-clock kill, a bound."""
    out = []
    for i, s in enumerate(rec.get("sessions") or []):
        sub = s.get("result_subtype")
        if s.get("bound"):
            out.append((i + 1, s["bound"]))
        elif s.get("timed_out"):
            out.append((i + 1, "wall"))
        elif sub in ("error_max_turns", "error_max_budget_usd"):
            out.append((i + 1, "turns" if sub == "error_max_turns" else "cost"))
    return out


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=IDS)
def test_every_run_that_hit_a_cap_is_found_the_resumed_one_too(browser, tmp_path, viewport):
    folder = caps_study()
    table = _table(folder, tmp_path)
    records = _records(folder)
    capped = {rid: _hit_a_cap(rec) for rid, rec in records.items() if _hit_a_cap(rec)}
    assert "ACC-01.A4.r2" in capped, "the caps study's A4 run reaches the turn cap in its first session"
    resumed = table.loc[table["run_id"] == "ACC-01.A4.r2"].iloc[0]
    assert resumed["censored"] == "False" and resumed["censor_reason"] == ""  # the run table alone does not show it
    errors: list[str] = []
    with ViewServer(folder) as server:
        ctx, page = _page(browser, viewport, errors)
        page.goto(f"{server.url}/#cap=any")
        page.wait_for_selector("#runs")
        assert set(_visible_runs(page)) == set(capped)
        page.select_option("#filter-cap", "turns")
        assert set(_visible_runs(page)) == {r for r, h in capped.items() if any(c == "turns" for _, c in h)}
        _wait_hash(page, "cap=turns")
        # The column names the session (chosen in the column chooser if the phone's defaults leave it out).
        page.click("#column-chooser summary")
        box = page.locator("#column-chooser input[data-col='hit_cap']")
        if not box.is_checked():
            box.check()
        cell = page.locator("#runs tr[data-run='ACC-01.A4.r2'] td.col-hit_cap")
        assert cell.is_visible() and cell.inner_text().strip() == "turns (session 1)"
        # The A4 filters: recovery used, self-check of the first session.
        page.goto(f"{server.url}/#recovery=1")
        page.wait_for_selector("#runs")
        assert set(_visible_runs(page)) == set(table.loc[table["recovery_used"] == "True", "run_id"])
        page.goto(f"{server.url}/#sc1=0")
        page.wait_for_selector("#runs")
        assert set(_visible_runs(page)) == set(table.loc[table["selfcheck_first"] == "False", "run_id"])
        # The run page says which session hit which cap, and why the resume was granted.
        page.goto(f"{server.url}/runs/ACC-01.A4.r2")
        assert "session 1 (first session) reached the turn cap" in page.inner_text("#cap-hits")
        assert page.inner_text("#resume-decision") == "resume granted: the first session reached the turn cap"
        boundary = page.inner_text(".boundary")
        assert "resume granted" in boundary and "because the first session reached the turn cap" in boundary
        assert "turn cap" in page.inner_text("#verdict")
        _no_page_scroll_sideways(page)
        page.screenshot(path=str(tmp_path / f"run-capped-{viewport[0]}.png"), full_page=True)
        ctx.close()
    assert not errors, errors


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=IDS)
def test_an_e1_run_says_what_changed(browser, tmp_path, viewport):
    from pilot.scenarios import load_scenario

    folder = simulated_study()
    records = _records(folder)
    rid, rec = next((r, x) for r, x in sorted(records.items()) if x.get("E"))
    name = rec["E_reasons"][0].split("inputs/", 1)[1]
    bundle = Path(load_scenario(SCENARIO).inputs_dir) / name
    after = folder / "workspaces" / rid / "attempt-1" / "workspace" / "inputs" / name
    errors: list[str] = []
    with ViewServer(folder) as server:
        ctx, page = _page(browser, viewport, errors)
        page.goto(f"{server.url}/runs/{rid}")
        page.click("#verdict a[href='#what-changed']")
        change = page.locator(f".change[data-file='{name}']")
        assert change.is_visible()
        assert hashlib.sha256(bundle.read_bytes()).hexdigest() in change.locator(".digest.expected").inner_text()
        assert hashlib.sha256(after.read_bytes()).hexdigest() in change.locator(".digest.actual").inner_text()
        # The simulated defect appends one newline to the input (pilot.defects.modify_input): an empty line added.
        assert after.read_bytes() == bundle.read_bytes() + b"\n"
        assert "+ (an empty line)" in change.locator("pre.diff").inner_text()
        _no_page_scroll_sideways(page)
        page.screenshot(path=str(tmp_path / f"run-e1-{viewport[0]}.png"), full_page=True)
        ctx.close()
    assert not errors, errors


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=IDS)
def test_the_run_table_on_a_laptop_and_a_phone(browser, tmp_path, viewport):
    from pilot import runtable

    folder = models_study()
    table = _table(folder, tmp_path)
    errors: list[str] = []
    with ViewServer(folder) as server:
        ctx, page = _page(browser, viewport, errors, accept_downloads=True)
        page.goto(f"{server.url}/")
        page.wait_for_selector("#runs")
        _no_page_scroll_sideways(page)
        wrap = page.locator("#runs-wrap")
        if viewport[0] >= 1440:  # the default columns fit a laptop: the table does not scroll sideways either
            assert wrap.evaluate("w => w.scrollWidth <= w.clientWidth"), wrap.evaluate(
                "w => [w.scrollWidth, w.clientWidth]"
            )
        page.screenshot(path=str(tmp_path / f"index-{viewport[0]}.png"), full_page=True)
        # Sticky header: scrolled, the header row stays at the top of the table's box.
        wrap.evaluate("w => { w.scrollTop = 200; }")
        page.wait_for_timeout(100)
        top = page.evaluate(
            "() => [document.querySelector('#runs thead th').getBoundingClientRect().top,"
            " document.getElementById('runs-wrap').getBoundingClientRect().top]"
        )
        assert abs(top[0] - top[1]) <= 2, top
        # Search: any part of the id, in any case.
        page.fill("#filter-run", "a3.R1")
        want = {r for r in table["run_id"] if "a3.r1" in r.lower()}
        assert set(_visible_runs(page)) == want and len(want) > 1
        page.fill("#filter-run", "")
        # The column chooser: a column left out stays out after a reload; "defaults" brings it back.
        assert page.locator("#runs th.col-Q").is_visible()  # a default column on both screens
        page.click("#column-chooser summary")
        page.locator("#column-chooser input[data-col='Q']").uncheck()
        assert not page.locator("#runs th.col-Q").is_visible()
        assert not page.locator("#runs td.col-Q").first.is_visible()
        page.reload()
        page.wait_for_selector("#runs")
        assert not page.locator("#runs th.col-Q").is_visible()
        page.click("#column-chooser summary")
        page.click("#columns-default")
        assert page.locator("#runs th.col-Q").is_visible()
        page.keyboard.press("Escape")  # the chooser floats over the table until closed
        assert not page.locator("#column-chooser .chooser-body").is_visible()
        # The sort is in the link: a new tab opened on the address sorts the same way.
        page.select_option("#filter-arm", "A3")
        page.click("#runs th[data-key='Q'] button")
        page.click("#runs th[data-key='Q'] button")
        _wait_hash(page, "dir=desc")
        link = page.url
        assert "sort=Q" in link and "arm=A3" in link
        other = ctx.new_page()
        other.goto(link)
        other.wait_for_selector("#runs")
        order = _visible_runs(other)
        qs = {r: float(q) for r, q in zip(table["run_id"], table["Q"], strict=True) if q}
        assert [qs[r] for r in order if r in qs] == sorted((qs[r] for r in order if r in qs), reverse=True)
        assert set(order) == set(table.loc[table["arm"] == "A3", "run_id"])
        other.close()
        # The CSV of the rows shown: every run-table column, the rows in the order shown, the run table's values.
        with page.expect_download() as dl:
            page.click("#download-csv")
        assert dl.value.suggested_filename.endswith("_SIMULATED.csv")
        rows = list(csv.DictReader(io.StringIO(Path(dl.value.path()).read_text(encoding="utf-8"))))
        assert [r["run_id"] for r in rows] == _visible_runs(page)
        names = [c.name for c in runtable.columns()]
        assert list(rows[0])[: len(names)] == names
        exported = table.set_index("run_id")
        for r in rows:
            for col in ("S", "Q", "D", "E", "cost_usd", "recovery_used", "censor_reason"):
                want = exported.loc[r["run_id"], col]
                got = r[col]
                if want in ("True", "False"):
                    want = want.lower()
                if got and want and col in ("Q", "cost_usd"):
                    assert float(got) == pytest.approx(float(want)), (r["run_id"], col)
                else:
                    assert got == want, (r["run_id"], col)
        # Prev / next follow the list as filtered and sorted.
        first, second = _visible_runs(page)[:2]
        page.click(f"#runs tr[data-run='{first}'] a.run-link")
        page.wait_for_url(f"**/runs/{first}")
        assert page.locator("#prev-next .prev").is_hidden()
        assert page.inner_text("#prev-next .where").startswith(f"1 of {len(order)} in the list you filtered")
        page.click("#prev-next .next")
        page.wait_for_url(f"**/runs/{second}")
        assert page.locator("#prev-next .prev").inner_text() == f"← {first}"
        _no_page_scroll_sideways(page)
        # Oracle criteria are written for people: the pattern's phrases, not its syntax.
        checks = page.inner_text("#oracle tr[data-criterion='memo_names_items'] td.checks")
        assert "“NSF”, “returned” or “dishonored” (or “dishonoured”)" in checks and "dishonou?red" not in checks
        ctx.close()
    assert not errors, errors


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=IDS)
def test_the_static_export_downloads_from_disk_and_keeps_the_pages(browser, tmp_path, viewport):
    folder = simulated_study()
    out = tmp_path / "site"
    export_site(folder, out, workers=1)
    run_id = sorted(p.stem for p in (out / "runs").glob("*.html"))[0]
    errors: list[str] = []
    ctx, page = _page(browser, viewport, errors, accept_downloads=True)
    page.goto((out / "runs" / f"{run_id}.html").as_uri())
    assert "SIMULATED" in page.inner_text("#simulated-banner")
    with sqlite3.connect(f"file:{folder / 'study.sqlite'}?mode=ro", uri=True) as con:
        [(final_no,)] = con.execute(
            "SELECT a.attempt_no FROM runs r JOIN attempts a ON a.attempt_id = r.attempt_id WHERE r.run_id = ?",
            (run_id,),
        )
    final = folder / "workspaces" / run_id / f"attempt-{final_no}" / "workspace" / "outputs"
    for name in ("completion_record.json",):
        with page.expect_download() as dl:
            page.click(f"a.download >> text={name}")
        assert dl.value.suggested_filename == name
        assert Path(dl.value.path()).read_bytes() == (final / name).read_bytes()
        assert page.url.endswith(f"{run_id}.html")  # it downloaded; the page did not open the file in the tab
    # Every page of the export fits the screen and says SIMULATED.
    for rel in ("index.html", "why.html", "overview.html", "scenarios.html", f"scenarios/{SCENARIO}.html"):
        page.goto((out / rel).as_uri())
        assert "SIMULATED" in page.inner_text("#simulated-banner")
        _no_page_scroll_sideways(page)
        page.screenshot(path=str(tmp_path / f"static-{rel.replace('/', '-')}-{viewport[0]}.png"), full_page=True)
    ctx.close()
    assert not errors, errors


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=IDS)
def test_a_scenario_page_shows_every_arm_with_the_sensitivity_models_below(browser, tmp_path, viewport):
    folder = models_study()
    table = _table(folder, tmp_path)
    worker = next(iter(set(table.loc[table["wave"] == "pilot", "model"])))
    errors: list[str] = []
    with ViewServer(folder) as server:
        ctx, page = _page(browser, viewport, errors)
        page.goto(f"{server.url}/scenarios/{SCENARIO}")
        arms = page.eval_on_selector_all(
            "#arms > section.arm", "s => s.map(x => x.dataset.arm + '|' + x.dataset.model)"
        )
        assert arms == [f"{a}|{worker}" for a in sorted(set(table.loc[table["model"] == worker, "arm"]))]
        others = page.eval_on_selector_all("#arms-sensitivity > section.arm", "s => s.map(x => x.dataset.model)")
        assert sorted(others) == sorted(set(table["model"]) - {worker})
        # Every arm of the worker model is on screen side by side on a laptop, one under another on a phone.
        boxes = page.eval_on_selector_all(
            "#arms > section.arm", "s => s.map(x => { const r = x.getBoundingClientRect(); return [r.left, r.right]; })"
        )
        assert all(right <= viewport[0] for _, right in boxes)
        if viewport[0] >= 1440:
            assert len({round(left) for left, _ in boxes}) == len(boxes)  # side by side
        _no_page_scroll_sideways(page)
        page.screenshot(path=str(tmp_path / f"scenario-{viewport[0]}.png"), full_page=True)
        ctx.close()
    assert not errors, errors


def _proxy_tokens(folder: Path, run_id: str) -> int:
    """Every token of a run's final attempt, summed here from the proxy's own file."""
    with sqlite3.connect(f"file:{folder / 'study.sqlite'}?mode=ro", uri=True) as con:
        [(n,)] = con.execute(
            "SELECT a.attempt_no FROM runs r JOIN attempts a ON a.attempt_id = r.attempt_id WHERE r.run_id = ?",
            (run_id,),
        )
    total = 0
    for f in (folder / "workspaces" / run_id / f"attempt-{n}" / "record" / "proxy").glob("*/proxy_usage.jsonl"):
        for line in f.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            total += sum(
                row.get(k, 0)
                for k in ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
            )
    return total


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=IDS)
def test_tokens_per_run_and_per_arm_come_from_the_proxy_record(browser, tmp_path, viewport):
    from view_support import rehearsal_study

    folder = rehearsal_study()
    records = _records(folder)
    want = {rid: _proxy_tokens(folder, rid) for rid in records}
    assert all(want.values()), want
    errors: list[str] = []
    with ViewServer(folder) as server:
        ctx, page = _page(browser, viewport, errors)
        page.goto(f"{server.url}/")
        page.wait_for_selector("#runs")
        assert "REHEARSAL" in page.inner_text("#simulated-banner")
        for rid, n in want.items():
            cell = page.locator(f"#runs tr[data-run='{rid}'] td.col-tokens")
            assert cell.get_attribute("data-sort") == str(n)
        page.goto(f"{server.url}/why#tokens")
        for rid, n in want.items():
            arm = rid.split(".")[1]
            row = page.locator(f"#tokens-table tr[data-col^='{arm}'] td.all-tokens")
            assert row.get_attribute("data-value") == str(n)
        _no_page_scroll_sideways(page)
        # The A4 run was resumed: its page counts the tokens of each session and of all its requests.
        a4 = next(r for r in want if ".A4." in r)
        page.goto(f"{server.url}/runs/{a4}")
        total = page.locator("#tokens-by-session tr.total td")
        cells = [int(total.nth(i).inner_text()) for i in range(1, 5)]
        assert sum(cells) == want[a4]
        sessions_shown = page.eval_on_selector_all(
            "#tokens-by-session tbody tr td:first-child", "t => t.map(x => x.textContent)"
        )
        assert "session 1 (first session)" in sessions_shown and "session 2 (recovery resume)" in sessions_shown
        assert page.inner_text("#resume-decision").startswith("resume granted: the first session ended in an error")
        _no_page_scroll_sideways(page)
        page.screenshot(path=str(tmp_path / f"run-tokens-{viewport[0]}.png"), full_page=True)
        ctx.close()
    assert not errors, errors
