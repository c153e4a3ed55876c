"""The sensitivity stage runs under nbval and from the command line on a run table it has never seen."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from notebook_helpers import fresh_runtable, output_dirs, run_cli, run_under_nbval, stage_params

from pilot import protocol

pytestmark = pytest.mark.usefixtures("notebook")


def test_sensitivity_notebook_under_nbval_on_a_fresh_table(tmp_path: Path):
    runs = fresh_runtable(tmp_path, seed=41, n_scenarios=6)
    out = output_dirs(tmp_path)
    proc = run_under_nbval("sensitivity", stage_params(out, runs), tmp_path)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and "failed" not in proc.stdout

    study = protocol.study()
    q = pd.read_csv(out["tables"] / "sensitivity_q_grid.csv")
    assert sorted(q["q"].unique()) == sorted(float(x) for x in study["outcomes"]["q_grid"])
    budget = pd.read_csv(out["tables"] / "sensitivity_frontier_budget.csv")
    assert sorted(budget.budget_usd.unique()) == study.grid("budget_usd")
    # Acceptance within a budget can only grow with the budget.
    for _, part in budget.groupby("arm"):
        assert part.sort_values("budget_usd").p_hat.is_monotonic_increasing
    human = pd.read_csv(out["tables"] / "sensitivity_frontier_human.csv")
    assert sorted(human.human_minutes.unique()) == study.grid("human_minutes")
    for name in (
        "sensitivity_logistic.csv",
        "sensitivity_km.csv",
        "sensitivity_logrank.csv",
        "sensitivity_cost_per_accepted.csv",
        "sensitivity_recovery_index.csv",
        "sensitivity_judge_agreement.csv",
        "sensitivity_secondary_endpoints.csv",
        "sensitivity_h4.csv",
        "sensitivity_h7.csv",
        "sensitivity_minutes_weighted_contrasts.csv",
    ):
        t = pd.read_csv(out["tables"] / name)
        assert len(t) > 0 and t.study.str.contains("SIMULATED").all(), name
    for fig in (
        "sensitivity_km.pdf",
        "sensitivity_frontier_budget.pdf",
        "sensitivity_frontier_human.pdf",
        "sensitivity_q_grid.pdf",
    ):
        assert (out["figures"] / fig).read_bytes().startswith(b"%PDF")
    h7 = (out["generated"] / "sensitivity_h7_table.tex").read_text()
    assert "exploratory" in h7 and "\\textbf{SIMULATED.}" in h7
    macros = (out["generated"] / "sensitivity_macros.tex").read_text()
    for name in (
        "SensDataLabel}{SIMULATED",
        "SensAlphaOrdinal",
        "SensARI",
        "SensLogitPrimaryOR",
        "SensCPAAThree",
        "VerdictHFour",
    ):
        assert f"\\newcommand{{\\{name}" in macros


def test_sensitivity_stage_from_the_command_line(tmp_path: Path):
    runs = fresh_runtable(tmp_path, seed=77, n_scenarios=5)
    out = output_dirs(tmp_path)
    proc = run_cli("sensitivity", stage_params(out, runs, B=100, perms=100), tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    km = pd.read_csv(out["tables"] / "sensitivity_km.csv")
    assert list(km.arm) == ["A0", "A1", "A2", "A3", "A4"] and (km.completed + km.censored == km.runs).all()
