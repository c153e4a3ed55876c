"""The SQLite run store: WAL, every attempt kept, records split into runs, evaluations and judge scores."""

from __future__ import annotations

import json

import pytest

from pilot.executors.base import OUTCOME_FILE, AttemptOutcome
from pilot.store import Store, StoreError
from schedule_support import make_store


def _record(cell):
    return {
        "scenario": cell.scenario, "arm": cell.arm, "status": "completed", "censored": False, "wall_s": 12.5,
        "D": True, "E": False, "E_reasons": [], "criteria_passed": 7, "criteria_total": 8,
        "criteria": [{"id": "c1", "kind": "formula", "required": True, "passed": True, "reason": ""}],
        "judges": [
            {"judge_id": "J1", "model": "claude-opus-5-5", "criterion_scores": {"c1": 3}, "accept": True, "score_0_100": 75.0, "cost_usd": 0.04, "error": None},
            {"judge_id": "J2", "model": "claude-sonnet-5-5", "criterion_scores": {}, "accept": None, "score_0_100": None, "cost_usd": 0.0, "error": "schema"},
        ],
    }


def test_store_is_wal_and_refuses_to_overwrite_a_study(tmp_path):
    st = make_store(tmp_path)
    assert st.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    with pytest.raises(StoreError, match="already exists"):
        make_store(tmp_path)
    with pytest.raises(StoreError, match="create the study first"):
        Store.open(tmp_path / "nope")
    info = st.study()
    assert info.seed == 11 and info.scenarios and info.freeze_manifest is None
    st.set_freeze_manifest({"a": "1"})
    st.set_freeze_manifest({"a": "2"})  # the first manifest stays
    assert st.study().freeze_manifest == {"a": "1"}


def test_attempt_lifecycle_keeps_every_attempt_and_splits_the_record(tmp_path):
    st = make_store(tmp_path)
    cell = st.cells("pilot")[0]
    a1 = st.begin_attempt(cell, "linux-1", "simulated", tmp_path / "ws")
    assert a1.attempt_no == 1 and a1.workspace == tmp_path / "ws" / cell.run_id / "attempt-1"
    with pytest.raises(StoreError, match="not waiting"):
        st.begin_attempt(cell, "linux-2", "simulated", tmp_path / "ws")
    assert st.finish_attempt(a1.attempt_id, AttemptOutcome(infra_error="transfer failed"), max_infra_attempts=3) == "waiting"
    a2 = st.begin_attempt(cell, "linux-2", "simulated", tmp_path / "ws")
    assert a2.attempt_no == 2
    out = AttemptOutcome(record=_record(cell), cost_usd=1.25, judge_cost_usd=0.04)
    assert st.finish_attempt(a2.attempt_id, out, max_infra_attempts=3) == "done"
    with pytest.raises(StoreError, match="not running"):
        st.finish_attempt(a2.attempt_id, out, max_infra_attempts=3)

    atts = st.attempts(cell.run_id)
    assert [(a["attempt_no"], a["node"], a["outcome"]) for a in atts] == [(1, "linux-1", "infra_error"), (2, "linux-2", "completed")]
    assert atts[0]["error"] == "transfer failed"
    run = st.runs()[0]
    assert run["run_id"] == cell.run_id and run["attempt_id"] == a2.attempt_id and run["cost_usd"] == 1.25
    assert json.loads(run["record_json"])["criteria_total"] == 8
    ev = dict(st.conn.execute("SELECT * FROM evaluations").fetchone())
    assert (ev["D"], ev["E"], ev["criteria_passed"], ev["criteria_total"]) == (1, 0, 7, 8)
    js = [dict(r) for r in st.conn.execute("SELECT * FROM judge_scores ORDER BY judge_id")]
    assert [(j["judge_id"], j["score_0_100"], j["accept"], j["error"]) for j in js] == [("J1", 75.0, 1, None), ("J2", None, None, "schema")]
    row = next(r for r in st.cell_rows() if r["run_id"] == cell.run_id)
    assert (row["status"], row["node"], row["attempts"], row["infra_attempts"]) == ("done", "linux-2", 2, 1)
    assert st.balance().spent_usd == pytest.approx(1.29) and st.balance().reserved_usd == 0
    assert st.run_costs("pilot") == [pytest.approx(1.29)]
    assert st.audit() == []


def test_recover_interrupted_charges_reported_cost_or_whole_reservation(tmp_path):
    st = make_store(tmp_path)
    c1, c2 = st.cells("pilot")[:2]
    a1 = st.begin_attempt(c1, "linux-1", "simulated", tmp_path / "ws")
    a2 = st.begin_attempt(c2, "linux-2", "simulated", tmp_path / "ws")
    a2.workspace.mkdir(parents=True)
    (a2.workspace / OUTCOME_FILE).write_text(json.dumps(AttemptOutcome(record={}, cost_usd=0.7, judge_cost_usd=0.1).to_dict()))
    assert st.balance().reserved_usd == pytest.approx(c1.reserve_usd + c2.reserve_usd)

    reopened = Store.open(st.folder)  # as a restarted scheduler would
    rec = {r["run_id"]: r["charged_usd"] for r in reopened.recover_interrupted()}
    assert rec == {c1.run_id: pytest.approx(c1.reserve_usd), c2.run_id: pytest.approx(0.8)}
    assert {a["outcome"] for a in reopened.attempts()} == {"interrupted"}
    assert all("scheduler stopped" in a["error"] for a in reopened.attempts())
    assert reopened.counts("pilot")["in_flight"] == 0
    assert reopened.balance().reserved_usd == 0
    assert reopened.balance().spent_usd == pytest.approx(c1.reserve_usd + 0.8)
    assert reopened.audit() == []
    # the run resumes under the same id with the next attempt number
    assert reopened.begin_attempt(c1, "linux-1", "simulated", tmp_path / "ws").attempt_no == 2
