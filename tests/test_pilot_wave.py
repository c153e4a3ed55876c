"""Stage 01's report of the pilot wave: means per arm, macros and the runs not accepted, worked by hand."""

from __future__ import annotations

import math

import pandas as pd

from pilot.report import pilot_wave

COLUMNS = ["run_id", "scenario", "arm", "wave", "status", "attempts", "censored", "D", "E", "Q", "S"]


def _runs(rows: list[tuple]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=COLUMNS + ["cost_usd", "judge_cost_usd", "wall_s"])
    return df


def _status(spent: float) -> pd.DataFrame:
    return pd.DataFrame([{"arm": "A0", "spent_usd": spent / 2}, {"arm": "all", "spent_usd": spent}])


RUNS = _runs(
    [
        ("X.A0.r1", "X", "A0", "pilot", "done", 1, False, 1, 0, 80.0, True, 1.00, 0.20, 100.0),
        ("X.A0.r2", "X", "A0", "pilot", "done", 2, True, 0, 0, 40.0, False, 3.00, 0.20, 300.0),
        ("X.A1.r1", "X", "A1", "pilot", "done", 1, False, 1, 0, 90.0, True, 2.00, 0.40, 200.0),
        ("X.A1.r2", "X", "A1", "pilot", "infra_error", 3, None, None, None, None, None, None, None, None),
        ("X.A1.r3", "X", "A1", "third", "done", 1, False, 1, 0, 70.0, False, 9.00, 0.40, 200.0),
    ]
)


def test_means_per_arm_leave_out_infrastructure_failures_and_later_waves():
    wave = pilot_wave.pilot_wave(RUNS, _status(7.5))
    assert wave.failed == 1 and list(wave.rows["run_id"]) == ["X.A0.r1", "X.A0.r2", "X.A1.r1"]
    means = wave.by_arm()
    # By hand: A0 averages its two runs, A1 has one pilot run with an outcome.
    assert means.loc["A0", "S"] == 0.5 and means.loc["A0", "Q"] == 60.0 and means.loc["A0", "cost_usd"] == 2.0
    assert means.loc["A1", "S"] == 1.0 and means.loc["A1", "wall_s"] == 200.0


def test_macros_count_reruns_censoring_and_the_mean_total_cost():
    wave = pilot_wave.pilot_wave(RUNS, _status(7.5))
    m = wave.macros(label="SIMULATED", set_name="pilot", n_scenarios=1)
    assert m["PilotRunsDone"] == 3
    assert m["PilotInfraAttempts"] == (1 + 2 + 1) - 3  # attempts beyond the first, over the runs with an outcome
    assert m["PilotCensoredRuns"] == 1
    assert m["PilotSpentUsd"] == 7.5
    assert math.isclose(m["PilotMeanCostUsd"], (1.2 + 3.2 + 2.4) / 3)
    assert m["StudyScenarioSet"] == "\\texttt{pilot}" and m["StudyDataLabel"] == "SIMULATED"


def test_the_sentence_and_the_runs_not_accepted():
    wave = pilot_wave.pilot_wave(RUNS, _status(7.5))
    assert wave.sentence("SIMULATED: ") == (
        "SIMULATED: 3 pilot runs exported (1 more failed on infrastructure and have no outcome); raw run means "
        "(not yet the scenario-weighted estimates of stage 04) put acceptance between 0.500 and 1.000 across arms, "
        "and the mean total cost of a run (agent and judges) at $2.27."
    )
    assert list(wave.not_accepted()["run_id"]) == ["X.A0.r2"]


def test_a_wave_without_any_outcome_reports_not_estimable_instead_of_failing():
    # Every pilot run failed on infrastructure but one, which was never judged: S arrives as an empty object column.
    runs = _runs(
        [
            ("X.A0.r1", "X", "A0", "pilot", "done", 1, False, None, None, None, None, None, None, None),
            ("X.A1.r1", "X", "A1", "pilot", "infra_error", 3, None, None, None, None, None, None, None, None),
        ]
    )
    assert runs["S"].dtype == object
    wave = pilot_wave.pilot_wave(runs, _status(0.0))
    assert "S" in wave.summary.columns and wave.summary["S"].isna().all()
    text = wave.sentence()
    assert "raw acceptance is not estimable (no run has S)" in text
    assert "mean total cost of a run is not estimable (no run has a cost)" in text
    assert wave.macros(label="", set_name=None, n_scenarios=1)["PilotMeanCostUsd"] == (
        "not estimable (no pilot run has an outcome)"
    )
    assert list(wave.not_accepted()["run_id"]) == ["X.A0.r1"]  # S missing counts as not accepted
