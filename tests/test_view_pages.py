"""The viewer's overview pages and columns against the study's own run table (``runs.csv``, read with pandas).

Every expected number here is computed from the exported run table (or, for
a run's charge, from the store's attempts by a query written here), never
by the viewer's functions.
"""

from __future__ import annotations

import html
import json
import re
import sqlite3
from pathlib import Path

import pandas as pd
import pytest
from view_support import copy_study, models_study, run_table, simulated_study

from pilot.view.app import create_app


@pytest.fixture(scope="module")
def study() -> Path:
    return simulated_study()


@pytest.fixture(scope="module")
def client(study):
    return create_app(study).test_client()


def _read_table(path: Path) -> pd.DataFrame:
    t = pd.read_csv(path, dtype=str, keep_default_na=False)
    t["accepted"] = t["S"] == "True"
    t["scored"] = t["S"].isin(["True", "False"])
    return t


@pytest.fixture(scope="module")
def table(study, tmp_path_factory) -> pd.DataFrame:
    return _read_table(run_table(study, tmp_path_factory.mktemp("table") / "runs.csv"))


@pytest.fixture(scope="module")
def models() -> Path:
    return models_study()


@pytest.fixture(scope="module")
def mclient(models):
    return create_app(models).test_client()


@pytest.fixture(scope="module")
def mtable(models, tmp_path_factory) -> pd.DataFrame:
    return _read_table(run_table(models, tmp_path_factory.mktemp("mtable") / "runs.csv"))


def _worker(table: pd.DataFrame) -> str:
    models = set(table.loc[table["wave"] == "pilot", "model"])
    assert len(models) == 1, models
    return models.pop()


def _rate(k: int, n: int) -> str:
    return f"{k}/{n} ({round(100 * k / n)}%)" if n else f"{k}/{n}"


def _row(page: str, attrs: str) -> str:
    m = re.search(rf"<tr {re.escape(attrs)}>(.*?)</tr>", page, re.S)
    assert m, f"no row <tr {attrs}>"
    return m.group(1)


def test_index_counts_each_arm_per_model_as_rates(mclient, mtable):
    client, table = mclient, mtable
    page = client.get("/").get_data(as_text=True)
    worker = _worker(table)
    groups = table.groupby(["arm", "model"]).agg(
        runs=("run_id", "size"), accepted=("accepted", "sum"), scored=("scored", "sum")
    )
    assert len(groups) == 4  # A0 and A3 of the worker model, A3 under two other models apart
    assert (table[(table["arm"] == "A3")]["model"] != worker).sum() == 4
    for (arm, model), g in groups.iterrows():
        row = _row(page, f'data-arm="{arm}" data-model="{model}"')
        assert f'<td class="n-runs">{g.runs}</td>' in row
        assert f'<td class="rate">{_rate(int(g.accepted), int(g.scored))}</td>' in row
    # The model is a column and a filter of the run list.
    for model in table["model"].unique():
        assert f'<option value="{model}">{model}</option>' in page
    for _, r in table.iterrows():
        assert f'data-run="{r.run_id}" data-arm="{r.arm}" data-model="{r.model}"' in page


def test_index_columns_are_named_for_readers_and_explained(client):
    page = client.get("/").get_data(as_text=True)
    heads = re.findall(r"<th data-col=[^>]*><button type=\"button\">([^<]*)</button>", page)
    assert "agent cost (reported)" in heads and "charged" in heads and "tool calls" in heads and "model" in heads
    assert not [h for h in heads if "_" in h], heads  # no cost_usd, tool_calls, wall_s
    legend = re.search(r'<section id="legend".*?</section>', page, re.S).group(0)
    assert "orange bar" in legend and "deviation" in legend  # the row marker of a run with deviations
    assert "‡" in legend and "charged, not reported" in legend


def test_charged_cost_beside_reported_cost(client, table):
    page = client.get("/").get_data(as_text=True)
    assert (table["attempts"] == "1").all()  # one attempt each: the run table's charged_usd is the run's charge
    for _, r in table.iterrows():
        m = re.search(
            rf'data-run="{re.escape(r.run_id)}".*?<td data-sort="[^"]*" class="col-cost_usd">\s*(\S+)\s*</td>\s*'
            r'<td data-sort="[^"]*" class="col-charge_usd">\s*(\S+?)\s*</td>',
            page,
            re.S,
        )
        assert m, r.run_id
        assert m.group(1) == f"${float(r.cost_usd):,.2f}"
        assert m.group(2) == f"${float(r.charged_usd):,.2f}"


def test_a_run_without_a_reported_cost_shows_its_reservation_as_charged(study, tmp_path, table):
    """A wall-capped run whose client never reported: "–" reported, its reservation charged and marked."""
    copy = copy_study(study, tmp_path / "viewsim")
    run_id = "ACC-01.A1.r1"
    conn = sqlite3.connect(copy / "study.sqlite")
    with conn:
        reserved = conn.execute("SELECT reserved_micro FROM attempts WHERE run_id = ?", (run_id,)).fetchone()[0]
        conn.execute(
            "UPDATE attempts SET cost_usd = NULL, charge_basis = 'reservation', charged_micro = reserved_micro, "
            "outcome = 'capped' WHERE run_id = ?",
            (run_id,),
        )
        rec = json.loads(conn.execute("SELECT record_json FROM runs WHERE run_id = ?", (run_id,)).fetchone()[0])
        rec.update(cost_usd=None, status="capped", censored=True, censor_reason="wall", cost_complete=False)
        conn.execute(
            "UPDATE runs SET cost_usd = NULL, status = 'capped', censored = 1, censor_reason = 'wall', record_json = ? "
            "WHERE run_id = ?",
            (json.dumps(rec), run_id),
        )
    conn.close()
    client = create_app(copy).test_client()
    expected = f"${reserved / 1_000_000:,.2f}"
    page = client.get("/").get_data(as_text=True)
    m = re.search(
        (
            rf'data-run="{run_id}".*?class="col-cost_usd">\s*(\S+)\s*</td>\s*<td data-sort="[^"]*" '
            r'class="col-charge_usd">\s*(.*?)</td>'
        ),
        page,
        re.S,
    )
    assert m.group(1) == "–"
    assert m.group(2).startswith(expected) and "‡" in m.group(2)
    card = re.search(
        rf'<article [^>]*data-run="{run_id}">(.*?)</article>',
        client.get("/scenarios/ACC-01").get_data(as_text=True),
        re.S,
    )
    assert f"– reported · {expected} charged" in card.group(1) and "‡" in card.group(1)
    run_page = client.get(f"/runs/{run_id}").get_data(as_text=True)
    assert re.search(rf'id="run-charge">\${reserved / 1_000_000:,.4f}<span class="marker"', run_page)
    assert "charged, not reported" in run_page


def test_scenario_list(mclient, mtable):
    client, table = mclient, mtable
    resp = client.get("/scenarios")
    assert resp.status_code == 200
    page = resp.get_data(as_text=True)
    worker = _worker(table)
    for sid, g in table.groupby("scenario"):
        mine = g[g["model"] == worker]
        row = _row(page, f'data-scenario="{sid}"')
        assert f'href="/scenarios/{sid}"' in row
        assert f'<td class="rate">{_rate(int(mine.accepted.sum()), int(mine.scored.sum()))}</td>' in row
        assert f'<td class="n-other">{len(g) - len(mine)}</td>' in row
        assert f'href="/#scenario={sid}&amp;model={worker}">{len(mine)}</a>' in row


def test_scenario_by_arm_overview_links_each_cell_to_its_runs(mclient, mtable):
    client, table = mclient, mtable
    page = client.get("/overview").get_data(as_text=True)
    worker = _worker(table)
    mine = table[table["model"] == worker]
    cells = mine.groupby(["scenario", "arm"]).agg(
        accepted=("accepted", "sum"), scored=("scored", "sum"), runs=("run_id", "size")
    )
    for (sid, arm), c in cells.iterrows():
        m = re.search(
            (
                rf'<tr data-scenario="{sid}">.*?<td data-arm="{arm}" class="cell[^"]*"><a '
                r'href="([^"]+)"[^>]*>([^<]+)</a></td>'
            ),
            page,
            re.S,
        )
        assert m, (sid, arm)
        assert html.unescape(m.group(1)) == f"/#scenario={sid}&arm={arm}&model={worker}"
        assert m.group(2) == f"{int(c.accepted)}/{int(c.scored)}"
    for arm, g in mine.groupby("arm"):
        assert f'<td data-arm="{arm}" class="total">{_rate(int(g.accepted.sum()), int(g.scored.sum()))}</td>' in page
    assert f"{len(table) - len(mine)} run(s) of other models" in page


def test_scenario_page_puts_sensitivity_runs_apart_with_rates(mclient, mtable):
    client, table = mclient, mtable
    page = client.get("/scenarios/ACC-01").get_data(as_text=True)
    worker = _worker(table)
    for (arm, model), g in table.groupby(["arm", "model"]):
        sec = re.search(rf'<section class="arm[^"]*" data-arm="{arm}" data-model="{model}">(.*?)</section>', page, re.S)
        assert sec, (arm, model)
        assert ("model sensitivity" in sec.group(1)) == (model != worker)
        assert f'accepted <span class="rate">{_rate(int(g.accepted.sum()), int(g.scored.sum()))}</span>' in sec.group(1)
        assert sec.group(1).count("<article") == len(g)
    assert len(table.groupby(["arm", "model"])) == 4


def test_card_says_why_e_is_one_and_groups_repeated_reasons(client, table, study):
    page = client.get("/scenarios/ACC-01").get_data(as_text=True)

    def card(run_id: str) -> str:
        return re.search(rf'<article [^>]*data-run="{re.escape(run_id)}">(.*?)</article>', page, re.S).group(1)

    violated = table[table["E"] == "True"]
    assert len(violated) >= 1
    for _, r in violated.iterrows():
        c = card(r.run_id)
        assert "E = 1 (critical violation): " + html.escape(r.E_reasons) in c
        if r.criteria_passed == r.criteria_total:
            assert "every criterion passed" not in c and "D requires the inputs untouched" in c
    # A run whose first check failed: each repeated reason appears once, with its count.
    conn = sqlite3.connect(f"file:{study / 'study.sqlite'}?mode=ro", uri=True)
    try:
        crit = dict(conn.execute("SELECT run_id, criteria_json FROM evaluations"))
    finally:
        conn.close()
    checked = 0
    for _, r in table.iterrows():
        failed = [c for c in json.loads(crit[r.run_id]) if not c["passed"]]
        reasons = pd.Series([c["reason"] for c in failed]).value_counts()
        repeated = reasons[reasons > 1]
        c = card(r.run_id)
        for reason, n in repeated.items():
            assert c.count(html.escape(reason)) == 1, (r.run_id, reason)
            assert f'{html.escape(reason)} <span class="times">×{n}</span>' in c
            checked += 1
    assert checked, "the test study has no run with a repeated failure reason"


def test_conversation_marks_turns_collapses_repeats_and_shows_the_a4_boundary(client, table, study):
    recovered = table[(table["arm"] == "A4") & (table["recovery_used"] == "True")]
    assert len(recovered) >= 1, "the test study has no A4 run that used its resume"
    run_id = recovered.iloc[0].run_id
    page = client.get(f"/runs/{run_id}").get_data(as_text=True)
    rec = json.loads(next((study / "workspaces" / run_id).glob("attempt-*/run_record.json")).read_text())
    # The boundary names the self-check verdict that led to the resume.
    verdict = "passed" if rec["selfcheck_first"] else "failed"
    assert re.search(
        rf'Session boundary: recovery resume</b>\s*· self-check after session 1: <b class="{verdict}">{verdict}</b>\s*'
        r"→ resume <b>granted</b>",
        page,
    )
    # Each session's own cost: the resume's is the runner's count, not the CLI's cumulative report.
    first, resume = rec["sessions"][0], rec["sessions"][1]
    costs = re.findall(r'this session\'s cost <b class="session-cost">\$([0-9.]+)</b>', page)
    assert costs == [f"{first['reported_cost_usd']:.4f}", f"{rec['recovery_cost_usd']:.4f}"]
    assert f"the CLI reported ${resume['reported_cost_usd']:.4f}, the total of the sessions so far" in page
    # No raw session UUID as a heading: ids are shortened, the whole one kept in a title.
    sid = first["session_id"]
    assert f">{sid}<" not in page and f'title="{sid}">{sid[:8]}…<' in page
    # Turns are numbered, and the stream's identical consecutive steps are collapsed.
    transcript = next((study / "workspaces" / run_id).glob("attempt-*/transcript.jsonl")).read_text().splitlines()
    events = [json.loads(x) for x in transcript if x.strip()]
    turns = [e for e in events if e["type"] == "assistant"]
    first_session_turns = len({e["message"]["id"] for e in turns if e["message"]["id"].split("_")[3] == "0"})
    assert f'<span class="turn">turn {first_session_turns}</span>' in page
    assert f'<span class="turn">turn {first_session_turns + 1}</span>' not in page.split("Session boundary")[0]
    assert re.search(r'<span class="times" title="this step (\d+) times in a row">×\1</span>', page)
    assert '<details class="repeats">' in page
