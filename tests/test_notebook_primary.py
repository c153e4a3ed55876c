"""The primary stage runs under nbval and from the command line on a run table it has never seen."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from notebook_helpers import fresh_runtable, output_dirs, run_cli, run_under_nbval, stage_params

from pilot import runtable

pytestmark = pytest.mark.usefixtures("notebook")


def test_primary_notebook_under_nbval_on_a_fresh_table(tmp_path: Path):
    runs = fresh_runtable(tmp_path)
    out = output_dirs(tmp_path)
    proc = run_under_nbval("primary", stage_params(out, runs), tmp_path)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and "failed" not in proc.stdout

    acc = pd.read_csv(out["tables"] / "primary_acceptance.csv")
    assert list(acc.columns[:5]) == ["arm", "p_hat", "ci_low", "ci_high", "n_runs"]
    assert list(acc.arm) == ["A0", "A1", "A2", "A3", "A4"]
    main = runtable.primary_rows(runtable.read_runtable(runs))
    assert acc.n_runs.sum() == len(main)  # every assigned run of the worker model is counted
    con = pd.read_csv(out["tables"] / "primary_contrasts.csv")
    assert list(con.columns[:7]) == ["contrast", "estimate", "ci_low", "ci_high", "p_value", "p_holm", "n_scenarios"]
    assert list(con.contrast) == ["A3-A1", "A1-A0", "A4-A3", "A2-A1"] and (con.n_scenarios == 6).all()
    assert con.study.str.contains("SIMULATED").all()
    assert (out["figures"] / "primary_forest.pdf").read_bytes().startswith(b"%PDF")
    tex = (out["generated"] / "primary_contrasts_table.tex").read_text()
    assert "\\textbf{SIMULATED.}" in tex and "\\label{tab:primary-contrasts}" in tex
    macros = (out["generated"] / "primary_macros.tex").read_text()
    assert "\\newcommand{\\ResultsDataLabel}{SIMULATED}" in macros
    assert "\\newcommand{\\ContrastAThreeMinusAOneEst}" in macros and "\\newcommand{\\ResultsNScenarios}{6}" in macros


def test_primary_stage_from_the_command_line(tmp_path: Path):
    runs = fresh_runtable(tmp_path, seed=123, n_scenarios=8)
    out = output_dirs(tmp_path)
    proc = run_cli("primary", stage_params(out, runs, B=200, perms=100), tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert '"stage": "primary"' in proc.stdout
    con = pd.read_csv(out["tables"] / "primary_contrasts.csv")
    assert (con.n_scenarios == 8).all()
    assert not con.exact.any()  # 2^8 = 256 sign vectors > 100 permutations: randomised


def test_primary_stage_refuses_a_bad_table_naming_row_and_column(tmp_path: Path):
    runs = fresh_runtable(tmp_path, seed=5, n_scenarios=3)
    df = pd.read_csv(runs, dtype=str, keep_default_na=False)
    df.loc[4, "arm"] = "A7"
    df.to_csv(runs, index=False)
    out = output_dirs(tmp_path)
    proc = run_cli("primary", stage_params(out, runs, B=50, perms=50), tmp_path)
    assert proc.returncode != 0
    assert "RunTableError" in proc.stderr and "row 5" in proc.stderr and "column 'arm'" in proc.stderr
    assert not (out["tables"] / "primary_contrasts.csv").exists()
