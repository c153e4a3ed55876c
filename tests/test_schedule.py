"""Seeded assignment, eligibility, least-loaded dispatch, waiting, reruns and the envelope."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import pytest
from schedule_support import NODES, REQUIRES, SCENARIOS, ControlledExecutor, completed, make_root, make_store

from pilot import protocol
from pilot.attempt import AttemptOutcome
from pilot.nodes import Node, choose_node, load_nodes
from pilot.schedule import ScheduleError, Scheduler, UnservableCellError, assignment_csv, build_cells

STUDY = protocol.study()


# ------------------------------------------------------------------ assignment


def test_same_seed_same_order_byte_for_byte_different_seed_differs():
    a = assignment_csv(build_cells("s", "pilot", SCENARIOS, 123))
    b = assignment_csv(
        build_cells("s", "pilot", list(reversed(SCENARIOS)), 123)
    )  # scenario listing order is irrelevant
    c = assignment_csv(build_cells("s", "pilot", SCENARIOS, 124))
    assert a.encode() == b.encode()
    assert a != c


def test_cli_create_twice_writes_identical_assignment_files(tmp_path):
    outs = []
    for k in range(2):
        root = make_root(tmp_path / f"r{k}")
        env = {"PILOT_ROOT": str(root), "PATH": "/usr/bin:/bin"}
        subprocess.run(
            [sys.executable, "-m", "pilot", "study", "create", "s", "--seed", "77", "--scenarios", *SCENARIOS],
            check=True,
            env=env,
            capture_output=True,
            text=True,
        )
        outs.append((root / "analysis" / "data" / "s" / "assignment_pilot.csv").read_bytes())
    assert outs[0] == outs[1]
    assert outs[0].count(b"\n") == 1 + len(SCENARIOS) * 5 * STUDY.pilot_repeats


def test_pilot_cells_are_a_permutation_of_the_design():
    cells = build_cells("s", "pilot", SCENARIOS, 5)
    keys = [(c.scenario, c.arm, c.repeat) for c in cells]
    expected = {(s, a, r) for s in SCENARIOS for a in STUDY.arms for r in range(1, STUDY.pilot_repeats + 1)}
    assert set(keys) == expected and len(keys) == len(expected)
    assert [c.order_index for c in cells] == list(range(len(cells)))
    canonical = sorted(keys)
    assert keys != canonical  # permuted, not in design order
    # arms interleave: no arm fills the first quarter of the order
    first = Counter(c.arm for c in cells[: len(cells) // 4])
    assert len(first) >= 3
    assert len({c.run_id for c in cells}) == len(cells) and len({c.seed for c in cells}) == len(cells)


def test_later_waves_cells_caps_and_reservations():
    r3 = build_cells("s", "repeat3", SCENARIOS, 5)
    assert {c.repeat for c in r3} == {STUDY.pilot_repeats + 1} and len(r3) == len(SCENARIOS) * 5
    sens = build_cells("s", "sensitivity", SCENARIOS, 5)
    models = STUDY["sensitivity_models"]["models"]
    assert {(c.arm, c.model) for c in sens} == {("A3", m) for m in models}
    assert len(sens) == len(SCENARIOS) * len(models) * STUDY["sensitivity_models"]["repeats"]
    assert all(c.run_id.endswith("." + c.model) for c in sens)
    acc = next(c for c in r3 if c.scenario == "ACC-01")
    legal = next(c for c in r3 if c.scenario == "LEGAL-01")
    reserve = STUDY["judges"]["reserve_usd_per_run"]
    assert (acc.cap_usd, acc.wall_s, acc.reserve_usd) == (6.0, 3600, pytest.approx(6.0 + reserve))
    assert (legal.cap_usd, legal.wall_s) == (4.0, 2400)
    with pytest.raises(ScheduleError, match="unknown wave"):
        build_cells("s", "wave9", SCENARIOS, 5)
    with pytest.raises(ScheduleError, match="no scenarios"):
        build_cells("s", "pilot", [], 5)


# ------------------------------------------------------------------ nodes


def test_choose_node_least_loaded_eligible_with_deterministic_ties():
    a3 = REQUIRES["A3"]
    assert choose_node(a3, NODES, {}) == "linux-1"  # tie at 0: by name
    assert choose_node(a3, NODES, {"linux-1": 1}) == "linux-2"
    assert choose_node(a3, NODES, {"linux-1": 1, "linux-2": 1}) == "linux-1"
    assert choose_node(a3, NODES, {"linux-1": 2, "linux-2": 2}) is None  # full: wait, never the mac
    assert choose_node(REQUIRES["A2"], NODES, {}) == "mac-1"
    assert choose_node(REQUIRES["A2"], NODES, {"mac-1": 1}) is None
    # load is in-flight over slots: 1 of 4 beats 1 of 2
    big = [Node("b", frozenset(), 4), Node("a", frozenset(), 2)]
    assert choose_node(REQUIRES["A0"], big, {"a": 1, "b": 1}) == "b"


def test_nodes_file_errors_name_file_field_and_reason(tmp_path):
    bad = tmp_path / "nodes.yml"
    bad.write_text("nodes:\n  - {name: n1, capabilities: [linux, gpu], slots: 1}\n")
    with pytest.raises(protocol.ProtocolError) as err:
        load_nodes(bad)
    assert "nodes.yml" in str(err.value) and "nodes.0.capabilities.1" in str(err.value)
    bad.write_text("nodes:\n  - {name: n1, capabilities: [], slots: 0}\n")
    with pytest.raises(protocol.ProtocolError, match="nodes.0.slots"):
        load_nodes(bad)
    bad.write_text("nodes:\n  - {name: n1, capabilities: [], slots: 1}\n  - {name: n1, capabilities: [], slots: 1}\n")
    with pytest.raises(protocol.ProtocolError, match="duplicate node name"):
        load_nodes(bad)
    default = load_nodes()
    assert any("macos" in n.capabilities for n in default)
    assert any({"libreoffice", "chromium", "portal"} <= n.capabilities for n in default)


def test_unservable_cell_stops_before_anything_is_spent(tmp_path):
    st = make_store(tmp_path)
    linux_only = [n for n in NODES if "macos" not in n.capabilities]
    ex = ControlledExecutor(completed())
    with pytest.raises(UnservableCellError) as err:
        Scheduler(st, ex, linux_only, backend="simulated", requires=REQUIRES, progress=False).run("pilot")
    msg = str(err.value)
    assert "arm A2" in msg and "macos" in msg and "nothing was dispatched" in msg
    assert ex.submitted == [] and st.attempts() == []
    assert st.balance().spent_usd == 0 and st.balance().reserved_usd == 0


# ------------------------------------------------------------------ dispatch


def test_dispatch_in_seeded_order_eligible_nodes_never_over_slots(tmp_path):
    st = make_store(tmp_path)
    load: Counter = Counter()
    slots = {n.name: n for n in NODES}

    def on_submit(cell, node):
        load[node] += 1
        assert load[node] <= slots[node].slots
        assert slots[node].serves(REQUIRES[cell.arm])

    def policy(cell, folder):
        node = next(n for rid, n in reversed(ex.submitted) if rid == cell.run_id)
        load[node] -= 1
        return completed()(cell, folder)

    ex = ControlledExecutor(policy, batch=1, on_submit=on_submit)
    res = Scheduler(st, ex, NODES, backend="simulated", requires=REQUIRES, progress=False, poll_s=0).run("pilot")
    cells = st.cells("pilot")
    assert res.stop_reason == "complete" and res.counts["done"] == len(cells)
    # strict order: dispatch sequence equals the seeded order (no overtaking while the mac is busy)
    assert [rid for rid, _ in ex.submitted] == [c.run_id for c in cells]
    assert {n for rid, n in ex.submitted if ".A2." in rid} == {"mac-1"}
    assert {n for rid, n in ex.submitted if ".A3." in rid or ".A4." in rid} <= {"linux-1", "linux-2"}
    # the node of every run is stored
    assert all(r["node"] for r in st.cell_rows())
    assert st.audit() == []


def test_infra_errors_rerun_same_id_logged_then_failed_at_limit_capped_not_rerun(tmp_path):
    st = make_store(tmp_path, scenarios=["ACC-01", "RES-01"])
    seen: Counter = Counter()

    def policy(cell, folder):
        seen[cell.run_id] += 1
        if cell.arm == "A0":
            return AttemptOutcome(infra_error="portal did not start")  # always: hits the limit
        if cell.arm == "A1" and seen[cell.run_id] == 1:
            return AttemptOutcome(infra_error="ssh connection reset", cost_usd=0.0)
        if cell.arm == "A3":
            return AttemptOutcome(
                record={"status": "capped", "censored": True, "censor_reason": "cost"},
                cost_usd=cell.cap_usd,
                status="capped",
            )
        return completed()(cell, folder)

    ex = ControlledExecutor(policy, batch=2)
    res = Scheduler(
        st, ex, NODES, backend="simulated", requires=REQUIRES, progress=False, poll_s=0, max_infra_attempts=3
    ).run("pilot")
    rows = {r["run_id"]: r for r in st.cell_rows()}
    for rid, r in rows.items():
        atts = st.attempts(rid)
        assert [a["attempt_no"] for a in atts] == list(range(1, len(atts) + 1))
        if ".A0." in rid:
            assert r["status"] == "failed" and len(atts) == 3
            assert all(a["outcome"] == "infra_error" and "portal did not start" in a["error"] for a in atts)
        elif ".A1." in rid:
            assert r["status"] == "done" and [a["outcome"] for a in atts] == ["infra_error", "completed"]
            assert "ssh connection reset" in atts[0]["error"]
            assert atts[0]["workspace"] != atts[1]["workspace"] and atts[1]["workspace"].endswith(f"{rid}/attempt-2")
        elif ".A3." in rid:
            assert r["status"] == "done" and [a["outcome"] for a in atts] == ["capped"]  # a cap is an outcome
        else:
            assert r["status"] == "done" and len(atts) == 1
    assert res.counts["failed"] == 4 and res.infra_errors == 4 * 3 + 4
    assert st.audit() == []


def test_envelope_never_exceeded_and_study_stops_when_it_refuses(tmp_path):
    st = make_store(tmp_path, envelope=30.0)

    def on_submit(cell, node):
        bal = st.balance()
        assert bal.spent_usd + bal.reserved_usd <= bal.envelope_usd + 1e-9

    ex = ControlledExecutor(completed(cost=1.5, judge=0.1), batch=1, on_submit=on_submit)
    res = Scheduler(st, ex, NODES, backend="simulated", requires=REQUIRES, progress=False, poll_s=0).run("pilot")
    assert res.stop_reason.startswith("envelope exhausted")
    bal = st.balance()
    assert bal.reserved_usd == 0 and bal.spent_usd <= 30.0
    # the run that could not reserve is still waiting, with no attempt: nothing was spent on it
    waiting = st.cells("pilot", "waiting")
    assert waiting and all(st.attempts(c.run_id) == [] for c in waiting)
    assert bal.remaining_usd < max(c.reserve_usd for c in waiting)
    assert st.audit() == []


def test_a_crashing_attempt_harms_no_other_and_is_rerun(tmp_path, monkeypatch):
    from pilot.executors.local import LocalExecutor

    monkeypatch.setenv("PILOT_FAKE_SLEEP_S", "0.05")
    monkeypatch.setenv("PILOT_FAKE_CRASH_ARMS", "A1")  # the worker process dies during each A1 run's first attempt
    st = make_store(tmp_path, scenarios=["ACC-01", "RES-01"])
    ex = LocalExecutor("pilot.simulated.fake_runs:sleep_run", 3)
    try:
        res = Scheduler(st, ex, NODES, backend="simulated", requires=REQUIRES, progress=False, poll_s=0.05).run("pilot")
    finally:
        ex.close()
    assert res.stop_reason == "complete" and res.counts["done"] == 20
    for cell in st.cells("pilot"):
        atts = st.attempts(cell.run_id)
        assert atts[-1]["outcome"] == "completed"
        if cell.arm == "A1":
            assert atts[0]["outcome"] == "infra_error" and "worker process died (exit status 17)" in atts[0]["error"]
            # it had launched, so its spend is unknown: charged its reservation, and marked so
            assert atts[0]["charge_basis"] == "reservation" and len(atts) == 2
        else:
            # no innocent attempt failed, was charged for a neighbour's crash, or used up an attempt
            assert [a["outcome"] for a in atts] == ["completed"] and atts[0]["charge_basis"] == "reported"
    assert {r["infra_attempts"] for r in st.cell_rows() if r["arm"] != "A1"} == {0}
    assert st.audit() == []
