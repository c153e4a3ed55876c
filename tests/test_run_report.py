"""The run report: run flow and ledger read from a real store, written as tables, a figure and macros."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from schedule_support import NODES, REQUIRES, ControlledExecutor, completed, make_store

from pilot.attempt import AttemptOutcome, CellSpec
from pilot.report import run_report
from pilot.schedule import Scheduler


def _policy():
    seen: dict[str, int] = {}

    def policy(cell: CellSpec, folder: Path) -> AttemptOutcome:
        seen[cell.run_id] = seen.get(cell.run_id, 0) + 1
        if ".A0." in cell.run_id:
            return AttemptOutcome(infra_error="portal did not start")  # fails every attempt
        if ".A1." in cell.run_id and seen[cell.run_id] == 1:
            return AttemptOutcome(infra_error="ssh connection reset", cost_usd=0.0)  # rerun once
        return completed(cost=0.5, judge=0.05)(cell, folder)

    return policy


def test_flow_and_ledger_come_from_the_store(tmp_path):
    st = make_store(tmp_path, scenarios=["ACC-01", "HR-01"])
    Scheduler(
        st,
        ControlledExecutor(_policy(), batch=2),
        NODES,
        backend="simulated",
        requires=REQUIRES,
        progress=False,
        poll_s=0,
        max_infra_attempts=2,
    ).run("pilot")
    cells = st.cell_rows()
    done = [c for c in cells if c["status"] == "done"]
    runs = pd.DataFrame(
        {
            "run_id": [c["run_id"] for c in done],
            "wave": "pilot",
            "model": "claude-opus-5-5",
            "censored": [i == 0 for i in range(len(done))],
            "n_judges": 3,
            "S": [1.0] * (len(done) - 1) + [None],
        }
    )
    report = run_report.collect(st, runs)
    n = len(cells)  # 2 scenarios x 5 arms x pilot repeats
    a0 = sum(".A0." in c["run_id"] for c in cells)
    a1 = sum(".A1." in c["run_id"] for c in cells)
    assert report.count("planned") == report.count("dispatched") == n
    assert report.count("failed") == a0 and report.count("finished") == n - a0 == len(done)
    assert report.count("attempts") == len(st.attempts()) == n + a0 + a1
    assert report.count("infrastructure reruns") == 2 * a0 + a1
    assert (report.count("censored"), report.count("judged"), report.count("analysed")) == (1, len(done), len(done) - 1)
    assert report.simulated and report.backend == "simulated"
    # The ledger: what the store charged, per arm, adding up to the balance.
    total = report.ledger.set_index("arm").loc["all", "total"]
    assert abs(total - st.balance().spent_usd) < 1e-9 and report.balance == st.balance()
    assert report.ledger.set_index("arm").loc["A0", "total"] == 0

    out = run_report.write(report, tmp_path / "tables", tmp_path / "figures", tmp_path / "generated")
    macros = out["run_macros.tex"].read_text()
    assert f"\\newcommand{{\\RunPlanned}}{{{n}}}" in macros and "\\newcommand{\\RunDataLabel}{SIMULATED}" in macros
    assert "SIMULATED" in out["run_flow_table.tex"].read_text() and (tmp_path / "figures" / "run_flow.png").is_file()
    st.close()
