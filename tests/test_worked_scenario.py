"""The worked-scenario appendix: its two packages as the evaluation saw them, and its criteria table's layout."""

from __future__ import annotations

import pandas as pd

from pilot import protocol
from pilot.report.worked_scenario import worked_scenario


def _runs() -> pd.DataFrame:
    row = {"scenario": "ACC-01", "arm": "A1", "model": protocol.study()["worker"]["model"], "E": 0.0, "Q": 80.0}
    return pd.DataFrame(
        [
            {**row, "run_id": "ACC-01.A1.r1", "repeat": 1, "D": 1.0, "S": 1.0},
            {**row, "run_id": "ACC-01.A1.r2", "repeat": 2, "D": 0.0, "S": 0.0, "Q": 40.0},
        ]
    )


def test_a_record_without_criterion_results_never_reads_as_every_criterion_passed():
    # The first run's record holds the oracle's results; the second's holds none (a run table's synthetic record).
    records = [
        {
            "run_id": "ACC-01.A1.r1",
            "criteria": [{"id": "recon_present", "passed": True, "required": True}],
            "judges": [{"judge_id": "J1", "score_0_100": 80.0, "accept": True, "criterion_scores": {}}],
        },
        {"run_id": "ACC-01.A1.r2", "judges": [{"judge_id": "J1", "score_0_100": 40.0, "accept": False}]},
    ]
    text = worked_scenario(records, _runs(), protocol.study()["worker"]["model"])
    accepted, rejected = text.split("\\paragraph{An accepted package.}")[1].split("\\paragraph{A rejected package.}")
    assert "Oracle: every criterion passed, so $D=1$" in accepted
    assert "Oracle: no criterion result recorded, so $D=0$" in rejected
    assert "J1: no criterion scores recorded (score 40.0, send back)" in rejected


def test_the_criteria_table_lets_long_ids_break_after_an_underscore():
    text = worked_scenario([], _runs(), protocol.study()["worker"]["model"])
    assert "\\texttt{recon\\_\\allowbreak names\\_\\allowbreak transposed\\_\\allowbreak cheque}" in text
