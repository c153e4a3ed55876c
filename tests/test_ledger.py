"""The envelope: no reservation takes spent plus reserved over it, whatever the concurrency."""

from __future__ import annotations

import multiprocessing as mp
import threading
from pathlib import Path

import pytest

from pilot import ledger
from pilot.executors.base import AttemptOutcome
from pilot.store import Store
from schedule_support import make_store


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
            own.finish_attempt(a.attempt_id, AttemptOutcome(record={}, cost_usd=0.9, judge_cost_usd=0.1), max_infra_attempts=3)
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
