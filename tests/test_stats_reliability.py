"""Reliability across repeats (pass^k, accepted in all R) and the small-sample table of the contrasts.

pass^k is checked by hand on a small table; the small-sample readings of each
contrast are checked against scipy's one-sample t interval on the same
scenario differences, with the preregistered interval and test unchanged.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from pilot import protocol, runtable
from pilot.simulated import synthetic
from pilot.stats import estimators, primary, sensitivity


@pytest.fixture(scope="module")
def runs():
    return runtable.validate_runtable(synthetic.generate_runtable(31))


def _set_accepted(df, mask, accepted: bool):
    df.loc[mask, "D"] = accepted
    df.loc[mask, "E"] = False
    df.loc[mask, "Q"] = 100.0 if accepted else 0.0
    return df


def test_pass_hat_k_and_accepted_in_all_repeats_by_hand(runs):
    study = protocol.study()
    worker = study["worker"]["model"]
    scen = sorted(runs["scenario"].unique())[:3]
    df = runs[runs["scenario"].isin(scen) & (runs["model"] == worker)].copy()
    df = _set_accepted(df, df.index, False)
    a1 = df["arm"] == "A1"
    # A1: scenario 1 accepted in 3 of 3 repeats, scenario 2 in 2 of 3, scenario 3 in none.
    _set_accepted(df, a1 & (df["scenario"] == scen[0]), True)
    _set_accepted(df, a1 & (df["scenario"] == scen[1]) & (df["repeat"] <= 2), True)
    assert df[a1].groupby("scenario").size().tolist() == [3, 3, 3]
    res = sensitivity.reliability(df, study=study).table.set_index("arm")
    # pass^1 = (1 + 2/3 + 0) / 3 = 5/9; pass^2 = (1 + C(2,2)/C(3,2) + 0) / 3 = 4/9; pass^3 = 1/3.
    assert res.loc["A1", "pass_1"] == pytest.approx(5 / 9)
    assert res.loc["A1", "pass_2"] == pytest.approx(4 / 9)
    assert res.loc["A1", "pass_3"] == pytest.approx(1 / 3)
    assert res.loc["A1", "accepted_in_all_R"] == pytest.approx(1 / 3)
    assert res.loc["A0", "pass_1"] == 0.0 and res.loc["A0", "accepted_in_all_R"] == 0.0
    # pass^1 is the arm's acceptance as the primary analysis estimates it.
    acc = primary.primary_analysis(df, seed=1, B=200).acceptance.set_index("arm")
    assert res.loc["A1", "pass_1"] == pytest.approx(acc.loc["A1", "p_hat"])


def test_small_sample_contrasts_sit_beside_the_preregistered_reading(runs):
    study = protocol.study()
    res = primary.primary_analysis(runs, seed=4, B=1000)
    tab = sensitivity.small_sample_contrasts(runs, study=study, result=res).table.set_index("contrast")
    rows = runtable.primary_rows(runs, study)
    layout = estimators.Layout.of(rows, study.arms)
    d = estimators.contrast_differences(
        layout.means(estimators.acceptance_values(rows, study.q)), layout, study.contrasts
    )
    for k, pair in enumerate(study.contrasts):
        name = estimators.contrast_name(pair)
        x = d[:, k][~np.isnan(d[:, k])]
        ref = stats.ttest_1samp(x, 0.0).confidence_interval(0.95)
        assert (tab.loc[name, "t_low"], tab.loc[name, "t_high"]) == pytest.approx((ref.low, ref.high), abs=1e-12)
        pre = res.contrast(name)
        assert (tab.loc[name, "pct_low"], tab.loc[name, "pct_high"], tab.loc[name, "p_sign_flip"]) == (
            pre.ci_low,
            pre.ci_high,
            pre.p_value,
        )
        assert tab.loc[name, "wild_low"] <= tab.loc[name, "estimate"] <= tab.loc[name, "wild_high"]
        assert 0 <= tab.loc[name, "p_wild"] <= 1
