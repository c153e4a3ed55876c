"""H1-H7 return result objects with a summary that renders to LaTeX; the primary result is consistent."""

from __future__ import annotations

import numpy as np
import pytest
from statsmodels.stats.multitest import multipletests

from pilot import protocol, runtable
from pilot.stats import estimators, hypotheses, primary
from pilot.simulated import synthetic


@pytest.fixture(scope="module")
def runs():
    return runtable.validate_runtable(synthetic.generate_runtable(31))


@pytest.fixture(scope="module")
def result(runs):
    return primary.primary_analysis(runs, seed=4, B=1000)


def test_primary_contrasts_follow_the_protocol(runs, result):
    study = protocol.study()
    assert list(result.contrasts.contrast) == [estimators.contrast_name(c) for c in study.contrasts]
    assert list(result.contrasts.role) == ["primary", "secondary", "secondary", "secondary"]
    assert result.contrasts.exact.all()  # J = 10: 1,024 sign vectors <= 20,000
    sec = result.contrasts.iloc[1:]
    np.testing.assert_allclose(sec.p_holm, multipletests(sec.p_value, method="holm")[1])
    # The primary contrast stands alone: no adjusted p (empty in the reported summary).
    assert np.isnan(result.contrasts.p_holm.iloc[0]) and result.summary.p_holm.iloc[0] == ""
    acc = result.acceptance.set_index("arm")
    for name, (t, c) in zip(result.contrasts.contrast, study.contrasts):
        assert result.contrast(name).estimate == pytest.approx(acc.loc[t, "p_hat"] - acc.loc[c, "p_hat"])
    assert ((result.contrasts.ci_low <= result.contrasts.estimate) & (result.contrasts.estimate <= result.contrasts.ci_high)).all()
    assert result.simulated


def test_every_hypothesis_has_a_latex_summary_and_a_verdict(runs, result):
    hs = hypotheses.all_hypotheses(runs, result=result, seed=4, B=500)
    assert [h.id for h in hs] == [f"H{i}" for i in range(1, 8)]
    for h in hs:
        assert not h.summary.empty
        assert "\\begin{tabular}" in h.to_latex()
        assert h.verdict_class in ("consistent", "not consistent", "not estimable", "exploratory")
    h7 = hs[-1]
    assert h7.exploratory and h7.verdict == "exploratory" and "exploratory" in h7.statement
    assert all(not h.exploratory for h in hs[:-1])
    ov = hypotheses.overview(hs)
    assert list(ov.hypothesis) == [h.id for h in hs]


def test_h1_verdict_follows_its_criterion(runs, result):
    h = hypotheses.h1(runs, result=result)
    c = result.contrast("A3-A1")
    assert h.verdict == ("consistent" if c.estimate > 0 and c.p_value < 0.05 else "not consistent")
    assert h.summary.estimate.iloc[0] == pytest.approx(c.estimate)


def test_h5_rates_are_the_violation_shares(runs):
    h = hypotheses.h5(runs, B=300, n_permutations=2000)
    rows = runtable.primary_rows(runs)
    est = estimators.scenario_weighted(rows, "E")
    np.testing.assert_allclose(h.summary.estimate.iloc[:5], est.to_numpy())


def test_h6_lowest_arm_and_shares(runs):
    h = hypotheses.h6(runs, B=400)
    assert h.summary.share_lowest.sum() == pytest.approx(1.0)
    lowest = h.summary.set_index("arm").cost_per_accepted.idxmin()
    assert h.verdict == ("consistent" if lowest in ("A1", "A3") else "not consistent")


def test_h4_detects_a_planted_depth_gradient():
    model = synthetic.SyntheticModel.load()
    model.params["completion"]["depth_per_level"] = -1.2  # a strong planted gradient
    df = synthetic.generate_runtable(5, n_scenarios=30, model=model, sensitivity_wave=False)
    h = hypotheses.h4(df)
    pooled = h.summary.iloc[0]
    assert pooled.depth_slope < 0 and pooled.depth_p < 0.05
