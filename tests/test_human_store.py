"""The study store's hooks for the human wave: the wave admitted in an old store, a session's attempt left to the
site by a scheduler's recovery, and a withdrawn session's run removed with its charge kept in the ledger."""

from __future__ import annotations

import sqlite3

import pytest
from schedule_support import make_store

from pilot import ledger
from pilot.attempt import AttemptOutcome, CellSpec
from pilot.reevaluate import study_backend
from pilot.store import SCHEMA, Store, StoreError
from pilot.study import agent_backends


def _human_cell(run_id: str = "OPS-01.H1.w1.r1", order: int = 0) -> CellSpec:
    return CellSpec(run_id, "t", "human", "OPS-01", "H1", 1, "human", order, 5, 4.0, 1800.0, 4.3)


def test_a_store_written_before_the_human_wave_admits_its_cells(tmp_path):
    st = make_store(tmp_path, scenarios=["OPS-01"])
    st.close()
    # Make the store as an older version wrote it: the cells' wave check without 'human'.
    conn = sqlite3.connect(tmp_path / "t" / "study.sqlite")
    sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'cells'").fetchone()[0]
    old = sql.replace(", 'human'", "")
    assert old != sql and "'human'" in SCHEMA
    version = conn.execute("PRAGMA schema_version").fetchone()[0]
    conn.execute("PRAGMA writable_schema = ON")
    conn.execute("UPDATE sqlite_master SET sql = ? WHERE name = 'cells'", (old,))
    conn.execute(f"PRAGMA schema_version = {version + 1}")
    conn.commit()
    conn.close()
    raw = sqlite3.connect(tmp_path / "t" / "study.sqlite")
    with pytest.raises(sqlite3.IntegrityError):
        raw.execute(
            "INSERT INTO cells (run_id, wave, order_index, scenario, arm, repeat, model, seed, cap_usd, wall_s, "
            "reserve_micro) VALUES ('x', 'human', 0, 'OPS-01', 'H0', 1, 'human', 1, 0, 1800, 300000)"
        )
    raw.close()
    with Store.open(tmp_path / "t") as st:
        assert st.add_cells([_human_cell()]) == 1
        assert st.has_wave("human")


def test_a_schedulers_recovery_leaves_a_human_sessions_attempt_to_the_site(tmp_path):
    st = make_store(tmp_path, scenarios=["OPS-01"])
    agent = st.cells("pilot")[0]
    st.add_cells([_human_cell()])
    human = st.cells("human")[0]
    agent_attempt = st.begin_attempt(agent, "n1", "simulated", tmp_path / "ws")
    human_attempt = st.begin_attempt(human, "participant-site", "human", tmp_path / "ws")
    assert agent_attempt and human_attempt
    recovered = st.recover_interrupted()
    assert [r["run_id"] for r in recovered] == [agent.run_id]
    outcomes = {a["run_id"]: a["outcome"] for a in st.attempts()}
    assert outcomes == {agent.run_id: "interrupted", human.run_id: "running"}
    assert st.audit() == []
    st.close()


def test_a_removed_run_leaves_its_charge_in_the_ledger_and_only_a_human_run_is_removed(tmp_path):
    st = make_store(tmp_path, scenarios=["OPS-01"])
    st.add_cells([_human_cell(), _human_cell("OPS-01.H0.w1.r1", 1)])
    one, two = st.cells("human")
    a = st.begin_attempt(one, "participant-site", "human", tmp_path / "ws")
    st.finish_attempt(
        a.attempt_id,
        AttemptOutcome(record={"status": "completed"}, cost_usd=0.25, judge_cost_usd=0.05, metered_cost_usd="0.25"),
        max_infra_attempts=1,
    )
    st.begin_attempt(two, "participant-site", "human", tmp_path / "ws")
    spent_before = st.balance().spent_usd
    first = st.remove_run(one.run_id, reason="participant withdrew (site)")
    second = st.remove_run(two.run_id, reason="participant withdrew (site)", open_charge_usd="0.125")
    assert (first["charged_usd"], second["charged_usd"]) == (0.3, 0.125)
    bal = st.balance()
    assert bal.spent_usd == pytest.approx(spent_before + 0.125) and bal.reserved_usd == 0
    assert st.audit() == []
    assert not st.cells("human") and [a["run_id"] for a in st.attempts()] == []
    assert [r["kind"] for r in st.events("remove_run")] == ["remove_run", "remove_run"]
    removed = st.conn.execute("SELECT SUM(charged_micro) FROM ledger_removed").fetchone()[0]
    assert removed == ledger.to_micro("0.425")
    with pytest.raises(StoreError, match="only a human session's run is ever removed"):
        st.remove_run(st.cells("pilot")[0].run_id, reason="no")
    st.close()


def test_the_studys_backend_is_its_agents_whatever_the_human_wave_used(tmp_path):
    st = make_store(tmp_path, scenarios=["OPS-01"])
    st.add_cells([_human_cell()])
    assert study_backend(st) == ""
    st.begin_attempt(st.cells("human")[0], "participant-site", "human", tmp_path / "ws")
    # A study of participants alone is theirs; once an agent has run, reevaluate and rejudge read the agents'.
    assert study_backend(st) == "human" and agent_backends(st) == []
    st.begin_attempt(st.cells("pilot")[0], "n1", "simulated", tmp_path / "ws")
    assert study_backend(st) == "simulated" and agent_backends(st) == ["simulated"]
    st.close()
