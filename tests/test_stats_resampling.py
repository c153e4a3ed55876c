"""The vectorised bootstrap and sign-flip test against scipy.stats and statsmodels on the same data."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.multitest import multipletests

from pilot.stats import primary, resampling


def _mean(x, axis):
    return np.mean(x, axis=axis)


@pytest.mark.parametrize("seed,J", [(1, 10), (2, 10), (3, 8), (4, 6)])
def test_exact_sign_flip_equals_scipy_permutation_test(seed: int, J: int):
    rng = np.random.default_rng(seed)
    # Differences of repeat means of three runs: many ties, as in the study.
    d = (rng.integers(0, 4, J) - rng.integers(0, 4, J)) / 3.0
    ours = resampling.sign_flip_test(d, n_permutations=20_000)
    ref = stats.permutation_test(
        (d,), _mean, permutation_type="samples", n_resamples=20_000, vectorized=True, alternative="two-sided"
    )
    assert ours.exact and ours.n_permutations == 2**J
    assert ours.p_value[0] == ref.pvalue  # exact enumeration: the same number, not merely close
    assert ours.statistic[0] == pytest.approx(ref.statistic)


def test_exact_sign_flip_batches_columns_identically():
    rng = np.random.default_rng(5)
    D = rng.normal(0.1, 0.3, (10, 4))
    batch = resampling.sign_flip_test(D, n_permutations=20_000)
    for k in range(4):
        ref = stats.permutation_test((D[:, k],), _mean, permutation_type="samples", n_resamples=20_000, vectorized=True)
        assert batch.p_value[k] == pytest.approx(ref.pvalue, abs=1e-12)


def test_randomised_sign_flip_agrees_with_scipy_within_monte_carlo_error():
    # J=16: 2^16 > 20,000, so both draw random sign vectors.
    rng = np.random.default_rng(6)
    d = rng.normal(0.12, 0.3, 16)
    ours = resampling.sign_flip_test(d, n_permutations=20_000, rng=np.random.default_rng(1))
    ref = stats.permutation_test(
        (d,), _mean, permutation_type="samples", n_resamples=20_000, vectorized=True, rng=np.random.default_rng(2)
    )
    assert not ours.exact
    p = ref.pvalue
    se = np.sqrt(2 * p * (1 - p) / 20_000)  # difference of two independent Monte Carlo estimates
    assert abs(ours.p_value[0] - p) < 4 * se + 1e-4


def test_sign_flip_ignores_missing_scenarios():
    d = np.array([0.3, -0.1, np.nan, 0.2, 0.4, np.nan])
    full = resampling.sign_flip_test(d)
    kept = resampling.sign_flip_test(d[~np.isnan(d)])
    assert full.p_value[0] == pytest.approx(kept.p_value[0])
    assert full.statistic[0] == pytest.approx(np.nanmean(d))


@pytest.mark.parametrize("seed,ties", [(11, True), (12, True), (13, False)])
def test_percentile_bootstrap_within_monte_carlo_tolerance_of_scipy(seed: int, ties: bool):
    rng = np.random.default_rng(seed)
    d = (rng.integers(0, 4, 10) - rng.integers(0, 4, 10)) / 3.0 if ties else rng.normal(0.1, 0.3, 10)
    B = 20_000
    counts = resampling.bootstrap_counts(np.random.default_rng(seed + 100), 10, B)
    lo, hi = resampling.percentile_interval(resampling.bootstrap_means(d, counts))
    ref = stats.bootstrap((d,), np.mean, n_resamples=B, method="percentile", rng=np.random.default_rng(seed + 200))
    # Tolerance in probability: each end must fall between scipy's quantiles at
    # 2.5% (97.5%) plus or minus four Monte Carlo standard errors of the
    # difference of two independent estimates of a quantile's level,
    # sqrt(2a(1-a)/B). Stated this way it also holds for tied data, whose
    # bootstrap means sit on a lattice.
    dist = ref.bootstrap_distribution
    for value, a in ((lo, 0.025), (hi, 0.975)):
        tol = 4 * np.sqrt(2 * a * (1 - a) / B)
        assert np.quantile(dist, a - tol) - 1e-12 <= value <= np.quantile(dist, a + tol) + 1e-12
    if not ties:
        assert lo == pytest.approx(ref.confidence_interval.low, abs=0.02)
        assert hi == pytest.approx(ref.confidence_interval.high, abs=0.02)


def test_bootstrap_counts_are_resamples_of_size_J():
    c = resampling.bootstrap_counts(np.random.default_rng(0), 7, 500)
    assert c.shape == (500, 7) and (c.sum(axis=1) == 7).all()
    # Each scenario is drawn with probability 1/J: mean count 1.
    assert c.mean() == pytest.approx(1.0) and abs(c.mean(axis=0) - 1).max() < 0.15


def test_weighted_bootstrap_mean_by_hand():
    x = np.array([[1.0, 0.0], [0.0, np.nan], [0.5, 1.0]])
    w = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(resampling.weighted_mean(x, w), [(1 + 0 + 1.5) / 6, (0 + 3) / 4])
    counts = np.array([[2.0, 0.0, 1.0], [0.0, 3.0, 0.0]])
    reps = resampling.bootstrap_means(x, counts, w)
    np.testing.assert_allclose(reps[0], [(2 * 1 + 3 * 0.5) / (2 + 3), (2 * 0 + 3 * 1) / (2 + 3)])
    assert reps[1, 0] == 0.0 and np.isnan(reps[1, 1])  # no resampled scenario has a value


def test_joint_ratio_bootstrap_by_hand():
    num = np.array([2.0, 4.0, 6.0])
    den = np.array([1.0, 0.0, 2.0])
    counts = np.array([[1.0, 1.0, 1.0], [0.0, 3.0, 0.0], [2.0, 0.0, 1.0]])
    reps = resampling.bootstrap_ratios(num, den, counts)
    np.testing.assert_allclose(reps[[0, 2]], [12 / 3, 10 / 4])
    assert np.isinf(reps[1])


def test_holm_equals_statsmodels_and_a_hand_example():
    p = [0.01, 0.04, 0.03]
    np.testing.assert_allclose(primary.holm(p), [0.03, 0.06, 0.06])
    rng = np.random.default_rng(3)
    for _ in range(5):
        q = rng.uniform(0, 0.2, 3)
        np.testing.assert_allclose(primary.holm(q), multipletests(q, method="holm")[1])
    # The family keeps its three members: one without a p-value enters as p = 1, so the
    # others are adjusted as in a family of three, and it has no adjusted value itself.
    out = primary.holm([0.01, np.nan, 0.02])
    assert np.isnan(out[1]) and out[0] == pytest.approx(0.03) and out[2] == pytest.approx(0.04)
    np.testing.assert_allclose(out[[0, 2]], multipletests([0.01, 1.0, 0.02], method="holm")[1][[0, 2]])


def test_batched_holm_equals_statsmodels_row_by_row():
    rng = np.random.default_rng(8)
    p = rng.uniform(0, 0.3, (12, 3))
    p[5] = [0.02, 0.02, 0.01]  # ties
    ours = primary.holm_many(p)
    for row, adj in zip(p, ours, strict=True):
        np.testing.assert_allclose(adj, multipletests(row, method="holm")[1], rtol=0, atol=1e-15)


def test_percentile_interval_matches_numpy_linear_percentiles():
    r = np.random.default_rng(0).normal(size=(5001, 7))
    lo, hi = resampling.percentile_interval(r)
    np.testing.assert_allclose(lo, np.percentile(r, 2.5, axis=0), rtol=0, atol=1e-12)
    np.testing.assert_allclose(hi, np.percentile(r, 97.5, axis=0), rtol=0, atol=1e-12)
    r[3, 2] = np.nan  # the NaN-aware path gives the same on the other columns
    lo2, hi2 = resampling.percentile_interval(r)
    np.testing.assert_allclose(np.delete(lo2, 2), np.delete(lo, 2), atol=1e-12)
