"""Acceptance per scenario and arm: how many of each cell's scored runs were accepted, beside the rate.

The primary estimate averages these cells with equal weight per scenario; the
table shows what it averages. A run counts as scored when its acceptance S is
known (Q from at least one judge); runs without S are counted apart in the
note, never as rejections.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from pilot import protocol, runtable
from pilot.stats.estimators import acceptance_values


def scenario_arm_counts(df: pd.DataFrame, study: protocol.Study | None = None) -> pd.DataFrame:
    """One row per (scenario, arm) of the worker model's runs: runs, scored, accepted and the rate (NaN with none
    scored)."""
    study = study or protocol.study()
    rows = runtable.primary_rows(df, study)
    s = acceptance_values(rows, study.q)
    frame = pd.DataFrame(
        {
            "scenario": rows["scenario"].astype(str),
            "occupation": rows["occupation"].astype(str),
            "arm": rows["arm"].astype(str),
            "scored": ~np.isnan(s),
            "accepted": np.nan_to_num(s) == 1,
        }
    )
    out = (
        frame.groupby(["scenario", "occupation", "arm"], sort=True)
        .agg(runs=("scored", "size"), scored=("scored", "sum"), accepted=("accepted", "sum"))
        .reset_index()
    )
    out[["runs", "scored", "accepted"]] = out[["runs", "scored", "accepted"]].astype(int)
    out["rate"] = out["accepted"] / out["scored"].where(out["scored"] > 0)  # NaN where none is scored
    return out


def scenario_arm_frame(counts: pd.DataFrame, arms: list[str]) -> pd.DataFrame:
    """The counts as a scenario x arm table of "accepted/scored" cells, with a note on unscored runs."""
    table = []
    for (sid, occ), g in counts.groupby(["scenario", "occupation"], sort=True):
        by_arm = g.set_index("arm")
        row = {"Scenario": sid, "Occupation": occ}
        unscored = []
        for a in arms:
            if a not in by_arm.index:
                row[a] = "no run"
                continue
            r = by_arm.loc[a]
            row[a] = f"{int(r.accepted)}/{int(r.scored)}" if r.scored else "none scored"
            if r.runs > r.scored:
                unscored.append(f"{a}: {int(r.runs - r.scored)}")
        row["Runs without S"] = ", ".join(unscored) or "none"
        table.append(row)
    return pd.DataFrame(table, columns=["Scenario", "Occupation", *arms, "Runs without S"])
