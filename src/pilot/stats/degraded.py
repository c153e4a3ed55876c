"""Degraded run tables: the shapes a real study's table takes when something is missing.

A node that never came up leaves an arm absent; a judge outage leaves an arm
(or every run) unjudged, or one judge per run; a short study has two repeats;
a crash leaves a scenario missing from an arm; a hard scenario set or an easy
one gives an arm (or every arm) at 0% or 100% acceptance. :func:`degrade`
turns a valid table into each of these, still valid under
:func:`pilot.runtable.validate_runtable`, so that the analyses can be
exercised on them (``tests/test_stats_degraded.py``, the property-based tests).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from pilot import protocol, runtable

KINDS = (
    "absent_arm",
    "unjudged_arm",
    "single_judge",
    "no_judges",
    "two_repeats",
    "scenario_missing_from_arm",
    "all_fail",
    "all_success",
    "arm_at_zero",
    "arm_at_one",
)


def rejudge(df: pd.DataFrame, scores: np.ndarray, study: protocol.Study | None = None) -> pd.DataFrame:
    """``df`` with the judges' scores replaced by ``scores`` (runs x judges, NaN: missing) and Q, n_judges,
    the accept votes and S recomputed as the schema defines them."""
    study = study or protocol.study()
    out = df.copy()
    jcols = [runtable.judge_column(j) for j in runtable.judge_ids(study)]
    scores = np.asarray(scores, dtype=float)
    for k, c in enumerate(jcols):
        out[c] = scores[:, k]
    n = (~np.isnan(scores)).sum(axis=1)
    with np.errstate(invalid="ignore"):
        Q = np.where(n > 0, np.nansum(scores, axis=1) / np.maximum(n, 1), np.nan)
    out["Q"] = Q
    out["n_judges"] = n
    out["judge_accept_votes"] = np.minimum(out["judge_accept_votes"].to_numpy(dtype=int), n)
    return _recompute_s(out, study)


def _recompute_s(df: pd.DataFrame, study: protocol.Study) -> pd.DataFrame:
    S = runtable.acceptance(
        df["D"].to_numpy(dtype=float), df["E"].to_numpy(dtype=float), df["Q"].to_numpy(dtype=float), study.q
    )
    df["S"] = pd.array([None if np.isnan(s) else bool(s) for s in S], dtype="boolean")
    return df


def _scores(df: pd.DataFrame, study: protocol.Study) -> np.ndarray:
    scores: np.ndarray = df[[runtable.judge_column(j) for j in runtable.judge_ids(study)]].to_numpy(dtype=float)
    return scores


def _set_outcome(df: pd.DataFrame, mask: np.ndarray, accepted: bool, study: protocol.Study) -> pd.DataFrame:
    """Make the runs under ``mask`` all accepted (D, no violation, every judge at 100) or all not accepted (D false)."""
    out = df.copy()
    m = np.asarray(mask, dtype=bool)
    if accepted:
        out.loc[m, "D"] = True
        out.loc[m, "E"] = False
        out.loc[m, "E_reasons"] = None
        sc = _scores(out, study)
        sc[m] = np.where(np.isnan(sc[m]), np.nan, 100.0)
        return rejudge(out, sc, study)
    out.loc[m, "D"] = False
    return _recompute_s(out, study)


def degrade(
    df: pd.DataFrame,
    kind: str,
    *,
    arm: str | None = None,
    scenario: str | None = None,
    study: protocol.Study | None = None,
) -> pd.DataFrame:
    """``df`` degraded in one of the ways of :data:`KINDS` (``arm`` and ``scenario`` choose where)."""
    study = study or protocol.study()
    treated, control = study.primary_contrast.arms
    df = df.reset_index(drop=True)
    makers: dict[str, Callable[[], pd.DataFrame]] = {
        "absent_arm": lambda: df[df["arm"] != (arm or "A2")],
        "unjudged_arm": lambda: rejudge(
            df, np.where((df["arm"] == (arm or treated)).to_numpy()[:, None], np.nan, _scores(df, study)), study
        ),
        "single_judge": lambda: _single_judge(df, study),
        "no_judges": lambda: rejudge(df, np.full(_scores(df, study).shape, np.nan), study),
        "two_repeats": lambda: df[df["repeat"] <= 2],
        "scenario_missing_from_arm": lambda: df[
            ~((df["arm"] == (arm or treated)) & (df["scenario"] == (scenario or sorted(df["scenario"].unique())[0])))
        ],
        "all_fail": lambda: _set_outcome(df, np.ones(len(df), bool), False, study),
        "all_success": lambda: _set_outcome(df, np.ones(len(df), bool), True, study),
        "arm_at_zero": lambda: _set_outcome(df, (df["arm"] == (arm or control)).to_numpy(), False, study),
        "arm_at_one": lambda: _set_outcome(df, (df["arm"] == (arm or treated)).to_numpy(), True, study),
    }
    if kind not in makers:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    return runtable.validate_runtable(
        makers[kind]().reset_index(drop=True), source=f"run table degraded ({kind})", study=study
    )


def _single_judge(df: pd.DataFrame, study: protocol.Study) -> pd.DataFrame:
    """Only one judge's score per run: the first available one, the others removed."""
    sc = _scores(df, study)
    keep = np.full(sc.shape, np.nan)
    for i, row in enumerate(sc):
        avail = np.flatnonzero(~np.isnan(row))
        if avail.size:
            k = avail[i % avail.size]  # rotate, so every judge column keeps some runs
            keep[i, k] = row[k]
    return rejudge(df, keep, study)
