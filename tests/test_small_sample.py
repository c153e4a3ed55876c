"""Small-sample sensitivities, each against a named reference or a hand calculation.

References: scipy's one-sample t interval (``ttest_1samp(...).confidence_interval``)
for the studentised interval; statsmodels' GLM with ``use_t=True`` (t with G - 1
degrees of freedom for cluster-robust errors) for the t(G - 1) reading of the
logistic models; hand enumerations of a three-scenario table for the wild
cluster bootstrap; (k / J)^J worked by hand for the lattice flag; tau-bench's
pass^k, C(c, k) / C(n, k), by hand on a small table.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from pilot.stats import estimability, logistic, small_sample


def test_t_interval_equals_scipy_one_sample_interval() -> None:
    d = np.array([0.0, 1 / 3, -1 / 3, 2 / 3, 0.0, 1.0, 0.0, 1 / 3, 0.0, -2 / 3])
    ref = stats.ttest_1samp(d, 0.0).confidence_interval(0.95)
    lo, hi = small_sample.t_interval(d)
    assert lo == pytest.approx(ref.low, abs=1e-12)
    assert hi == pytest.approx(ref.high, abs=1e-12)


def test_t_interval_skips_missing_scenarios_and_needs_two() -> None:
    d = np.array([0.5, np.nan, 0.0, 1.0])
    ref = stats.ttest_1samp([0.5, 0.0, 1.0], 0.0).confidence_interval(0.95)
    assert small_sample.t_interval(d) == pytest.approx((ref.low, ref.high), abs=1e-12)
    assert all(math.isnan(v) for v in small_sample.t_interval(np.array([0.5])))


def test_weighted_se_reduces_to_the_sample_standard_error_with_equal_weights() -> None:
    d = np.array([0.2, 0.4, 0.9, -0.1])
    m, se, J = small_sample.weighted_mean_se(d, np.full(4, 3.0))
    assert (m, J) == (pytest.approx(d.mean()), 4)
    assert se == pytest.approx(d.std(ddof=1) / 2.0, abs=1e-12)


def test_wild_cluster_bootstrap_by_hand_on_three_scenarios() -> None:
    # d = (0, 0.5, 1): mean 0.5, se = 0.5 / sqrt(3) = 0.288675.
    # WCU: x* = 0.5 + v (-0.5, 0, 0.5); the middle residual is 0, so of the 8 sign vectors
    # 4 give t* = 0, 2 give (1/6 - 1/2) / (1/6) = -2 and 2 give +2: both quantiles are -/+2,
    # the interval 0.5 -/+ 2 x 0.288675.
    # WCR: x* = v (0, 0.5, 1); t_obs = 0.5 / 0.288675 = 1.732; |t*| = 1.732 for v2 = v3 (4 of 8)
    # and 0.378 otherwise (m* = -1/6, se* = sqrt(7)/6), so p = 4 / 8.
    res = small_sample.wild_cluster_bootstrap(np.array([0.0, 0.5, 1.0]))
    se = 0.5 / math.sqrt(3)
    assert res.weights == "Rademacher, enumerated" and res.n_draws == 8 and res.n_clusters == 3
    assert res.estimate == pytest.approx(0.5)
    assert res.ci_low == pytest.approx(0.5 - 2 * se, abs=1e-12)
    assert res.ci_high == pytest.approx(0.5 + 2 * se, abs=1e-12)
    assert res.p_value == pytest.approx(0.5, abs=1e-12)


def test_wild_cluster_bootstrap_draws_webb_weights_beyond_enumeration_and_is_seeded() -> None:
    rng_values = np.random.default_rng(3).normal(0.2, 0.3, 16)
    a = small_sample.wild_cluster_bootstrap(rng_values, max_enumerate=1_000, rng=np.random.default_rng(9))
    b = small_sample.wild_cluster_bootstrap(rng_values, max_enumerate=1_000, rng=np.random.default_rng(9))
    assert a == b and a.weights == "Webb, drawn" and a.n_draws == small_sample.WEBB_DRAWS
    # The bootstrap-t interval is centred near the estimate and of the t interval's order of width.
    lo, hi = small_sample.t_interval(rng_values)
    assert a.ci_low < a.estimate < a.ci_high
    assert 0.5 < (a.ci_high - a.ci_low) / (hi - lo) < 2.0
    assert set(np.unique(np.abs(small_sample.WEBB_POINTS)).round(6)) == {0.707107, 1.0, 1.224745}


def test_t_reference_matches_statsmodels_use_t_for_a_cluster_robust_logit() -> None:
    from statsmodels.genmod import families
    from statsmodels.genmod.generalized_linear_model import GLM

    rng = np.random.default_rng(1)
    groups = np.repeat(np.arange(10), 6)
    x = rng.integers(0, 2, 60).astype(float)
    y = (rng.random(60) < 0.3 + 0.3 * x).astype(float)
    X = np.column_stack([np.ones(60), x])
    fit = logistic.fit(y, X, ["intercept", "x"], groups)
    ref = GLM(y, X, family=families.Binomial()).fit(cov_type="cluster", cov_kwds={"groups": groups}, use_t=True)
    assert ref.df_resid_inference == 9
    np.testing.assert_allclose(fit.p_t, ref.pvalues, rtol=1e-10)
    np.testing.assert_allclose(np.column_stack([fit.ci_t_low, fit.ci_t_high]), ref.conf_int(), rtol=1e-10)
    # The preregistered normal reading is unchanged beside it, and smaller.
    assert np.all(fit.p_value < fit.p_t)


def test_t_reference_by_hand() -> None:
    # A normal two-sided p of 0.003 is z = 2.968; against t(9) the same statistic gives 0.0158.
    z = stats.norm.isf(0.0015)
    p, lo, hi = small_sample.t_reference(z, 1.0, 10)
    assert p == pytest.approx(2 * stats.t.sf(z, 9))
    assert round(p, 3) == 0.016
    assert (lo, hi) == pytest.approx((z - 2.2621571627, z + 2.2621571627), abs=1e-9)
    assert all(math.isnan(v) for v in small_sample.t_reference(1.0, 0.5, 1))


def test_two_lattice_notes_survive_joining_with_other_notes_whole() -> None:
    # Two scenarios, one at -0.5 and one at 0: each value is reached by a resample with probability 0.5^2 = 0.25,
    # and an interval from -0.5 to 0 ends on both. Joined with another note, neither note loses its tail.
    values = np.array([-0.5, 0.0])
    flag = small_sample.lattice_flag(-0.5, 0.0, values)
    joined = estimability.join_notes("zero-width interval", flag)
    assert joined.count("percentile end on a lattice point") == 2
    assert joined.count("so the exact interval contains it)") == 2
    assert (
        "1 of 2 scenarios have \u22120.500, which a resample reaches with probability at least 0.250 > 0.025" in joined
    )
    assert joined.count("(") == joined.count(")")


def test_lattice_flag_the_h5_case_by_hand() -> None:
    # Seven of ten scenarios have slope 0: a resample of them alone has mean 0 with probability
    # at least 0.7^10 = 0.0282 > 0.025, so the exact 95% percentile interval contains 0.
    slopes = np.array([0.0] * 7 + [-0.1, -0.05, -0.2])
    assert 0.7**10 == pytest.approx(0.028248, abs=1e-6)
    atoms = small_sample.lattice_atoms(slopes)
    assert [(a.value, a.k, round(a.mass, 6)) for a in atoms] == [(0.0, 7, 0.028248)]
    # A Monte Carlo interval that ends below zero is flagged, and so is one ending on zero.
    assert "7 of 10 scenarios have 0.000" in small_sample.lattice_flag(-0.09, -0.004, slopes)
    assert small_sample.lattice_flag(-0.09, 0.0, slopes)
    # Six zeros of ten: 0.6^10 = 0.006 < 0.025, no flag.
    six = np.array([0.0] * 6 + [-0.1, -0.05, -0.2, -0.3])
    assert small_sample.lattice_atoms(six) == []
    assert small_sample.lattice_flag(-0.12, -0.004, six) == ""
    # An interval that contains the atom strictly inside is not flagged.
    assert small_sample.lattice_flag(-0.09, 0.01, slopes) == ""


def test_pass_hat_k_by_hand() -> None:
    # Three scenarios of three repeats: 3/3, 2/3, 0/3 accepted.
    # pass^1 = (1 + 2/3 + 0) / 3 = 5/9; pass^2 = (1 + C(2,2)/C(3,2) + 0) / 3 = (1 + 1/3) / 3 = 4/9;
    # pass^3 = (1 + 0 + 0) / 3 = 1/3 (accepted in all three repeats).
    c, n = np.array([3, 2, 0]), np.array([3, 3, 3])
    assert small_sample.pass_hat_k(c, n, 1).mean() == pytest.approx(5 / 9)
    assert small_sample.pass_hat_k(c, n, 2).mean() == pytest.approx(4 / 9)
    assert small_sample.pass_hat_k(c, n, 3).mean() == pytest.approx(1 / 3)
    # A scenario with fewer scored repeats than k has no pass^k.
    assert np.isnan(small_sample.pass_hat_k(np.array([1]), np.array([2]), 3)[0])
