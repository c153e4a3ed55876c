"""The run-table schema refuses malformed tables with a message naming the row and column."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pilot import protocol, runtable
from pilot.runtable import RunTableError
from pilot.simulated import synthetic


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    return synthetic.generate_runtable(7, n_scenarios=4, repeats=2)


def _refused(df: pd.DataFrame, column: str, match: str, **kw) -> RunTableError:
    with pytest.raises(RunTableError, match=match) as info:
        runtable.validate_runtable(df, source="t.csv", **kw)
    assert info.value.column == column
    assert f"column '{column}'" in str(info.value) and str(info.value).startswith("t.csv: ")
    return info.value


def test_schema_is_one_list_with_the_judge_columns():
    names = [c.name for c in runtable.columns()]
    assert len(names) == len(set(names))
    for jid in runtable.judge_ids():
        assert f"Q_{jid}" in names
    design = [
        "run_id",
        "study",
        "backend",
        "scenario",
        "occupation",
        "arm",
        "repeat",
        "model",
        "wave",
        "seed",
        "order_index",
        "node",
        "attempts",
        "D",
        "E",
        "E_reasons",
        "criteria_passed",
        "criteria_total",
        "Q",
        "n_judges",
        "judge_accept_votes",
        "S",
        "cost_usd",
        "judge_cost_usd",
        "wall_s",
        "turns",
        "tool_calls",
        "questions",
        "H_minutes",
        "censored",
        "censor_reason",
        "status",
        "selfcheck_first",
        "recovery_used",
        "selfcheck_final",
        "designed_depth",
        "professional_minutes",
    ]
    assert set(design) <= set(names)
    frame = runtable.schema_frame()
    assert list(frame.columns) == ["column", "type", "nullable", "allowed", "range", "meaning"]
    assert frame.set_index("column").loc["S", "nullable"] and not frame.set_index("column").loc["D", "nullable"]


def test_a_generated_table_validates_and_survives_a_csv_round_trip(table: pd.DataFrame, tmp_path: Path):
    checked = runtable.validate_runtable(table)
    assert checked["S"].dtype == "boolean" and checked["repeat"].dtype == "int64"
    path = runtable.write_runtable(checked, tmp_path / "runs.csv")
    back = runtable.read_runtable(path)
    pd.testing.assert_frame_equal(back, checked, check_dtype=True)
    assert runtable.is_simulated(back)


def test_missing_column(table):
    err = _refused(table.drop(columns=["wall_s"]), "wall_s", "missing column")
    assert err.row is None


def test_wrong_type_names_row_and_run(table):
    df = table.astype({"cost_usd": object}).copy()
    df.loc[3, "cost_usd"] = "three dollars"
    err = _refused(df, "cost_usd", r"row 4 \(run_id .*\).*wrong type")
    assert err.row == 4 and err.run_id == table.loc[3, "run_id"]


def test_unknown_arm_scenario_and_duplicates(table):
    df = table.copy()
    df.loc[2, "arm"] = "A9"
    _refused(df, "arm", "unknown arm 'A9'")
    _refused(
        table,
        "scenario",
        "unknown scenario",
        scenarios=["ACC-01"] if table.loc[0, "scenario"] != "ACC-01" else ["LEGAL-01"],
    )
    df = table.copy()
    df.loc[5, "scenario"] = "not a scenario"
    _refused(df, "scenario", "is not a scenario id")
    df = table.copy()
    df.loc[5, "run_id"] = df.loc[4, "run_id"]
    _refused(df, "run_id", "duplicated run id")
    df = table.copy()
    df.loc[5, ["scenario", "arm", "repeat", "model", "occupation", "designed_depth", "professional_minutes"]] = df.loc[
        4, ["scenario", "arm", "repeat", "model", "occupation", "designed_depth", "professional_minutes"]
    ].values
    _refused(df, "repeat", "duplicated cell")


def test_scenario_property_must_be_constant(table):
    df = table.copy()
    sid = df.loc[0, "scenario"]
    i = df.index[df.scenario == sid][1]
    df.loc[i, "designed_depth"] = df.loc[i, "designed_depth"] + 1
    _refused(df, "designed_depth", "property of the scenario")


def test_S_must_follow_D_E_and_Q(table):
    q = protocol.study().q
    df = table.copy()
    i = int(np.flatnonzero((df.S == True).to_numpy())[0])  # noqa: E712
    df.loc[i, "S"] = False
    _refused(df, "S", "contradicts")
    df = table.copy()
    i = int(np.flatnonzero(df.Q.notna() & (df.Q < q))[0])
    df.loc[i, "S"] = True
    _refused(df, "S", f"q={q:g}")


def test_S_is_missing_never_zero_without_judges(table):
    df = table.copy()
    i = int(np.flatnonzero(df.Q.notna())[0])
    for j in runtable.judge_ids():
        df.loc[i, f"Q_{j}"] = np.nan
    df.loc[i, "Q"] = np.nan
    df.loc[i, "n_judges"] = 0
    df.loc[i, "judge_accept_votes"] = 0
    df.loc[i, "S"] = False
    _refused(df, "S", "never zero")
    df.loc[i, "S"] = pd.NA
    assert pd.isna(runtable.validate_runtable(df).loc[i, "S"])


def test_Q_and_judge_counts_are_consistent(table):
    df = table.copy()
    i = int(np.flatnonzero(df.Q.notna())[0])
    df.loc[i, "Q"] = min(100.0, df.loc[i, "Q"] + 5)
    _refused(df, "Q", "not the mean")
    df = table.copy()
    df.loc[i, "n_judges"] = df.loc[i, "n_judges"] - 1
    _refused(df, "n_judges", "judge score column")
    df = table.copy()
    df.loc[i, "Q_J1"] = 140.0
    _refused(df, "Q_J1", "above the maximum")


def test_violation_caps_and_human_time(table):
    df = table.copy()
    i = int(np.flatnonzero(df.D.to_numpy(dtype=bool))[0])
    df.loc[i, "E"] = True
    df.loc[i, "E_reasons"] = "input modified"
    _refused(df, "D", "critical violation")
    df = table.copy()
    i = int(np.flatnonzero(~df.censored.to_numpy(dtype=bool))[0])
    df.loc[i, "censor_reason"] = "cost"
    _refused(df, "censor_reason", "exactly when")
    df = table.copy()
    df.loc[0, "censor_reason"] = "budget"
    _refused(df, "censor_reason", "not one of")
    df = table.copy()
    df.loc[0, "H_minutes"] = df.loc[0, "H_minutes"] + 1
    _refused(df, "H_minutes", "questions")


def test_recovery_only_in_the_self_repairing_arm(table):
    df = table.copy()
    i = int(np.flatnonzero((df.arm == "A1").to_numpy())[0])
    df.loc[i, "recovery_used"] = True
    _refused(df, "recovery_used", "no recovery resume")


def test_unreadable_and_absent_files(tmp_path: Path):
    with pytest.raises(RunTableError, match="file not found"):
        runtable.read_runtable(tmp_path / "nope.csv")
    bad = tmp_path / "bad.csv"
    bad.write_text("run_id,study\nx,y\n")
    with pytest.raises(RunTableError, match="missing column"):
        runtable.read_runtable(bad)


def test_csv_booleans_and_blank_cells_are_read(table, tmp_path: Path):
    df = table.copy()
    df["D"] = df["D"].map({True: "1", False: "0"})
    path = tmp_path / "ones.csv"
    df.to_csv(path, index=False)
    back = runtable.read_runtable(path)
    assert back["D"].tolist() == table["D"].astype(bool).tolist()
    assert back["S"].isna().sum() == table["S"].isna().sum()


def test_real_backend_is_not_simulated(table):
    df = table.copy()
    df["backend"] = "claude-code"
    df["study"] = "pilot-2026"
    assert not runtable.is_simulated(df)
    df.loc[0, "backend"] = "simulated"
    assert runtable.is_simulated(df)


def test_common_spellings_of_missing_are_read_as_missing(table, tmp_path: Path):
    path = tmp_path / "na.csv"
    runtable.write_runtable(table, path)
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    df["E_reasons"] = df["E_reasons"].replace("", "NA")
    df.to_csv(path, index=False)
    back = runtable.read_runtable(path)
    assert back["E_reasons"].isna().sum() == table["E_reasons"].isna().sum() > 0


def test_unisolated_real_runs_are_refused_unless_allowed(table, tmp_path: Path):
    real = table.assign(backend="claude-code", enforcement="bubblewrap")
    real.loc[3, "enforcement"] = "unisolated"
    path = runtable.write_runtable(real, tmp_path / "runs.csv")
    with pytest.raises(RunTableError, match=r"row 4 .*column 'enforcement'.*ran unisolated.*allow_unisolated"):
        runtable.read_runtable(path, scenarios=list(table["scenario"].unique()))
    ok = runtable.read_runtable(path, scenarios=list(table["scenario"].unique()), allow_unisolated=True)
    assert list(ok["enforcement"]).count("unisolated") == 1
    _refused(real.assign(enforcement="none"), "enforcement", "none")


def test_portal_columns_are_optional_but_checked_when_present(table, tmp_path: Path):
    assert "portal_fault" not in table.columns and runtable.validate_runtable(table) is not None
    df = table.copy()
    df["portal_requests"] = [None if i % 2 else i for i in range(len(df))]
    df["portal_fault"] = [None if i % 2 else (i % 4 == 0) for i in range(len(df))]
    back = runtable.read_runtable(runtable.write_runtable(runtable.validate_runtable(df), tmp_path / "runs.csv"))
    assert back["portal_fault"].dtype == "boolean" and back["portal_requests"].dtype == "Int64"
    assert back["portal_fault"].isna().sum() == len(df) // 2
    bad = df.astype({"portal_fault": object}).copy()
    bad.loc[2, "portal_fault"] = "maybe"
    assert _refused(bad, "portal_fault", "not a boolean").row == 3
    bad = df.copy()
    bad.loc[0, "portal_requests"] = -1
    _refused(bad, "portal_requests", "below the minimum")
