"""The SQLite run store: WAL, every attempt kept, records split into runs, evaluations and judge scores."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from schedule_support import make_store

from pilot.attempt import OUTCOME_FILE, AttemptOutcome, launch_mark
from pilot.executors.base import execute_attempt
from pilot.ledger import to_micro
from pilot.store import STORE_FILE, Store, StoreError


def _record(cell):
    return {
        "scenario": cell.scenario,
        "arm": cell.arm,
        "status": "completed",
        "censored": False,
        "wall_s": 12.5,
        "D": True,
        "E": False,
        "E_reasons": [],
        "criteria_passed": 7,
        "criteria_total": 8,
        "criteria": [{"id": "c1", "kind": "formula", "required": True, "passed": True, "reason": ""}],
        "judges": [
            {
                "judge_id": "J1",
                "model": "claude-opus-5-5",
                "criterion_scores": {"c1": 3},
                "accept": True,
                "score_0_100": 75.0,
                "cost_usd": 0.04,
                "error": None,
            },
            {
                "judge_id": "J2",
                "model": "claude-sonnet-5-5",
                "criterion_scores": {},
                "accept": None,
                "score_0_100": None,
                "cost_usd": 0.0,
                "error": "schema",
            },
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
    assert (
        st.finish_attempt(a1.attempt_id, AttemptOutcome(infra_error="transfer failed"), max_infra_attempts=3)
        == "waiting"
    )
    a2 = st.begin_attempt(cell, "linux-2", "simulated", tmp_path / "ws")
    assert a2.attempt_no == 2
    out = AttemptOutcome(record=_record(cell), cost_usd=1.25, judge_cost_usd=0.04)
    assert st.finish_attempt(a2.attempt_id, out, max_infra_attempts=3) == "done"
    with pytest.raises(StoreError, match="not running"):
        st.finish_attempt(a2.attempt_id, out, max_infra_attempts=3)

    atts = st.attempts(cell.run_id)
    assert [(a["attempt_no"], a["node"], a["outcome"]) for a in atts] == [
        (1, "linux-1", "infra_error"),
        (2, "linux-2", "completed"),
    ]
    assert atts[0]["error"] == "transfer failed"
    run = st.runs()[0]
    assert run["run_id"] == cell.run_id and run["attempt_id"] == a2.attempt_id and run["cost_usd"] == 1.25
    assert json.loads(run["record_json"])["criteria_total"] == 8
    ev = dict(st.conn.execute("SELECT * FROM evaluations").fetchone())
    assert (ev["D"], ev["E"], ev["criteria_passed"], ev["criteria_total"]) == (1, 0, 7, 8)
    js = [dict(r) for r in st.conn.execute("SELECT * FROM judge_scores ORDER BY judge_id")]
    assert [(j["judge_id"], j["score_0_100"], j["accept"], j["error"]) for j in js] == [
        ("J1", 75.0, 1, None),
        ("J2", None, None, "schema"),
    ]
    row = next(r for r in st.cell_rows() if r["run_id"] == cell.run_id)
    assert (row["status"], row["node"], row["attempts"], row["infra_attempts"]) == ("done", "linux-2", 2, 1)
    assert st.balance().spent_usd == pytest.approx(1.29) and st.balance().reserved_usd == 0
    assert st.run_costs("pilot") == [pytest.approx(1.29)]
    assert st.audit() == []


def test_the_backends_used_are_those_of_the_attempts_sorted_and_once_each(tmp_path):
    st = make_store(tmp_path)
    assert st.backends_used() == []  # no attempt yet
    c1, c2, c3 = st.cells("pilot")[:3]
    for cell, backend in ((c1, "simulated"), (c2, "claude-code"), (c3, "simulated")):
        st.begin_attempt(cell, "linux-1", backend, tmp_path / "ws")
    assert st.backends_used() == ["claude-code", "simulated"]


def test_recover_interrupted_charges_reported_cost_whole_reservation_or_nothing(tmp_path):
    st = make_store(tmp_path)
    c1, c2, c3 = st.cells("pilot")[:3]
    a1 = st.begin_attempt(c1, "linux-1", "simulated", tmp_path / "ws")
    a1.workspace.mkdir(parents=True)
    launch_mark(a1.workspace).write_text("1 1\n")  # launched, then nothing: spend unknown
    a2 = st.begin_attempt(c2, "linux-2", "simulated", tmp_path / "ws")
    a2.workspace.mkdir(parents=True)
    launch_mark(a2.workspace).write_text("1 1\n")
    (a2.workspace / OUTCOME_FILE).write_text(
        json.dumps(AttemptOutcome(record={}, cost_usd=0.7, judge_cost_usd=0.1).to_dict())
    )
    st.begin_attempt(c3, "linux-1", "simulated", tmp_path / "ws")  # reserved, never launched
    assert st.balance().reserved_usd == pytest.approx(c1.reserve_usd + c2.reserve_usd + c3.reserve_usd)

    reopened = Store.open(st.folder)  # as a restarted scheduler would
    rec = {r["run_id"]: (r["charged_usd"], r["charge_basis"]) for r in reopened.recover_interrupted()}
    assert rec == {
        c1.run_id: (c1.reserve_usd, "reservation"),
        c2.run_id: (0.8, "reported"),
        c3.run_id: (0.0, "released"),
    }
    assert {a["outcome"] for a in reopened.attempts()} == {"interrupted"}
    assert all("scheduler stopped" in a["error"] for a in reopened.attempts())
    assert reopened.counts("pilot")["in_flight"] == 0
    assert reopened.balance().reserved_usd == 0
    assert to_micro(reopened.balance().spent_usd) == to_micro(c1.reserve_usd) + to_micro(0.8)
    notes = [r[0] for r in reopened.conn.execute("SELECT note FROM ledger WHERE kind = 'settle' ORDER BY entry_id")]
    assert any("never launched" in n for n in notes) and any("cost unknown" in n for n in notes)
    assert reopened.audit() == []
    # the run resumes under the same id with the next attempt number, and no interruption counts toward its limit
    assert reopened.begin_attempt(c1, "linux-1", "simulated", tmp_path / "ws").attempt_no == 2
    assert {r["infra_attempts"] for r in reopened.cell_rows()} == {0}


def test_an_attempt_that_never_launched_costs_nothing(tmp_path):
    st = make_store(tmp_path)
    cell = st.cells("pilot")[0]
    a = st.begin_attempt(cell, "linux-1", "simulated", tmp_path / "ws")
    out = execute_attempt("pilot.simulated.fake_runs:no_such_function", cell, str(a.workspace), "linux-1", "simulated")
    assert not out.launched and out.infra_error.startswith("never launched")
    assert st.finish_attempt(a.attempt_id, out, max_infra_attempts=3) == "waiting"
    att = st.attempts(cell.run_id)[0]
    assert (att["charged_micro"], att["charge_basis"]) == (0, "released")
    assert st.balance().spent_usd == 0 and st.balance().reserved_usd == 0 and st.audit() == []


def test_interrupted_create_leaves_no_study_and_a_damaged_store_is_named(tmp_path):
    folder = tmp_path / "s"
    folder.mkdir()
    # what a create killed before its final link leaves behind: a partial file of a dead process
    (folder / f"{STORE_FILE}.partial-999999999").write_bytes(b"half")
    with pytest.raises(StoreError, match="create the study first"):
        Store.open(folder)
    st = make_store(tmp_path, name="s")
    assert not list(folder.glob("*.partial-*")) and st.counts("pilot")["waiting"] == 50
    st.close()
    db = folder / STORE_FILE
    data = db.read_bytes()
    db.write_bytes(data[: len(data) // 3])  # truncated
    with pytest.raises(
        StoreError, match=r"study.sqlite: .*(truncated or corrupted|no study|no cells).*restore it from a backup"
    ):
        Store.open(folder)
    db.write_bytes(b"\0" * 4096)  # overwritten
    with pytest.raises(StoreError, match=r"study.sqlite: .*restore it from a backup"):
        Store.open(folder)
    db.write_bytes(b"")
    with pytest.raises(StoreError, match=r"study.sqlite: the study store is empty"):
        Store.open(folder)


def test_retry_reopens_failed_runs_keeping_their_history(tmp_path):
    st = make_store(tmp_path)
    cell = st.cells("pilot")[0]
    for _ in range(2):
        a = st.begin_attempt(cell, "linux-1", "simulated", tmp_path / "ws")
        st.finish_attempt(a.attempt_id, AttemptOutcome(infra_error="boom", cost_usd=0.0), max_infra_attempts=2)
    assert st.counts("pilot")["failed"] == 1
    assert st.failures("pilot")[0]["error"] == "boom"
    with pytest.raises(StoreError, match="not failed"):
        st.reopen([st.cells("pilot")[1].run_id])
    with pytest.raises(StoreError, match="no run 'nope'"):
        st.reopen(["nope"])
    assert st.reopen() == [cell.run_id]
    assert st.counts("pilot")["failed"] == 0
    a3 = st.begin_attempt(cell, "linux-1", "simulated", tmp_path / "ws")
    assert a3.attempt_no == 3 and len(st.attempts(cell.run_id)) == 3
    assert [e["run_id"] for e in st.events("reopen")] == [cell.run_id]


def test_real_attempts_settle_on_the_metered_cost_and_c_bar_follows_it(tmp_path):
    """The envelope is charged the proxy's metered cost (plus judges); C stays the client's report."""
    st = make_store(tmp_path)
    c1, c2, c3 = st.cells("pilot")[:3]
    outs = {
        c1.run_id: AttemptOutcome(record=_record(c1), cost_usd=1.25, judge_cost_usd=0.04, metered_cost_usd="1.3125017"),
        c2.run_id: AttemptOutcome(record=_record(c2), cost_usd=0.5, judge_cost_usd=0.0, metered_cost_usd="0.4999995"),
        # a session killed at the wall limit: no reported cost, but the proxy knows what it spent
        c3.run_id: AttemptOutcome(record=_record(c3), cost_usd=None, judge_cost_usd=0.1, metered_cost_usd="2.0000004"),
    }
    for cell in (c1, c2, c3):
        a = st.begin_attempt(cell, "linux-1", "claude-code", tmp_path / "ws")
        st.finish_attempt(a.attempt_id, outs[cell.run_id], max_infra_attempts=3)
    metered_micro = [
        to_micro(Decimal("1.3125017") + Decimal("0.04")),
        to_micro(Decimal("0.4999995")),
        to_micro(Decimal("2.0000004") + Decimal("0.1")),
    ]
    assert metered_micro == [1_352_502, 500_000, 2_100_000]
    reported_micro = to_micro(1.25 + 0.04) + to_micro(0.5)
    charged = {a["run_id"]: (a["charged_micro"], a["charge_basis"]) for a in st.attempts()}
    assert [charged[c.run_id] for c in (c1, c2, c3)] == [(m, "metered") for m in metered_micro]
    spent = st.conn.execute("SELECT spent_micro, reserved_micro FROM ledger_balance").fetchone()
    assert tuple(spent) == (sum(metered_micro), 0) and sum(metered_micro[:2]) != reported_micro
    assert to_micro(st.balance().spent_usd) == sum(metered_micro)
    # C, the run table's cost, stays the client's report (None where it reported none)
    assert {r["run_id"]: r["cost_usd"] for r in st.runs()} == {c1.run_id: 1.25, c2.run_id: 0.5, c3.run_id: None}
    # c-bar is a projection of envelope spend, so it reads the metered charges
    charges = st.run_charges("pilot")
    assert sorted(m for m, _ in charges) == sorted(metered_micro) and not any(reserved for _, reserved in charges)
    notes = [r[0] for r in st.conn.execute("SELECT note FROM ledger WHERE kind = 'settle'")]
    assert all("charged the metered cost" in n for n in notes)
    assert st.audit() == []


def test_simulated_attempts_without_a_proxy_settle_on_the_reported_cost(tmp_path):
    st = make_store(tmp_path)
    cell = st.cells("pilot")[0]
    a = st.begin_attempt(cell, "linux-1", "simulated", tmp_path / "ws")
    st.finish_attempt(
        a.attempt_id, AttemptOutcome(record=_record(cell), cost_usd=1.25, judge_cost_usd=0.04), max_infra_attempts=3
    )
    att = st.attempts(cell.run_id)[0]
    assert (att["charged_micro"], att["charge_basis"]) == (1_290_000, "reported")


def test_outcome_refuses_a_bad_metered_cost_and_an_interrupted_one_settles_on_it(tmp_path):
    for bad in ("-0.1", "NaN", "abc", "inf"):
        with pytest.raises(ValueError, match="metered_cost_usd"):
            AttemptOutcome(record={}, cost_usd=0.1, metered_cost_usd=bad)
    st = make_store(tmp_path)
    cell = st.cells("pilot")[0]
    a = st.begin_attempt(cell, "linux-1", "claude-code", tmp_path / "ws")
    a.workspace.mkdir(parents=True)
    launch_mark(a.workspace).write_text("1 1\n")
    (a.workspace / OUTCOME_FILE).write_text(
        json.dumps(AttemptOutcome(record={}, cost_usd=0.7, judge_cost_usd=0.1, metered_cost_usd="0.65").to_dict())
    )
    rec = Store.open(st.folder).recover_interrupted()
    assert [(r["charged_usd"], r["charge_basis"]) for r in rec] == [(0.75, "metered")]


def test_a_store_from_before_the_metered_basis_accepts_it(tmp_path):
    st = make_store(tmp_path)
    sql = st.conn.execute("SELECT sql FROM sqlite_master WHERE name = 'attempts'").fetchone()[0]
    st.conn.execute("PRAGMA writable_schema = ON")
    st.conn.execute(
        "UPDATE sqlite_master SET sql = ? WHERE name = 'attempts'",
        (sql.replace("'reported', 'metered', 'reservation'", "'reported', 'reservation'"),),
    )
    v = st.conn.execute("PRAGMA schema_version").fetchone()[0]
    st.conn.execute(f"PRAGMA schema_version = {v + 1}")
    st.conn.execute("PRAGMA writable_schema = OFF")
    st.conn.commit()
    st.conn.close()
    reopened = Store.open(st.folder)
    assert "'metered'" in reopened.conn.execute("SELECT sql FROM sqlite_master WHERE name = 'attempts'").fetchone()[0]
    cell = reopened.cells("pilot")[0]
    a = reopened.begin_attempt(cell, "linux-1", "claude-code", tmp_path / "ws")
    reopened.finish_attempt(
        a.attempt_id, AttemptOutcome(record=_record(cell), cost_usd=1.0, metered_cost_usd="0.9"), max_infra_attempts=3
    )
    assert reopened.attempts(cell.run_id)[0]["charge_basis"] == "metered"
    assert reopened.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
