"""The scenario x arm acceptance table: counts by hand, unscored runs apart, other models left out."""

from __future__ import annotations

import numpy as np
import pandas as pd

from pilot import protocol
from pilot.report.scenario_arm import scenario_arm_counts, scenario_arm_frame

WORKER = protocol.study()["worker"]["model"]
Q = protocol.study().q


def _run(sid, arm, D=True, E=False, Q_=80.0, model=WORKER):
    return {
        "scenario": sid,
        "occupation": {"X-01": "ops", "Y-01": "law"}[sid],
        "arm": arm,
        "D": D,
        "E": E,
        "Q": Q_,
        "model": model,
    }


def test_counts_by_hand():
    df = pd.DataFrame(
        [
            _run("X-01", "A1"),
            _run("X-01", "A1", D=False),
            _run("X-01", "A1", Q_=np.nan),  # 1 of 2 scored; one without S
            _run("X-01", "A3", E=True),
            _run("X-01", "A3", Q_=Q),  # E fails one; Q exactly q passes
            _run("Y-01", "A1", Q_=Q - 0.5),
            _run("Y-01", "A1"),  # just under q fails
            _run("Y-01", "A3", model="claude-sonnet-5-5"),  # another model: not counted
        ]
    )
    c = scenario_arm_counts(df).set_index(["scenario", "arm"])
    assert c.loc[("X-01", "A1"), ["runs", "scored", "accepted"]].tolist() == [3, 2, 1]
    assert c.loc[("X-01", "A3"), ["runs", "scored", "accepted"]].tolist() == [2, 2, 1]
    assert c.loc[("Y-01", "A1"), ["runs", "scored", "accepted"]].tolist() == [2, 2, 1]
    assert c.loc[("X-01", "A1"), "rate"] == 0.5 and ("Y-01", "A3") not in c.index
    t = scenario_arm_frame(c.reset_index(), ["A1", "A3"]).set_index("Scenario")
    assert t.loc["X-01", "A1"] == "1/2" and t.loc["X-01", "Runs without S"] == "A1: 1"
    assert t.loc["Y-01", "A3"] == "no run" and t.loc["Y-01", "Runs without S"] == "none"
