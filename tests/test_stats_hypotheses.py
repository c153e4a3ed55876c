"""H1-H7 return result objects with a summary that renders to LaTeX; the primary result is consistent."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from statsmodels.stats.multitest import multipletests

from pilot import protocol, runtable
from pilot.simulated import synthetic
from pilot.stats import estimators, hypotheses, primary


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
    for name, (t, c) in zip(result.contrasts.contrast, study.contrasts, strict=True):
        assert result.contrast(name).estimate == pytest.approx(acc.loc[t, "p_hat"] - acc.loc[c, "p_hat"])
    assert (
        (result.contrasts.ci_low <= result.contrasts.estimate) & (result.contrasts.estimate <= result.contrasts.ci_high)
    ).all()
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


def test_h1_to_h3_bind_their_contrasts_by_name_not_by_position(runs, tmp_path):
    import yaml

    data = yaml.safe_load(protocol.study().path.read_text(encoding="utf-8"))
    # The secondary contrasts listed in another order: H2 and H3 still test the contrasts their names give.
    data["inference"]["secondary_contrasts"].reverse()
    path = tmp_path / "study.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    moved = protocol.load_study(path)
    assert moved.contrasts[1] == ("A2", "A1")  # position 1 is now the macOS premium
    res = primary.primary_analysis(runs, seed=4, B=200, study=moved)
    h2, h3 = hypotheses.h2(runs, result=res, study=moved), hypotheses.h3(runs, result=res, study=moved, seed=4)
    assert h2.statement == "shell premium A1-A0 > 0"
    assert h3.statement.startswith("self-repair premium A4-A3 >= 0")
    assert h2.table.quantity.iloc[0] == "p(A1) - p(A0)"
    assert h2.table.p_holm.iloc[0] == res.contrast("A1-A0").p_holm


def test_h5_rates_are_the_violation_shares(runs):
    h = hypotheses.h5(runs, B=300, n_permutations=2000)
    rows = runtable.primary_rows(runs)
    est = estimators.scenario_weighted(rows, "E")
    np.testing.assert_allclose(h.summary.estimate.iloc[:5], est.to_numpy())


def test_h5_reads_each_arms_access_rank_from_the_arms(runs):
    import dataclasses

    arms = protocol.arms()
    h = hypotheses.h5(runs, B=300, n_permutations=2000, arms=arms)
    # The ranks reversed (A0 = 4, ..., A4 = 0): every scenario's least-squares slope changes sign, so does their mean.
    flipped = {a: dataclasses.replace(arm, access_rank=4 - arm.access_rank) for a, arm in arms.items()}
    r = hypotheses.h5(runs, B=300, n_permutations=2000, arms=flipped)
    slope, flipped_slope = h.table.estimate.iloc[-1], r.table.estimate.iloc[-1]
    assert slope != 0 and flipped_slope == pytest.approx(-slope, abs=1e-12)
    # The per-arm rates do not depend on the ranks.
    np.testing.assert_allclose(h.table.estimate.iloc[:5].astype(float), r.table.estimate.iloc[:5].astype(float))


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


def _only_violations_in(runs, arm: str, scenario_count: int):
    """The run table with E = 0 everywhere except every run of ``arm`` in the first ``scenario_count`` scenarios."""
    df = runs.copy()
    df["E"] = False
    first = sorted(runtable.primary_rows(df)["scenario"].unique())[:scenario_count]
    df.loc[(df["arm"] == arm) & df["scenario"].isin(first), "E"] = True
    return df


def test_h5_reads_its_limit_from_the_protocol_and_names_the_part_that_fails(runs):
    limit = protocol.study()["hypotheses"]["violation_rate_max"]
    assert limit == 0.10  # the preregistered 10 per cent
    # One scenario of ten with every A1 run a violation: A1's rate is exactly 1/10, which is not below a strict 0.1.
    h = hypotheses.h5(_only_violations_in(runs, "A1", 1), B=200, n_permutations=500)
    assert h.summary.set_index("quantity").loc["violation rate A1", "estimate"] == pytest.approx(0.1)
    assert h.verdict == "not consistent"
    assert h.failing[0] == "A1's rate 0.100 is not below 0.1"
    assert "highest rate 0.100 (A1)" in h.estimate
    # No violation anywhere: every part holds and nothing is named.
    clean = hypotheses.h5(_only_violations_in(runs, "A1", 0), B=200, n_permutations=500)
    assert clean.verdict == "consistent" and clean.failing == ()


def test_the_headline_is_the_contrast_row_in_words(runs, result):
    h = hypotheses.h2(runs, result=result)
    c = result.contrast("A1-A0")
    assert h.estimate == f"{c.estimate:.3f}".replace("-", "\u2212")
    assert h.interval == f"{c.ci_low:.3f} to {c.ci_high:.3f}".replace("-", "\u2212")
    assert h.test.startswith("Holm-adjusted p ")
    if h.verdict == "not consistent":
        assert h.failing and all("not above 0" in f or "not below 0.05" in f for f in h.failing)
    row = hypotheses.overview([h]).iloc[0]
    assert row["estimate"] == h.estimate and row["failing"] == "; ".join(h.failing)


def test_h7_acceptance_by_occupation_against_scipy(runs):
    from scipy.stats import chi2_contingency

    h = hypotheses.h7(runs)
    rows = runtable.primary_rows(runs)
    study = protocol.study()
    acc = (rows["D"] == 1) & (~rows["E"].astype(bool)) & (rows["Q"] >= study.q)
    scored = rows["Q"].notna()
    by = (
        pd.DataFrame({"occupation": rows["occupation"], "acc": acc & scored, "scored": scored})
        .groupby("occupation")
        .sum()
    )
    t = h.summary.set_index("scenario").drop(index="pooled")
    for occ, share in zip(t["occupation"], t["share_accepted"], strict=True):
        assert float(share) == pytest.approx(by.loc[occ, "acc"] / by.loc[occ, "scored"])
    chi2, p, dof, _ = chi2_contingency(
        np.column_stack([by["acc"], by["scored"] - by["acc"]]).astype(float), correction=False
    )
    assert (
        f"acceptance: chi2 = {chi2:.2f} (df {dof}), p = {p:.3f}"
        in h.summary.set_index("scenario").loc["pooled", "occupation"]
    )
    assert h.interval == "n/a" and "chi-square p" in h.test


def test_h5_flags_a_slope_interval_that_ends_on_a_heavy_lattice_point(runs):
    # Every A1 run a violation in 3 scenarios of 10: each of those scenarios' slope of (0, 1, 0, 0, 0) on ranks 0..4
    # is -1/10 by hand, the other 7 are 0. A resample of the 7 alone has probability 0.7^10 = 0.028 > 0.025, so 0 lies
    # inside the exact percentile interval whatever the Monte Carlo draw gives: the interval is flagged, not read.
    h = hypotheses.h5(_only_violations_in(runs, "A1", 3), B=400, n_permutations=500)
    slope = h.summary.set_index("quantity").loc["slope per access step"]
    assert slope.estimate == pytest.approx(-0.03)
    assert "7 of 10 scenarios have 0.000" in slope.note and "0.028 > 0.025" in slope.note
    assert h.interval.endswith("(an end on a lattice point: not read against zero)")
    assert "not read against zero" in h.remark and "excludes zero" not in h.remark
