"""The envelope: no reservation takes spent plus reserved over it, whatever the concurrency."""

from __future__ import annotations

import multiprocessing as mp
import threading
from pathlib import Path

import pytest
from schedule_support import make_store

from pilot import ledger
from pilot.attempt import AttemptOutcome
from pilot.store import Store


def _grab(folder: str, run_ids: list[str], barrier, results) -> None:
    """In a separate process: open the store and try to start an attempt for each run."""
    st = Store.open(Path(folder))
    cells = {c.run_id: c for c in st.cells("pilot")}
    barrier.wait()
    got = 0
    for rid in run_ids:
        if st.begin_attempt(cells[rid], "n", "simulated", Path(folder) / "ws") is not None:
            got += 1
    results.put(got)
    st.close()


def test_concurrent_processes_never_overdraw_the_envelope(tmp_path):
    # 50 cells of 4.30 or 6.30 dollars each, 6 processes racing on an envelope of 40 dollars
    st = make_store(tmp_path, envelope=40.0)
    cells = st.cells("pilot")
    ctx = mp.get_context("fork")
    barrier, results = ctx.Barrier(6), ctx.Queue()
    chunks = [[c.run_id for c in cells[k::6]] for k in range(6)]
    procs = [ctx.Process(target=_grab, args=(str(st.folder), ch, barrier, results)) for ch in chunks]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    granted = sum(results.get(timeout=5) for _ in procs)
    bal = st.balance()
    assert bal.spent_usd == 0
    assert bal.reserved_usd <= 40.0
    # every granted reservation is an attempt row, and the refusals left none behind
    running = st.attempts()
    assert len(running) == granted >= 6
    assert bal.reserved_usd == pytest.approx(sum(a["reserved_micro"] for a in running) / ledger.MICRO)
    # whatever is left could not fit the smallest reservation
    assert bal.remaining_usd < min(c.reserve_usd for c in cells)
    assert st.audit() == []


def test_concurrent_threads_reserve_and_settle(tmp_path):
    st = make_store(tmp_path, envelope=25.0)
    cells = st.cells("pilot")
    lock = threading.Lock()
    peak = []

    def worker(chunk):
        own = Store.open(st.folder)
        for c in chunk:
            a = own.begin_attempt(c, "n", "simulated", tmp_path / "ws")
            if a is None:
                continue
            b = own.balance()
            with lock:
                peak.append(b.spent_usd + b.reserved_usd)
            own.finish_attempt(
                a.attempt_id, AttemptOutcome(record={}, cost_usd=0.9, judge_cost_usd=0.1), max_infra_attempts=3
            )
        own.close()

    threads = [threading.Thread(target=worker, args=(cells[k::4],)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert max(peak) <= 25.0 + 1e-9
    bal = st.balance()
    assert bal.reserved_usd == 0 and bal.spent_usd == pytest.approx(len(st.runs()) * 1.0)
    assert st.audit() == []


def test_settlement_replaces_reservation_and_audit_catches_tampering(tmp_path):
    st = make_store(tmp_path, envelope=100.0)
    c = st.cells("pilot")[0]
    a = st.begin_attempt(c, "n", "simulated", tmp_path / "ws")
    assert st.balance().reserved_usd == pytest.approx(c.reserve_usd)
    st.finish_attempt(a.attempt_id, AttemptOutcome(record={}, cost_usd=2.5, judge_cost_usd=0.2), max_infra_attempts=3)
    bal = st.balance()
    assert (bal.spent_usd, bal.reserved_usd) == (pytest.approx(2.7), 0)
    kinds = [r[0] for r in st.conn.execute("SELECT kind FROM ledger ORDER BY entry_id")]
    assert kinds == ["reserve", "settle"]
    assert st.audit() == []
    with st.transaction() as conn:
        conn.execute("UPDATE ledger_balance SET spent_micro = spent_micro - 1")
    problems = st.audit()
    assert any("differs from the journal" in p for p in problems)
    with pytest.raises(ledger.LedgerError, match="BEGIN IMMEDIATE"):
        ledger.reserve(st.conn, c.run_id, 1, 10)


def test_unknown_cost_is_settled_at_the_whole_reservation(tmp_path):
    """A run killed at the wall limit reports no cost: the ledger charges its worst case and says so."""
    st = make_store(tmp_path, envelope=100.0)
    known, unknown = st.cells("pilot")[:2]
    a = st.begin_attempt(known, "n", "simulated", tmp_path / "ws")
    st.finish_attempt(a.attempt_id, AttemptOutcome(record={}, cost_usd=1.0, judge_cost_usd=0.1), max_infra_attempts=3)
    b = st.begin_attempt(unknown, "n", "simulated", tmp_path / "ws")
    killed = {"status": "capped", "censored": True, "censor_reason": "wall", "cost_usd": None, "cost_complete": False}
    outcome = AttemptOutcome(record=killed, cost_usd=None, judge_cost_usd=0.1, status="capped")
    assert outcome.total_cost_usd is None
    assert st.finish_attempt(b.attempt_id, outcome, max_infra_attempts=3) == "done"  # censored, never rerun
    bal = st.balance()
    assert bal.reserved_usd == 0 and bal.spent_usd == pytest.approx(1.1 + unknown.reserve_usd)
    notes = dict(st.conn.execute("SELECT attempt_id, note FROM ledger WHERE kind = 'settle'").fetchall())
    assert "reported cost" in notes[a.attempt_id]
    assert "cost unknown" in notes[b.attempt_id] and "whole reservation" in notes[b.attempt_id]
    att = st.conn.execute(
        "SELECT cost_usd, charged_micro, reserved_micro FROM attempts WHERE attempt_id = ?", (b.attempt_id,)
    ).fetchone()
    assert att[0] is None and att[1] == att[2]
    assert st.conn.execute("SELECT cost_usd FROM runs WHERE run_id = ?", (unknown.run_id,)).fetchone()[0] is None
    assert st.audit() == []


def test_the_envelope_holds_when_costs_are_unknown(tmp_path):
    """Charging the reservation keeps spent + reserved within the envelope however many costs go unreported."""
    st = make_store(tmp_path, envelope=30.0)
    started = 0
    for cell in st.cells("pilot"):
        a = st.begin_attempt(cell, "n", "simulated", tmp_path / "ws")
        if a is None:
            continue
        started += 1
        st.finish_attempt(
            a.attempt_id,
            AttemptOutcome(record={"status": "capped"}, cost_usd=None, status="capped"),
            max_infra_attempts=3,
        )
        bal = st.balance()
        assert bal.spent_usd + bal.reserved_usd <= bal.envelope_usd + 1e-9
    assert started >= 4 and st.balance().remaining_usd < min(c.reserve_usd for c in st.cells("pilot"))
    assert st.audit() == []


def test_run_functions_pass_an_unreported_cost_on_as_unknown(tmp_path, monkeypatch):
    from pilot import pipeline, runner
    from pilot.executors import base
    from pilot.run_record import RunRecord

    cell = make_store(tmp_path).cells("pilot")[0]
    killed = {
        "scenario": cell.scenario,
        "arm": cell.arm,
        "status": "capped",
        "censored": True,
        "censor_reason": "wall",
        "cost_usd": None,
        "cost_complete": False,
        "workspace": str(tmp_path / "nowhere"),
    }
    monkeypatch.setattr(runner, "run_attempt", lambda *a, **k: RunRecord.from_dict(killed))
    assert pipeline.run_cell(cell, tmp_path / "a2", "n", "simulated", 1).cost_usd is None
    reported = dict(killed, censor_reason="cost", cost_usd=4.1, cost_complete=True)
    monkeypatch.setattr(runner, "run_attempt", lambda *a, **k: RunRecord.from_dict(reported))
    assert pipeline.run_cell(cell, tmp_path / "a3", "n", "simulated", 1).cost_usd == 4.1
    # A run function that fails part-way may already have spent: unknown too.
    monkeypatch.setattr(runner, "run_attempt", lambda *a, **k: (_ for _ in ()).throw(OSError("disk full")))
    out = base.execute_attempt("pilot.pipeline:run_cell", cell, str(tmp_path / "a4"), "n", "simulated")
    assert out.infra_error and out.cost_usd is None
