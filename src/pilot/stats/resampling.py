"""Vectorised scenario-cluster bootstrap and paired sign-flip permutation test.

Both work on scenario-level values: a ``(J, K)`` array holding, for each of J
scenarios, K statistics (per-arm repeat means, paired contrasts, ...), with
NaN where a scenario has no value for a statistic. One call handles all K
columns with one set of resamples, so every contrast of a study shares them.

The bootstrap draws scenario indices with replacement and turns them into a
``(B, J)`` matrix of counts, so each resampled (weighted) mean is one row of a
matrix product. The sign-flip test enumerates all ``2^J`` sign vectors when
that is no more than the permutation count (exact) and otherwise draws them;
its two-sided p-value is defined as in ``scipy.stats.permutation_test``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

# Relative tolerance for ties with the observed statistic, as scipy.stats.permutation_test uses.
_TIE_EPS = np.finfo(float).eps * 100


def bootstrap_counts(rng: np.random.Generator, J: int, B: int) -> np.ndarray:
    """A ``(B, J)`` matrix: how often each scenario appears in each of B resamples of size J."""
    idx = rng.integers(0, J, size=(B, J))
    flat = (idx + (np.arange(B) * J)[:, None]).ravel()
    return np.bincount(flat, minlength=B * J).reshape(B, J).astype(float)


def _as_2d(values: np.ndarray) -> tuple[np.ndarray, bool]:
    x = np.asarray(values, dtype=float)
    return (x[:, None], True) if x.ndim == 1 else (x, False)


def weighted_mean(values: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Per-column weighted mean over scenarios, skipping NaN (NaN when a column has no value)."""
    x, flat = _as_2d(values)
    w = np.ones(x.shape[0]) if weights is None else np.asarray(weights, dtype=float)
    valid = ~np.isnan(x)
    num = (np.where(valid, x, 0.0) * w[:, None]).sum(axis=0)
    den = (valid * w[:, None]).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)
    return out[0] if flat else out


def bootstrap_means(values: np.ndarray, counts: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Resampled weighted means, ``(B, K)``: each row uses one row of ``counts``."""
    x, flat = _as_2d(values)
    w = np.ones(x.shape[0]) if weights is None else np.asarray(weights, dtype=float)
    valid = ~np.isnan(x)
    out: np.ndarray
    if valid.all():  # every scenario has every statistic: one denominator for all columns
        out = (counts @ (x * w[:, None])) / (counts @ w)[:, None]
        return out[:, 0] if flat else out
    num = counts @ (np.where(valid, x, 0.0) * w[:, None])
    den = counts @ (valid * w[:, None])
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)
    return out[:, 0] if flat else out


def bootstrap_ratios(
    numerator: np.ndarray, denominator: np.ndarray, counts: np.ndarray, weights: np.ndarray | None = None
) -> np.ndarray:
    """Resampled ratios of weighted sums, numerator and denominator from the same resample (joint)."""
    n, flat = _as_2d(numerator)
    d, _ = _as_2d(denominator)
    w = np.ones(n.shape[0]) if weights is None else np.asarray(weights, dtype=float)
    valid = ~(np.isnan(n) | np.isnan(d))
    num = counts @ (np.where(valid, n, 0.0) * w[:, None])
    den = counts @ (np.where(valid, d, 0.0) * w[:, None])
    with np.errstate(invalid="ignore", divide="ignore"):
        out: np.ndarray = num / den
    return out[:, 0] if flat else out


def percentile_interval(replicates: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """The percentile interval of bootstrap replicates along axis 0 (NaN replicates ignored)."""
    a = (1 - level) / 2
    if not np.isnan(replicates).any():
        # One sort along the replicates and numpy's "linear" interpolation: faster than
        # np.percentile over many columns, the same numbers up to rounding.
        ordered = np.sort(replicates, axis=0)
        return _linear_quantile(ordered, a), _linear_quantile(ordered, 1 - a)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a statistic no resample can compute stays NaN
        lo, hi = np.nanpercentile(replicates, [100 * a, 100 * (1 - a)], axis=0)
    return lo, hi


def percentile_interval_infinite(replicates: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """The percentile interval of replicates that may be +inf (a ratio with a zero denominator), with no NaN.

    numpy's "linear" interpolation, except that an end whose interpolation
    touches an infinite replicate with a positive weight is infinite: the
    interval never reports a finite stand-in for an infinite ratio.
    """
    a = (1 - level) / 2
    ordered = np.sort(replicates, axis=0)
    ends = []
    for prob in (a, 1 - a):
        pos = prob * (ordered.shape[0] - 1)
        lo = int(np.floor(pos))
        hi = min(lo + 1, ordered.shape[0] - 1)
        frac = pos - lo
        below, above = ordered[lo], ordered[hi]
        with np.errstate(invalid="ignore"):
            lerp = below + frac * (above - below) if frac > 0 else below  # 0 x inf would be NaN
        ends.append(np.where(np.isinf(below) | ((frac > 0) & np.isinf(above)), np.inf, lerp))
    return ends[0], ends[1]


def _linear_quantile(ordered: np.ndarray, prob: float) -> np.ndarray:
    pos = prob * (ordered.shape[0] - 1)
    lo = int(np.floor(pos))
    hi = min(lo + 1, ordered.shape[0] - 1)
    frac = pos - lo
    q: np.ndarray = ordered[lo] + frac * (ordered[hi] - ordered[lo])
    return q


@dataclass(frozen=True)
class SignFlipResult:
    statistic: np.ndarray  # observed weighted mean per column
    p_value: np.ndarray  # two-sided
    exact: bool
    n_permutations: int  # sign vectors used (2^J when exact)


def sign_vectors(J: int, n_permutations: int, rng: np.random.Generator) -> tuple[np.ndarray, bool]:
    """All ``2^J`` sign vectors when that is at most ``n_permutations`` (exact), else that many random ones."""
    if J < 63 and 2**J <= n_permutations:
        codes = np.arange(2**J)[:, None]
        return np.where((codes >> np.arange(J)) & 1, -1.0, 1.0), True
    return np.where(rng.random((n_permutations, J)) < 0.5, -1.0, 1.0), False


def sign_flip_test(
    differences: np.ndarray,
    *,
    n_permutations: int = 20_000,
    rng: np.random.Generator | None = None,
    weights: np.ndarray | None = None,
    signs: np.ndarray | None = None,
) -> SignFlipResult:
    """Paired sign-flip permutation test of ``H0: the scenario differences are symmetric about zero``.

    The statistic is the (weighted) mean of the scenario differences; a
    scenario without a difference (NaN) contributes nothing. The two-sided
    p-value is ``min(1, 2 min(P(T >= t), P(T <= t)))`` over the sign vectors,
    with the observed one counted in the randomised case, as in
    ``scipy.stats.permutation_test``.
    """
    x, flat = _as_2d(differences)
    J = x.shape[0]
    w = np.ones(J) if weights is None else np.asarray(weights, dtype=float)
    valid = ~np.isnan(x)
    wx = np.where(valid, x, 0.0) * w[:, None]
    den = (valid * w[:, None]).sum(axis=0)
    den = np.where(den > 0, den, np.nan)
    if signs is None:
        signs, exact = sign_vectors(J, n_permutations, rng or np.random.default_rng(0))
    else:
        exact = signs.shape[0] == 2**J
    observed = wx.sum(axis=0) / den
    null = (signs @ wx) / den
    gamma = np.abs(_TIE_EPS * observed)
    greater = (null >= observed - gamma).sum(axis=0)
    less = (null <= observed + gamma).sum(axis=0)
    adj = 0 if exact else 1
    n = signs.shape[0]
    p = np.minimum(1.0, 2 * np.minimum((greater + adj) / (n + adj), (less + adj) / (n + adj)))
    p = np.where(np.isnan(observed), np.nan, p)
    if flat:
        return SignFlipResult(observed[:1], p[:1], exact, n)
    return SignFlipResult(observed, p, exact, n)
